"""The LTSF benchmark's ``--out`` (:mod:`pipelines.studies.ltsf`): the files it writes there, written so
that nothing planted in the folder is followed or waited on (:mod:`pipelines.studies.out_folder`), and
the rows a ``--resume`` keeps, checked before any job runs."""

from __future__ import annotations

import argparse
import csv
import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.timeseries.ltsf import LTSFData
from pipelines.studies.ltsf.ensemble import resumed_rows
from pipelines.studies.ltsf.report import FIELDS, figures, summary_markdown
from pipelines.studies.out_folder import append_line, remove_folder, write_file
from pipelines.studies.results_table import read_results

#: the largest error a float32 forecast of float32 values can have: |error| ≤ 2 · float32's max, so a
#: results row beyond these is not one this command wrote
MAX_MAE = 2 * float(np.finfo(np.float32).max)
MAX_MSE = MAX_MAE**2
#: what the benchmark writes in --out (checked before anything runs: :func:`open_out`)
OUT_FILES = ("results.csv", "summary.md", "ltsf.png", "lookbacks.png", "paired.png")
PREDICTIONS = "predictions"


def done_rows(path: Path, resume: bool) -> list[dict[str, Any]]:
    """``--resume``: the rows of an earlier ``results.csv``, checked before any job runs (one line
    naming the row and column: :func:`pipelines.studies.results_table.read_results`): types, ranges
    (errors ≥ 0 and within what a float32 forecast can score, times ≥ 0) and no row given twice."""
    if not resume or not path.exists():
        return []
    errors = {c: (0.0, MAX_MSE if "mse" in c else MAX_MAE) for c in FIELDS if c.startswith(("test/", "val/"))}
    times = {"time/cpu_s": (0.0, math.inf), "time/wall_s": (0.0, math.inf)}
    return read_results(path, FIELDS, integers=("horizon", "seed", "n_test_windows"),
                        text=("model", "chosen"), ranges={**errors, **times},
                        unique=("model", "horizon", "seed"))


def csv_text(rows: list[dict[str, Any]], fields: list[str], header: bool = True) -> str:
    """``rows`` as CSV text (the header first, if ``header``)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def append_row(path: Path, row: dict[str, Any], fields: list[str]) -> None:
    """One row at the end of ``results.csv`` (no link followed, no FIFO waited on: a regular file)."""
    append_line(path, csv_text([row], fields, header=not path.exists()))


def prepare_out(out: Path, data: LTSFData, args: argparse.Namespace,
                fields: list[str]) -> list[dict[str, Any]]:
    """The rows kept in ``--out`` (``--resume``: checked, with what an unfinished ensemble needs; the
    file rewritten without the rows to train again); a fresh run starts from an empty folder's files:
    no earlier ``results.csv`` and no saved forecasts (a stale one must not join an ensemble)."""
    results = out / "results.csv"
    if not args.resume:
        results.unlink(missing_ok=True)
        remove_folder(out / PREDICTIONS)
        return []
    rows = done_rows(results, True)
    kept = resumed_rows(rows, data, args)
    if len(kept) < len(rows):
        write_file(results, csv_text(kept, fields))
    return kept


def write_summary(out: Path, rows: list[dict[str, Any]], args: argparse.Namespace,
                  skipped: list[str]) -> list[Path]:
    """``summary.md`` and the figures (not for ``--val-only``); the files, ``results.csv`` first."""
    write_file(out / "summary.md", summary_markdown(rows, args, skipped))
    files = [out / "results.csv", out / "summary.md"]
    if rows and not args.val_only:
        files += figures(rows, out, args.data, args.lookback)
    return files
