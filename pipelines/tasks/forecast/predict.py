"""Forecasts with timestamps from a new table (CSV/parquet or DataFrame) for a trained Forecaster.

The table needs the training's time, target and covariate columns. It is parsed and cleaned like
the training data (``datamodules.timeseries.parse.parse_series``: sorting, NaN policy, optional gap
filling), scaled with the scalers fitted on the training rows (stored in the checkpoint), given the
same calendar features, and the model forecasts ``horizon`` steps after each forecast origin from the
``lookback`` rows before it. Forecast times come from the table where it has the rows, otherwise
continue at its median step. Outputs are in the data's original units.

A model with known-future inputs gets the horizon's calendar features (computed for times past the
table's end too) and its ``future_cols`` values, which must be in the table: rows after the last
observed target with those columns filled (targets empty) carry them; the forecast then starts
after the last observed target.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from datamodules.timeseries.calendar import calendar_features
from datamodules.timeseries.parse import parse_series
from datamodules.timeseries.select import future_columns
from datamodules.timeseries.windows import check_scaled, fit_scaler, to_float32
from pipelines.tasks.windows import inference_meta
from posenc import PosencError


def forecast_settings(model: torch.nn.Module) -> dict[str, Any]:
    """The data description stored with the model (columns, calendar, scalers); a clear error if absent."""
    meta = inference_meta(model)
    if "scaler" not in meta:
        raise PosencError("this Forecaster carries no data description (columns, training scalers): it "
                          "was not trained through pipelines.train (RegisterModel callback)")
    return {**meta["data"], **meta["scaler"]}


def prepare(model: torch.nn.Module, data: pd.DataFrame | str | Path) -> tuple:
    """Parse and scale a table: (series, scaled targets (N, C), covariates (N, K), settings)."""
    cfg = forecast_settings(model)
    source = Path(data).name if isinstance(data, (str, Path)) else "<DataFrame>"
    s = parse_series(data, cfg["time_col"], list(cfg["target_cols"]), list(cfg["covariate_cols"]),
                     select=cfg.get("select"), source=source, time_format=cfg.get("time_format"),
                     nan_policy=cfg.get("nan_policy", "interpolate"),
                     fill_gaps=bool(cfg.get("fill_gaps", False)), duplicates=cfg.get("duplicates", "error"))
    x = (s.targets - np.asarray(cfg["target_loc"])) / np.asarray(cfg["target_scale"])  # (N, C)
    x = check_scaled(to_float32(np.nan_to_num(x, nan=0.0)), s.target_cols, s)
    cov = s.covariates
    if cov.shape[1]:
        cov = (cov - np.asarray(cfg["cov_loc"])) / np.asarray(cfg["cov_scale"])  # (N, K0)
    cov = check_scaled(to_float32(np.nan_to_num(cov, nan=0.0)), s.covariate_cols, s)
    cal = calendar_features(s.timestamps, list(cfg.get("calendar") or []), cfg.get("timezone"),
                            n_rows=len(s), time_kind=s.report.time_kind)
    cov = np.concatenate([cov, cal.astype(np.float32)], axis=1)  # (N, K)
    if s.timestamps is None:  # numeric time: keep the first value to write times in the column's units
        cfg["_time0"] = s.report.time0  # row order: 0, times are row numbers
    return s, x, cov, cfg


def forecast_times(s: Any, df_time0: float | None, idx: np.ndarray) -> list:
    """Times of rows ``idx`` (may run past the end: continued at the median step)."""
    n = len(s)
    step = s.report.step
    if s.timestamps is not None:
        last = s.timestamps[-1]
        inside = [s.timestamps[i] if i < n else last + pd.Timedelta(seconds=step * (i - n + 1)) for i in idx]
        return [t.isoformat() for t in inside]
    return [float(df_time0 + s.time[i] * step) if i < n else float(df_time0 + (s.time[-1] + i - n + 1) * step)
            for i in idx]


def predict_forecast(
    model: torch.nn.Module,
    data: pd.DataFrame | str | Path,
    *,
    lookback: int | None = None,
    every: int | None = None,
    batch_size: int = 64,
    progress=None,
    window: int | None = None,
    overlap: int | None = None,
) -> pd.DataFrame:
    """Forecast after the end of ``data`` (``every=None``) or at origins every ``every`` rows.

    Args:
        lookback: rows of history per forecast (default: the training lookback; a longer one needs
            an encoding defined past the training length, and must be a multiple of ``patch_len``).
        every: also forecast at rolling origins every ``every`` rows, counted back from the end.
        window: alias of ``lookback`` (the CLI's ``--window``); ``overlap`` is ignored.

    Returns:
        One row per origin and step: ``origin`` (time of the last lookback row), ``time``, ``step``
        (1..horizon), one column per target (the forecast) and ``<target>_actual`` where the table
        has the value.
    """
    s, x, cov, cfg = prepare(model, data)
    L = int(lookback or window or cfg["lookback"])
    if L % model.patch_len:
        raise PosencError(f"lookback {L} is not a multiple of the model's patch_len={model.patch_len}")
    H = model.horizon
    taus = forecast_origins(model, s, cfg, L, every)
    known = future_inputs(model, s, cov, cfg, taus)  # (B, H, F) or None
    names = list(cfg["target_cols"])
    frames = []
    for b in range(0, len(taus), batch_size):
        chunk = taus[b : b + batch_size]
        rows = chunk[:, None] + np.arange(-L, 0)[None, :]  # (B, L)
        if cfg.get("positions", "index") == "time":
            pos = torch.as_tensor(s.time[rows] - s.time[rows[:, :1]], dtype=torch.float32)  # (B, L)
        else:
            pos = torch.arange(L)
        dev = model.device
        fut = None if known is None else torch.as_tensor(known[b : b + batch_size], device=dev)
        with torch.inference_mode():
            y = model(torch.as_tensor(x[rows], device=dev), torch.as_tensor(cov[rows], device=dev),
                      pos.to(dev), fut).float().cpu().numpy()  # (B, H, C) scaled
        y = y * np.asarray(cfg["target_scale"]) + np.asarray(cfg["target_loc"])  # (B, H, C)
        check_forecast(y, s, chunk, names)
        frames += [_rows(s, cfg, tau, y[i], names, H) for i, tau in enumerate(chunk)]
        if progress is not None:
            progress(len(chunk))
    return pd.concat(frames, ignore_index=True)


def forecast_origins(model: torch.nn.Module, s: Any, cfg: dict, L: int, every: int | None) -> np.ndarray:
    """The forecast origins (rows after each lookback): after the last row with every target, and
    with ``every`` at rolling origins counted back from there. Trailing rows without targets move the
    origin back, which is said (a warning) unless they are the known-future rows the model reads."""
    if every is not None and every < 1:
        raise PosencError(f"every must be ≥ 1 (rows between forecast origins), got {every}")
    seen = s.observed.all(axis=1)  # (N,) rows with every target
    n = int(np.flatnonzero(seen)[-1]) + 1 if seen.any() else len(s)
    if n < L:
        raise PosencError(f"{s.report.source}: {n} rows, fewer than the lookback of {L} rows")
    trailing = len(s) - n
    if trailing and not (cfg.get("future_cols") and trailing <= model.horizon):
        warnings.warn(f"{s.report.source}: the last {trailing} row(s) lack a value of "
                      f"{', '.join(s.target_cols)}: the forecast origin is {s.row_label(n - 1)}, the last "
                      f"row with every target", stacklevel=3)
    return np.arange(n, L - 1, -int(every))[::-1] if every else np.array([n])


def check_forecast(y: np.ndarray, s: Any, taus: np.ndarray, names: list[str]) -> None:
    """A one-line error when forecasts ``y`` (B, H, C) from origins ``taus`` (B,) hold NaN or inf."""
    bad = np.argwhere(~np.isfinite(y))  # (n_bad, 3) origin, step, target
    if len(bad):
        b, h, c = (int(v) for v in bad[0])
        origin = s.row_label(int(taus[b]) - 1)
        raise PosencError(f"{s.report.source}: the forecast of {names[c]!r} from {origin} is not finite at "
                          f"step {h + 1} (the model overflowed); nothing was written")


def future_inputs(model: torch.nn.Module, s: Any, cov: np.ndarray, cfg: dict,
                  taus: np.ndarray) -> np.ndarray | None:
    """The known-future inputs (B, H, F) after each origin ``taus`` (B,), ``None`` for a model
    without them: ``future_cols`` from the table's rows (an error naming the columns where the
    horizon runs past the table), calendar features from the timestamps (continued past the end)."""
    if not getattr(model, "n_future", 0):
        return None
    covs, future = list(cfg["covariate_cols"]), list(cfg.get("future_cols") or [])
    calendar = list(cfg.get("calendar") or [])
    names = [f"{f}_{fn}" for f in calendar for fn in ("sin", "cos")]
    index = future_columns(covs, future, names, bool(cfg.get("future_calendar", True)))
    H, n = model.horizon, len(s)
    end = int(taus.max()) + H  # rows needed
    if future and end > n:
        raise PosencError(f"{s.report.source}: the model needs the known-future column(s) {future} for the "
                          f"{H} steps after the forecast origin, but the table ends {end - n} row(s) short; "
                          f"add those rows (targets empty, {', '.join(future)} filled)")
    full = cov
    if end > n:  # calendar features of the times past the end; no covariate is read there
        more = s.timestamps[-1] + pd.to_timedelta(np.arange(1, end - n + 1) * s.report.step, unit="s") \
            if s.timestamps is not None else None
        cal = calendar_features(more, calendar, cfg.get("timezone"), n_rows=end - n)  # (end - n, 2·|cal|)
        full = np.concatenate([cov, np.concatenate([np.zeros((end - n, len(covs))), cal], axis=1)])
    idx = taus[:, None] + np.arange(H)[None, :]  # (B, H) rows, possibly past the end
    return full[idx][..., index].astype(np.float32)  # (B, H, F)


def _rows(s: Any, cfg: dict, tau: int, y: np.ndarray, names: list[str], H: int) -> pd.DataFrame:
    idx = tau + np.arange(H)
    t0 = cfg.get("_time0")
    table = pd.DataFrame({"origin": forecast_times(s, t0, np.array([tau - 1]))[0],
                          "time": forecast_times(s, t0, idx), "step": np.arange(1, H + 1)})
    for c, name in enumerate(names):
        table[name] = y[:, c]
    inside = idx < len(s)
    for c, name in enumerate(names):
        actual = np.full(H, np.nan)
        ok = inside.copy()
        ok[inside] &= s.observed[idx[inside], c]
        actual[ok] = s.targets[idx[ok], c]
        table[f"{name}_actual"] = actual
    return table


def describe_series(dm: Any) -> dict[str, Any]:
    """Columns, cleaning, calendar and the training-row scalers of a TimeSeriesDataModule."""
    hp, s = {**dm.hparams["source"], **dm.hparams["cleaning"], **dm.hparams["seasonality"]}, dm.series
    cov = fit_scaler(s.covariates, s.cov_observed, dm.n_train, s.covariate_cols)  # as the datamodule did
    has_cov = s.covariates.shape[1] > 0
    data = {"time_col": hp.get("time_col", "Time"), "target_cols": list(s.target_cols),
            "covariate_cols": list(s.covariate_cols), "time_format": hp.get("time_format"),
            "timezone": hp.get("timezone"), "calendar": list(hp.get("calendar") or []),
            "nan_policy": hp.get("nan_policy", "interpolate"), "fill_gaps": bool(hp.get("fill_gaps", False)),
            "duplicates": hp.get("duplicates", "error"), "positions": dm.positions,
            "future_cols": list(hp.get("future_cols") or []),
            "future_calendar": bool(hp.get("future_calendar", True)), "select": hp.get("select"),
            "lookback": int(dm.lookback), "horizon": int(dm.horizon), "patch_len": int(dm.patch_len)}
    scaler = {"target_loc": dm.target_loc.tolist(), "target_scale": dm.target_scale.tolist(),
              "cov_loc": cov.mean_.tolist() if has_cov else [],
              "cov_scale": cov.scale_.tolist() if has_cov else []}
    return {"data": data, "scaler": scaler, "source": str(dm.source)}


def example_table(model: Any, dm: Any) -> pd.DataFrame:
    """The forecaster's input example for the MLflow signature, in the table's original units: the
    last rows of the training table, as ``make predict`` takes them. A model with ``future_cols``
    gets ``lookback + horizon`` rows whose last ``horizon`` carry only the time and those known-future
    columns (targets and the other covariates empty), so the forecast starts after the lookback rows.
    A series picked out of a long table (``data.select``) keeps the columns that pick it, as the long
    table a user passes has them."""
    s, data = dm.series, inference_meta(model)["data"]
    future = list(data.get("future_cols") or [])
    H = int(data["horizon"]) if future else 0
    n = int(data["lookback"]) + H
    rows = slice(len(s) - n, len(s))
    time = (s.timestamps[rows].map(lambda t: t.isoformat()) if s.timestamps is not None
            else s.time[rows] * s.report.step)
    unknown = np.arange(n) >= n - H  # (n,) True on the horizon rows: only the known future is filled
    table = {col: [str(value)] * n for col, value in (data.get("select") or {}).items()}
    if data["time_col"] is not None:  # None: row order
        table[data["time_col"]] = np.asarray(time)
    table.update({c: np.where(unknown, np.nan, s.targets[rows, j])
                  for j, c in enumerate(data["target_cols"])})
    table.update({c: np.where(unknown & (c not in future), np.nan, s.covariates[rows, j])
                  for j, c in enumerate(data["covariate_cols"])})
    return pd.DataFrame(table)
