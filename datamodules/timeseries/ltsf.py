"""The long-horizon forecasting (LTSF) protocol of the ETT benchmark, as the literature runs it.

Informer / Autoformer / PatchTST / DLinear split ETTh1 by row: train ``[0, 8640)`` (12 months of
hours), val ``[8640, 11520)`` and test ``[11520, 14400)`` (4 months each); rows past 14,400 are
unused. Val and test windows may start their lookback in the previous split (the first target of a
val window is row 8640 at the earliest). Every column is standard-scaled with the mean and std of
the train rows only, all columns go in and all come out, and MSE / MAE are averaged over every
channel, horizon step and test window of the *scaled* data (every window counts: for lookback 336
and horizon 96 that is 2,785 test windows).

The rest of the family (Weather, Electricity, Traffic, Exchange, ILI: Autoformer's "custom" loader)
splits by fraction: train the first ``int(0.7·n)`` rows, test the last ``int(0.2·n)``, val the rows
between (Weather: 36,887 / 5,270 / 10,539). :func:`detect_protocol` tells them apart by the file
name (``ETTh*`` / ``ETTm*``: the ETT rule, its 12 / 4 / 4 months counted in rows of the file's step,
×4 for the 15-minute files; anything else: ``custom``). Rows are taken in file order, as the
literature's loaders take them (Weather repeats a few timestamps), and values such as Weather's
-9999 sentinels are kept and scaled like any other, as the published numbers were: they are
counted per channel (:attr:`LTSFData.sentinels`) so the benchmark can say they are there. Every
val and test window is scored as published; the *training* windows that touch a sentinel row are
left out of every model's fit (Weather: all its sentinels are in the train rows, where a -9999
target divided by a calm window's own std dominated the RevIN models' least squares).

This module is that protocol and nothing else (no Lightning or MLflow): :func:`read_ltsf` reads a
file with the project's CSV parsing, :meth:`LTSFData.windows` gives a split's windows and
:func:`scaled_errors` the metrics. :func:`load_ltsf` is :func:`read_ltsf` through a cache keyed by
the file's content: the benchmark parses its file once, in the parent, and each of its runs (config ×
horizon × seed, in this process or a worker) loads the parsed, scaled series from there.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn.preprocessing import StandardScaler

from datamodules.cache import atomic_write, cached_file
from datamodules.timeseries.config import PROTOCOLS
from datamodules.timeseries.parse import Series, check_mostly_observed, parse_series, read_table
from datamodules.timeseries.timestamps import step_minutes
from datamodules.timeseries.windows import apply_scaler, fit_scaler, gather_windows, window_starts
from posenc import PosencError

#: The hourly ETT row borders: train [0, 8640), val [8640, 11520), test [11520, 14400).
ETT_HOURLY_BORDERS = (8640, 11520, 14400)
SPLITS = ("train", "val", "test")
#: The values the literature's files use for "not measured" (kept, counted, reported).
SENTINELS = (-9999.0,)


def detect_protocol(name: str | Path) -> str:
    """``ett`` for the ETT files (``ETTh1.csv``, ``ETTm2.csv``…: the stem starts with ``ETTh`` or
    ``ETTm``), ``custom`` for every other file of the family."""
    stem = Path(name).name
    return "ett" if stem.startswith(("ETTh", "ETTm")) else "custom"


def ett_borders(step_minutes: float, source: str = "<data>") -> tuple[int, int, int]:
    """The ETT rule's borders for a file stepping every ``step_minutes``: 12 / 4 / 4 months of 30
    days in rows (hourly: 8640 / 11520 / 14400; 15 minutes: four times that)."""
    per_hour = 60.0 / step_minutes if step_minutes > 0 else 0.0
    if per_hour < 1 or abs(per_hour - round(per_hour)) > 1e-9:
        raise PosencError(f"{source}: the ETT protocol needs a step that divides an hour, the file steps "
                          f"every {step_minutes:g} min (use --protocol custom)")
    return tuple(int(b * round(per_hour)) for b in ETT_HOURLY_BORDERS)  # type: ignore[return-value]


def custom_borders(n_rows: int) -> tuple[int, int, int]:
    """Autoformer's ``custom`` rule: train ``int(0.7·n)`` rows, test the last ``int(0.2·n)``, val the
    rest between; e.g. (36887, 42157, 52696) for Weather's 52,696 rows."""
    train, test = int(n_rows * 0.7), int(n_rows * 0.2)
    return train, n_rows - test, n_rows


