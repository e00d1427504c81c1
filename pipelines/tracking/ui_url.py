"""Print where to look in the MLflow UI (used by ``make ui``): the runs page of the ``posenc``
experiment (the one ``make train`` logs to; else the experiment of the newest run) and, when a
comparison has run, its parent run."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

DEFAULT_BASE = "http://127.0.0.1:5000"
TRAIN_EXPERIMENT = "posenc"
COMPARE_TAG = "posenc.compare"
# MLflow 3's UI opens in its GenAI view (traces, judges, prompts) unless the address asks for the
# model-training one; the experiments also carry the training kind (pipelines.tracking.store).
TRAINING_VIEW = "workflowType=machine_learning"


def run_url(experiment_id: str, run_id: str | None = None, base: str = DEFAULT_BASE,
            page: str = "runs") -> str:
    """The UI address of an experiment's runs table (``page="models"``: its models, each with its registered
    versions), or of one run, in MLflow's model-training view. The registry's own page (``#/models``) is
    no address for that: it drops the view from the address, opens in the GenAI view and greets with a
    "new model registry UI" pop-up (MLflow 3.17, checked in headless Chromium: docs/ui.md)."""
    page = f"runs/{run_id}" if run_id else page
    return f"{base}/#/experiments/{experiment_id}/{page}?{TRAINING_VIEW}"


def _query(db: Path, sql: str, *params: str) -> tuple | None:
    if not db.is_file():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            return con.execute(sql, params).fetchone()
    except sqlite3.DatabaseError:
        return None


def newest_experiment_id(db: Path) -> str | None:
    """Id of the experiment holding the most recent run, read straight from the sqlite store."""
    row = _query(db, "SELECT experiment_id FROM runs ORDER BY start_time DESC LIMIT 1")
    return str(row[0]) if row else None


def train_experiment_id(db: Path, name: str = TRAIN_EXPERIMENT) -> str | None:
    """Id of experiment ``name`` if it holds a run."""
    row = _query(db, "SELECT e.experiment_id FROM experiments e JOIN runs r "
                     "ON r.experiment_id = e.experiment_id WHERE e.name = ? LIMIT 1", name)
    return str(row[0]) if row else None


def newest_comparison(db: Path) -> tuple[str, str] | None:
    """(experiment id, run id) of the newest comparison's parent run (``make compare``)."""
    row = _query(db, "SELECT r.experiment_id, r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                     "WHERE t.key = ? AND t.value = 'parent' ORDER BY r.start_time DESC LIMIT 1", COMPARE_TAG)
    return (str(row[0]), str(row[1])) if row else None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="mlflow.db")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5000)
    args = ap.parse_args(argv)
    db, base = Path(args.db), f"http://{args.host}:{args.port}"
    exp = train_experiment_id(db) or newest_experiment_id(db)
    if exp is None:
        print(f"No runs in {args.db} yet (run `make train` first); the UI will be at {base}", file=sys.stderr)
        return
    print(f"MLflow UI (ready in ~15 s): {run_url(exp, base=base)}", file=sys.stderr)
    comparison = newest_comparison(db)
    if comparison is not None:
        print(f"  latest comparison (make compare): {run_url(*comparison, base=base)}", file=sys.stderr)
    models = run_url(exp, base=base, page="models")
    print(f"  models and their registered versions: {models}", file=sys.stderr)


if __name__ == "__main__":
    main()
