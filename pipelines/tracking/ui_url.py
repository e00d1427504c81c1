"""Print the MLflow UI address of the runs page of the newest experiment (used by ``make ui``)."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path


def newest_experiment_id(db: Path) -> str | None:
    """Id of the experiment holding the most recent run, read straight from the sqlite store."""
    if not db.is_file():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            row = con.execute(
                "SELECT experiment_id FROM runs ORDER BY start_time DESC LIMIT 1"
            ).fetchone()
    except sqlite3.DatabaseError:
        return None
    return str(row[0]) if row else None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--db", default="mlflow.db")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5000)
    args = ap.parse_args(argv)
    exp = newest_experiment_id(Path(args.db))
    base = f"http://{args.host}:{args.port}"
    if exp is None:
        print(f"No runs in {args.db} yet (run `make train` first); the UI will be at {base}", file=sys.stderr)
    else:
        print(f"MLflow UI (ready in ~15 s): {base}/#/experiments/{exp}/runs", file=sys.stderr)


if __name__ == "__main__":
    main()