def protocol_borders(protocol: str, n_rows: int, step_minutes: float | None,
                     source: str = "<data>") -> tuple[int, int, int]:
    """The row borders (train end, val end, test end) of ``protocol`` for a file."""
    if protocol == "custom":
        return custom_borders(n_rows)
    if protocol != "ett":
        raise PosencError(f"unknown protocol {protocol!r}; one of {', '.join(PROTOCOLS)}")
    if step_minutes is None:
        raise PosencError(f"{source}: the ETT protocol needs datetimes in the time column to count months "
                          "in rows (use --protocol custom)")
    return ett_borders(step_minutes, source)


def split_bounds(n_rows: int, borders: tuple[int, int, int] = ETT_HOURLY_BORDERS,
                 source: str = "<data>") -> dict[str, tuple[int, int]]:
    """``{split: (first row, end row)}`` for a series of ``n_rows`` rows; an error naming the file
    when it is shorter than the protocol's last border."""
    a, b, c = borders
    if not 0 < a < b < c:
        raise PosencError(f"split borders must be increasing and positive, got {list(borders)}")
    if n_rows < c:
        raise PosencError(f"{source}: the protocol needs at least {c} rows (train [0, {a}), val [{a}, {b}), "
                          f"test [{b}, {c})), the file has {n_rows}")
    return {"train": (0, a), "val": (a, b), "test": (b, c)}


def n_windows(bounds: tuple[int, int], lookback: int, horizon: int) -> int:
    """Windows in a split ``(lo, hi)`` whose lookback may reach back before ``lo`` (not before row 0):
    ``hi − horizon − max(lo, lookback) + 1`` (0 when negative); e.g. 2,785 for the ETTh1 test split
    at lookback 336 and horizon 96 (= 2880 − 96 + 1)."""
    lo, hi = bounds
    return max(0, hi - horizon - max(lo, lookback) + 1)


