"""A results table written by an earlier run (``results.csv``), read back for ``--resume``: checked up
front, before any job runs, so a damaged or edited file is one line naming its row and column instead
of hours of training that crash before the summary.

The checks: every required column is there; integer columns hold integers, number columns numbers
(``nan`` or empty allowed: a metric not computed; ``inf`` refused); text cells do not start like a
spreadsheet formula (``=``, ``+``, ``-``, ``@``, a tab or carriage return), which a summary would copy
into a file someone opens in a spreadsheet.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines.studies.out_folder import open_regular
from posenc import PosencError

#: how a spreadsheet formula (or an injected one) starts (OWASP's "CSV injection")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
MAX_BYTES = 64 << 20  # a results table of this size is not one of ours


def read_results(path: Path, required: Sequence[str], integers: Sequence[str] = (),
                 text: Sequence[str] = (), ranges: dict[str, tuple[float, float]] | None = None,
                 unique: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The rows of ``path`` with typed values: ``int`` for ``integers``, ``str`` for ``text`` (and
    columns not required), ``float`` for every other required column.

    Args:
        path: the table (a regular file: a link or a FIFO is refused, never followed or waited on).
        required: the columns it must have.
        integers: columns of whole numbers (ASCII digits).
        text: columns of text.
        ranges: column → (low, high): a number outside is refused (``nan`` is allowed: not computed).
        unique: columns whose values together name a row: a row given twice is refused.

    Raises:
        PosencError: ``path``, the row (and its line) and the column, in one line.
    """
    try:
        with open_regular(path) as fh:
            if os.fstat(fh.fileno()).st_size > MAX_BYTES:
                raise PosencError(f"{path}: {os.fstat(fh.fileno()).st_size} bytes is not a results table of "
                                  "this command (over 64 MiB); run without --resume")
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            missing = [c for c in required if c not in header]
            if missing:
                names = ", ".join(header) or "none"
                raise PosencError(f"{path}: no column {missing[0]!r} (columns: {names}); this is not a "
                                  "results table of this command: run without --resume")
            rows = [_typed_row(row, n, path, required, integers, text)
                    for n, row in enumerate(reader, start=1)]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise PosencError(f"{path}: cannot read as CSV ({type(exc).__name__}: {exc}); "
                          "run without --resume") from None
    _check_rows(rows, path, ranges or {}, unique)
    return rows


def _check_rows(rows: list[dict[str, Any]], path: Path, ranges: dict[str, tuple[float, float]],
                unique: Sequence[str]) -> None:
    """Every number within its range, and no row named twice (see :func:`read_results`)."""
    seen: dict[tuple, int] = {}
    for n, row in enumerate(rows, start=1):
        for col, (low, high) in ranges.items():
            value = row.get(col)
            if not isinstance(value, float) or math.isnan(value):
                continue
            if value < low:
                why = "is negative" if low == 0 else f"is below {low:g}"
            elif value > high:
                why = f"is beyond any float32 forecast's error (at most {high:.3g})"
            else:
                continue
            raise PosencError(f"{path}: row {n} (line {n + 1}), column {col!r}: {value:g} {why}; fix or "
                              "delete the row, or run without --resume")
        key = tuple(row.get(c) for c in unique)
        if unique and key in seen:
            named = ", ".join([str(key[0]), *(f"{c} {v}" for c, v in zip(unique[1:], key[1:], strict=True))])
            raise PosencError(f"{path}: row {n} (line {n + 1}) repeats row {seen[key]} ({named}); delete one "
                              "of them, or run without --resume")
        seen.setdefault(key, n)


def _typed_row(row: dict[str, Any], n: int, path: Path, required: Sequence[str], integers: Sequence[str],
               text: Sequence[str]) -> dict[str, Any]:
    """One row checked and typed (see :func:`read_results`); ``n`` counts data rows from 1."""
    if None in row:  # more cells than the header names
        raise PosencError(f"{path}: row {n} (line {n + 1}) has more cells than the header's "
                          f"{len(row) - 1} columns")
    out: dict[str, Any] = {}
    for col, cell in row.items():
        cell = "" if cell is None else cell
        where = f"{path}: row {n} (line {n + 1}), column {col!r}"
        if col in text or col not in required:
            if cell.startswith(FORMULA_START):
                raise PosencError(f"{where} starts like a spreadsheet formula ({cell[:20]!r}); "
                                  "fix or delete the row, or run without --resume")
            out[col] = cell
        elif col in integers:
            if not (cell.strip().isascii() and cell.strip().isdigit()):  # int() takes '²' or '٣' too
                raise PosencError(f"{where}: expected a whole number, got {cell[:20]!r}; "
                                  "fix or delete the row, or run without --resume")
            out[col] = int(cell)
        else:
            out[col] = _number(cell, where)
    return out


def _number(cell: str, where: str) -> float:
    if not cell.strip():
        return math.nan
    try:
        value = float(cell)
    except ValueError:
        raise PosencError(f"{where}: expected a number, got {cell[:20]!r}; fix or delete the row, or run "
                          "without --resume") from None
    if math.isinf(value):
        raise PosencError(f"{where}: {cell!r} is not finite; fix or delete the row, or run without --resume")
    return value


__all__ = ["FORMULA_START", "read_results"]
