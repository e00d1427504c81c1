"""Choose a configuration on the validation split: read ``evaluate --split val`` results of several
trained runs, average each configuration (scheme × inference variant) over its seeds, and name the
one with the lowest mean validation metric at the selection lengths — before any test number is
read for the choice.

Usage::

    # one evaluate per trained run, its folder named <scheme>-<seed>:
    python -m pipelines.eval.evaluate RUN --split val --window --factors 1 2 4 8 16 32 64 \\
        --no-mlflow --out outputs/valsel/rope-0
    python -m pipelines.studies.val_choice outputs/valsel/* --select 1024 2048 --out outputs/valsel/choice.md

The rule (lower is better, as bits/base; ``--higher-is-better`` flips it): among configurations with
at least ``--min-seeds`` seeds and a score at every selection length, the lowest mean over seeds of
the metric averaged over the selection lengths. Configurations with fewer seeds are listed, never
chosen.
"""

from __future__ import annotations

import argparse
import csv
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipelines.console import user_errors_exit
from pipelines.eval.statistics import estimate
from pipelines.studies.tables import md_table
from posenc import PosencError

FOLDER = re.compile(r"^(?P<scheme>.+)-(?P<seed>\d+)$")  # <scheme>-<seed>

#: (scheme, variant) → seed → length → metric
Scores = dict[tuple[str, str], dict[int, dict[int, float]]]


def read_runs(folders: Sequence[Path]) -> tuple[Scores, str]:
    """Every folder's ``results.csv`` (rows of one split, ``val``), keyed by its scheme and seed."""
    scores: Scores = defaultdict(dict)
    metric = ""
    for folder in folders:
        m = FOLDER.match(folder.name)
        if m is None:
            raise PosencError(f"{folder}: the folder name must be <scheme>-<seed> (e.g. rope-0)")
        path = folder / "results.csv"
        if not path.is_file():
            raise PosencError(f"{path}: no results.csv (run evaluate --split val --out {folder})")
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows or rows[0].get("split") != "val":
            raise PosencError(f"{path}: not a validation sweep (evaluate --split val writes split=val)")
        metric = next(k for k in rows[0] if k not in ("variant", "length", "factor", "retained_gain",
                                                       "status", "split"))
        for row in rows:
            if row["status"] == "ok":
                cell = scores[(m["scheme"], row["variant"])].setdefault(int(m["seed"]), {})
                cell[int(row["length"])] = float(row[metric])
    return scores, metric


def selection_score(by_seed: dict[int, dict[int, float]], select: Sequence[int]) -> list[float] | None:
    """Per seed: the metric averaged over ``select`` lengths (``None`` if a seed misses one)."""
    out = []
    for lengths in by_seed.values():
        if any(n not in lengths for n in select):
            return None
        out.append(float(np.mean([lengths[n] for n in select])))
    return out


def choose(scores: Scores, select: Sequence[int], min_seeds: int,
           higher_is_better: bool = False) -> tuple[str, str] | None:
    """The configuration the rule picks (see the module docstring), or ``None``."""
    best, best_value = None, None
    for config, by_seed in sorted(scores.items()):
        per_seed = selection_score(by_seed, select)
        if per_seed is None or len(per_seed) < min_seeds:
            continue
        value = float(np.mean(per_seed)) * (-1 if higher_is_better else 1)
        if best_value is None or value < best_value:
            best, best_value = config, value
    return best


def table(scores: Scores, metric: str, chosen: tuple[str, str] | None) -> str:
    """Markdown: mean ± 95 % Student-t half-width over seeds per configuration and length."""
    lengths = sorted({n for by_seed in scores.values() for s in by_seed.values() for n in s})
    rows = []
    for (scheme, variant), by_seed in sorted(scores.items()):
        cells = []
        for n in lengths:
            values = [s[n] for s in by_seed.values() if n in s]
            cells.append(estimate(values).text() if values else "–")
        mark = " **(chosen)**" if (scheme, variant) == chosen else ""
        rows.append([f"{scheme}{mark}", variant, len(by_seed), *cells])
    table = md_table(["scheme", "variant", "seeds", *(f"L={n}" for n in lengths)], rows)
    return table + f"\nValidation {metric}, mean ± 95 % half-width over seeds.\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.studies.val_choice",
                                description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", type=Path,
                   help="evaluate --split val --out folders, named <scheme>-<seed>")
    p.add_argument("--select", nargs="+", type=int, required=True, help="lengths the choice averages over")
    p.add_argument("--min-seeds", type=int, default=3, help="seeds a configuration needs to be chosen")
    p.add_argument("--higher-is-better", action="store_true", help="the metric is a score (AUROC, accuracy)")
    p.add_argument("--out", type=Path, default=None, help="also write the table and the choice here")
    return p.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> tuple[str, str] | None:
    args = parse_args(argv)
    scores, metric = read_runs(args.folders)
    chosen = choose(scores, args.select, args.min_seeds, args.higher_is_better)
    pick = (" + ".join(chosen) if chosen
            else f"none (no configuration has {args.min_seeds} seeds and every selection length)")
    rule = (f"Chosen on validation: {pick} — the lowest mean {metric} over lengths "
            f"{' '.join(map(str, args.select))} among configurations with ≥ {args.min_seeds} seeds.")
    text = table(scores, metric, chosen) + "\n" + rule + "\n"
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    with user_errors_exit():
        run(argv)


if __name__ == "__main__":
    main()