@dataclass
class LTSFData:
    """A series under the protocol: ``values`` (N, C) scaled with the train rows' scaler, ``bounds``
    per split, the column names, the fitted ``scaler`` and the file's name (for messages)."""

    values: np.ndarray
    bounds: dict[str, tuple[int, int]]
    columns: list[str]
    scaler: StandardScaler
    source: str
    protocol: str = "ett"
    sentinels: dict[str, int] = field(default_factory=dict)  # column → sentinel values kept (non-zero only)
    period: int = 24  # a day in rows (24 hourly, 96 every 15 min, 144 every 10 min): seasonal naive's lag
    sentinel_rows: np.ndarray | None = None  # (N,) bool: a row holds a sentinel value in some channel

    @property
    def n_channels(self) -> int:
        return self.values.shape[1]

    def starts(self, split: str, lookback: int, horizon: int) -> np.ndarray:
        """First-target rows τ of every window of ``split`` (lookback rows ``[τ − L, τ)``, targets
        ``[τ, τ + H)`` inside the split). Training windows whose rows hold a sentinel value are left
        out (what every model trains and fits on); val and test keep every window, as the protocol
        scores them."""
        if split not in self.bounds:
            raise PosencError(f"unknown split {split!r}; one of {', '.join(SPLITS)}")
        starts = window_starts(self.bounds[split], lookback, horizon, context_from=0)
        if split != "train" or self.sentinel_rows is None or not self.sentinel_rows.any():
            return starts
        seen = np.concatenate(([0], np.cumsum(self.sentinel_rows)))  # sentinel rows before each row
        return starts[seen[starts + horizon] == seen[starts - lookback]]

    def windows(self, split: str, lookback: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
        """Every window of ``split``: lookbacks x (n, L, C) and targets y (n, H, C), scaled."""
        starts = self.starts(split, lookback, horizon)
        if len(starts) == 0:
            raise PosencError(f"{self.source}: the {split} split {self.bounds[split]} holds no window of "
                              f"lookback {lookback} + horizon {horizon}")
        return (gather_windows(self.values, starts, lookback, 0),  # (n, L, C)
                gather_windows(self.values, starts, 0, horizon))  # (n, H, C)


def scale_protocol(raw: np.ndarray, columns: list[str], borders: tuple[int, int, int] = ETT_HOURLY_BORDERS,
                   source: str = "<data>") -> LTSFData:
    """Cut ``raw`` (N, C) to the protocol's rows and scale it with a scaler fitted on the train rows
    only (no val/test value reaches the scaler)."""
    bounds = split_bounds(len(raw), borders, source)
    raw = np.asarray(raw, dtype=np.float64)[: borders[2]]  # rows past the test split are unused
    observed = ~np.isnan(raw)
    scaler = fit_scaler(raw, observed, bounds["train"][1], columns)
    return LTSFData(apply_scaler(scaler, raw), bounds, list(columns), scaler, source)


def read_ltsf(path: str | Path, time_col: str = "date", target_cols: list[str] | None = None,
              borders: tuple[int, int, int] | None = None, protocol: str | None = None) -> LTSFData:
    """Read a CSV/parquet file of the family with the project's parser, rows in file order, and apply
    its protocol: ``protocol`` (``ett`` / ``custom``; ``None``: :func:`detect_protocol`), or the
    explicit ``borders``. Every column but ``time_col`` is a channel unless ``target_cols`` names them."""
    file = Path(path)
    if not file.is_file():
        raise PosencError(f"{file}: no such file (pass the path of ETTh1.csv or your own file)")
    table = read_table(file)
    if time_col not in table.columns:
        names = ", ".join(map(str, table.columns))
        raise PosencError(f"{file.name}: no time column {time_col!r}; columns are {names}")
    columns = list(target_cols or [c for c in table.columns if c != time_col])
    series = parse_series(table, None, columns, source=file.name)  # the protocol splits rows as they are
    protocol, step = protocol or detect_protocol(file), step_minutes(table[time_col])
    if borders is None:
        borders = protocol_borders(protocol, len(series.targets), step, file.name)
    check_filled(series, tuple(borders), file.name)
    data = scale_protocol(series.targets, columns, tuple(borders), file.name)
    data.protocol = protocol
    if step and 1440 % step == 0:
        data.period = int(1440 // step)
    raw = np.asarray(series.targets, dtype=np.float64)[: borders[2]]
    flagged = np.isin(raw, SENTINELS)  # (N, C)
    counts = flagged.sum(axis=0)
    data.sentinel_rows = flagged.any(axis=1)
    data.sentinels = {c: int(k) for c, k in zip(columns, counts, strict=True) if k}
    return data


#: the cache entries' layout; an entry of another version is parsed again
LTSF_CACHE_VERSION = 1
_SCALER = ("mean_", "var_", "scale_", "n_samples_seen_")


def load_ltsf(path: str | Path, time_col: str = "date", target_cols: list[str] | None = None,
              borders: tuple[int, int, int] | None = None, protocol: str | None = None,
              cache_dir: str | Path | None = None) -> LTSFData:
    """:func:`read_ltsf`, through ``cache_dir`` when given (:func:`~datamodules.cache.cached_file`): the
    entry ``ltsf-<content>-<settings>.npz`` (the first 16 hex digits of the SHA-256 of the file's bytes,
    and 8 of the settings read with) is loaded when it is there and complete, else the file is parsed,
    the entry written (to a temporary name, then renamed: a reader never sees half an entry) and
    loaded. The entry holds arrays and JSON only (read with ``allow_pickle=False``: nothing in it can
    run). Same numbers either way, to the bit."""
    file = Path(path)
    if cache_dir is None or not file.is_file():
        return read_ltsf(file, time_col, target_cols, borders, protocol)
    settings = json.dumps({"version": LTSF_CACHE_VERSION, "name": file.name, "time_col": time_col,
                           "target_cols": target_cols, "borders": list(borders) if borders else None,
                           "protocol": protocol}, sort_keys=True)
    folder, tag = Path(cache_dir), hashlib.sha256(settings.encode()).hexdigest()[:8]
    entry = lambda digest: folder / f"ltsf-{digest[:16]}-{tag}.npz"  # noqa: E731

    def make_entry(digest: str) -> None:
        data = read_ltsf(file, time_col, target_cols, borders, protocol)
        atomic_write(entry(digest), lambda fh: _write_entry(fh, data))

    return cached_file(file, folder, lambda digest: _read_entry(entry(digest)), make_entry)[0]


def _write_entry(fh: io.BufferedIOBase, data: LTSFData) -> None:
    meta = {"version": LTSF_CACHE_VERSION, "bounds": data.bounds, "columns": data.columns,
            "source": data.source, "protocol": data.protocol, "sentinels": data.sentinels,
            "period": data.period}
    arrays = {f"scaler.{k}": np.asarray(getattr(data.scaler, k)) for k in _SCALER}
    sentinel_rows = data.sentinel_rows if data.sentinel_rows is not None else np.zeros(0, dtype=bool)
    np.savez(fh, values=data.values, sentinel_rows=sentinel_rows, meta=np.array(json.dumps(meta)), **arrays)


def _read_entry(entry: Path) -> LTSFData | None:
    """The cached :class:`LTSFData`; ``None`` when the entry is missing, of another version or unreadable."""
    if not entry.is_file():
        return None
    try:
        with np.load(entry, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("version") != LTSF_CACHE_VERSION:
                return None
            scaler = StandardScaler()
            for k in _SCALER:
                value = z[f"scaler.{k}"]
                setattr(scaler, k, value if value.ndim else value.item())
            scaler.n_features_in_ = len(meta["columns"])
            rows = z["sentinel_rows"]
            bounds = {k: tuple(v) for k, v in meta["bounds"].items()}
            data = LTSFData(z["values"], bounds, list(meta["columns"]), scaler, meta["source"],
                            meta["protocol"], dict(meta["sentinels"]), int(meta["period"]),
                            rows if len(rows) else None)
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError):
        return None
    return data


def check_filled(series: Series, borders: tuple[int, int, int], source: str) -> int:
    """Nothing fabricated is scored: a target column more than
    :data:`~datamodules.timeseries.parse.MAX_MISSING` empty in the protocol's rows is refused, and so is
    any missing value in the scored (val and test) rows; missing train values are filled (linear in
    time), counted on stderr, trained on and never scored.

    Returns:
        How many train values were filled.

    Raises:
        PosencError: the column (and, in a scored split, the row and time), in one line.
    """
    end = min(borders[2], len(series))
    missing = ~series.observed[:end]
    check_mostly_observed(series.observed[:end], series.target_cols, source, "protocol rows",
                          "the benchmark would score forecasts against filled values")
    for j, col in enumerate(series.target_cols):
        scored = np.flatnonzero(missing[borders[0]:end, j])
        if len(scored):
            row = borders[0] + int(scored[0])
            split = "val" if row < borders[1] else "test"
            raise PosencError(f"{source}: column {col!r} has no value at {series.row_label(row)}, in the "
                              f"{split} split: the benchmark scores only values in the file; fill it "
                              "yourself or leave the column out")
    filled = int(missing.sum())
    if filled:
        counts = ", ".join(f"{c}={int(missing[:, j].sum())}" for j, c in enumerate(series.target_cols)
                           if missing[:, j].any())
        print(f"note: {source}: {filled} missing train value(s) filled by linear interpolation ({counts}); "
              "trained on, never scored", file=sys.stderr)
    return filled


def scaled_errors(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """``mse_scaled`` and ``mae_scaled``: the mean over every window, step and channel of the squared
    / absolute error of (n, H, C) arrays on the scaled data (the literature's metrics)."""
    if pred.shape != truth.shape:
        raise PosencError(f"forecast shape {pred.shape} differs from the targets' {truth.shape}")
    err = pred.astype(np.float64) - truth.astype(np.float64)
    return {"mse_scaled": float(np.mean(err**2)), "mae_scaled": float(np.mean(np.abs(err)))}
