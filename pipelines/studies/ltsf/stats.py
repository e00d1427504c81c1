"""Holt-Winters exponential smoothing (ETS) for the LTSF benchmark (optional: ``pip install .[ltsf]``).

A statistical baseline, fitted as a statistical model is: per channel, additive level, trend and
season (period 24, a day of hours), its smoothing parameters and initial states estimated ONCE on that
channel's scaled train rows by statsmodels (``ExponentialSmoothing``, least squares). The fitted
recursions are then run forward over the whole series (:func:`states`, O(N) per channel) and every
val / test window is forecast from its origin with those fixed parameters (:func:`forecast`):
rolling origin, no refit. The state at a window's origin has seen every row before it, not only the
window's lookback, as a statistical model's state does. The forecast is Hyndman & Athanasopoulos'
l + (φ + … + φ^h)·b + s of the target's phase updated last; statsmodels 0.15.0's own ``forecast``
agrees except at steps that are a multiple of the period, where it takes the season one period older
than the last update (statsmodels issue 9538, fixed upstream after 0.15.0; the tests check both).

Three trend forms are fitted per channel (:data:`FORMS`: damped additive, additive, none); each
channel keeps the form whose val MSE (every val window, at the benchmark's horizon) is lowest. The
test windows are forecast once, after that choice.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from datamodules.timeseries.ltsf import LTSFData, scaled_errors
from pipelines.studies.ltsf.models import Result, Timer

#: the default seasonal period, a day of hours; the benchmark passes a day in the file's rows
#: (``LTSFData.period``: 24 hourly, 96 every 15 min, 144 every 10 min), as seasonal naive does
PERIOD = 24
#: trend form → (statsmodels ``trend``, ``damped_trend``); the season is additive in every form
FORMS = {"damped": ("add", True), "trend": ("add", False), "level": (None, False)}
SCALARS = ("alpha", "beta", "gamma", "phi", "level0", "trend0")


@dataclass
class HoltWinters:
    """Fixed additive Holt-Winters parameters, one per channel: smoothing ``alpha`` (level), ``beta``
    (trend), ``gamma`` (season), damping ``phi`` (1: undamped), all (C,); initial ``level0`` and
    ``trend0`` (C,) and ``season0`` (m, C), the seasons of the m rows before the first. A form
    without trend has ``beta`` = ``trend0`` = 0 and ``phi`` = 1."""

    alpha: np.ndarray
    beta: np.ndarray
    gamma: np.ndarray
    phi: np.ndarray
    level0: np.ndarray
    trend0: np.ndarray
    season0: np.ndarray

    @property
    def period(self) -> int:
        return self.season0.shape[0]

    def pick(self, others: list[HoltWinters], choice: np.ndarray) -> HoltWinters:
        """Channel c's parameters from ``([self] + others)[choice[c]]``."""
        models = [self, *others]
        fields = {}
        for name in (*SCALARS, "season0"):
            stack = np.stack([getattr(m, name) for m in models])  # (F, C) or (F, m, C)
            fields[name] = np.take_along_axis(stack, choice.reshape((1,) * (stack.ndim - 1) + (-1,)), 0)[0]
        return HoltWinters(**fields)


def fit_channel(y: np.ndarray, form: str, period: int = PERIOD) -> tuple[dict[str, float], np.ndarray, bool]:
    """statsmodels' least-squares fit of one channel's rows ``y`` (T,) in ``form``: (scalar
    parameters, initial seasons (m,), whether the optimiser converged)."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing  # optional: statsmodels

    trend, damped = FORMS[form]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence is reported through the return value
        fit = ExponentialSmoothing(np.asarray(y, dtype=np.float64), trend=trend, damped_trend=damped,
                                   seasonal="add", seasonal_periods=period,
                                   initialization_method="estimated").fit()
    p = fit.params
    scalars = {"alpha": p["smoothing_level"], "gamma": p["smoothing_seasonal"], "level0": p["initial_level"],
               "beta": p["smoothing_trend"] if trend else 0.0, "trend0": p["initial_trend"] if trend else 0.0,
               "phi": p["damping_trend"] if damped else 1.0}
    converged = bool(getattr(fit.mle_retvals, "success", True))
    return {k: float(v) for k, v in scalars.items()}, np.asarray(p["initial_seasons"], float), converged


def fit(train: np.ndarray, form: str, period: int = PERIOD) -> tuple[HoltWinters, list[bool]]:
    """Every channel of the train rows ``train`` (T, C) fitted in ``form``; (model, converged per channel)."""
    fits = [fit_channel(train[:, c], form, period) for c in range(train.shape[1])]
    fields = {k: np.array([f[0][k] for f in fits]) for k in SCALARS}
    return HoltWinters(**fields, season0=np.stack([f[1] for f in fits], axis=1)), [f[2] for f in fits]


#: the fits made in this process: a fit reads the train rows only, so every horizon and seed of a file
#: reuses it (on Weather one form's 21 channels take about 15 CPU min)
_FITTED: dict[tuple[str, str, int], tuple[HoltWinters, list[bool]]] = {}


def fit_once(train: np.ndarray, form: str, period: int) -> tuple[HoltWinters, list[bool]]:
    """:func:`fit`, made once per train rows (by their bytes), form and period in this process."""
    key = (hashlib.sha256(np.ascontiguousarray(train, dtype=np.float64).tobytes()).hexdigest(), form, period)
    if key not in _FITTED:
        _FITTED[key] = fit(train, form, period)
    return _FITTED[key]


def states(model: HoltWinters, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The recursions run over every row of ``values`` (N, C) with the model's fixed parameters:
    level and trend (N + 1, C), index t the state after rows ``[0, t)``; seasons (N + m, C), index
    r + m the season updated by row r (index < m: the initial seasons)."""
    y = np.asarray(values, dtype=np.float64)
    n, m = len(y), model.period
    level, trend = np.empty((n + 1, y.shape[1])), np.empty((n + 1, y.shape[1]))
    season = np.empty((n + m, y.shape[1]))
    level[0], trend[0], season[:m] = model.level0, model.trend0, model.season0
    a, b, g, phi = model.alpha, model.beta, model.gamma, model.phi
    for t in range(n):
        base = level[t] + phi * trend[t]  # the one-step forecast's level + trend
        level[t + 1] = a * (y[t] - season[t]) + (1 - a) * base
        trend[t + 1] = b * (level[t + 1] - level[t]) + (1 - b) * phi * trend[t]
        season[t + m] = g * (y[t] - base) + (1 - g) * season[t]
    return level, trend, season


def forecast(model: HoltWinters, state: tuple[np.ndarray, np.ndarray, np.ndarray], origins: np.ndarray,
             horizon: int) -> np.ndarray:
    """Forecasts (n, H, C) of steps 1..H from every origin τ (the state after rows ``[0, τ)``):
    level + (φ + … + φ^h)·trend + the latest season of the target's phase (a row before τ)."""
    level, trend, season = state
    m, h = model.period, np.arange(1, horizon + 1)
    damp = np.cumsum(model.phi[None, :] ** h[:, None], axis=0)  # (H, C)
    back = h - 1 - m * np.ceil(h / m).astype(int) + m  # (H,): season index − τ, ≤ m − 1 (a row < τ)
    idx = origins[:, None] + back[None, :]  # (n, H)
    return level[origins][:, None, :] + damp[None] * trend[origins][:, None, :] + season[idx]  # (n, H, C)


def _val_errors(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Val MSE per channel (C,) of (n, H, C) forecasts."""
    return np.mean((pred - truth.astype(np.float64)) ** 2, axis=(0, 1))


def ets_run(data: LTSFData, lookback: int, horizon: int, seed: int) -> Result:
    """Fit every form on the train rows with a season of a day in the file's rows (``data.period``),
    keep each channel's best form on val, forecast every test
    window from its origin (rolling origin, no refit). ``lookback`` only fixes which windows are
    scored (the other models'); the state reads every row before the origin. Deterministic: ``seed``
    is unused."""
    lo, hi = data.bounds["train"]
    with Timer() as clock:
        fitted = {f: fit_once(data.values[lo:hi], f, int(data.period)) for f in FORMS}
        val_y = data.windows("val", lookback, horizon)[1]
        val_origins = data.starts("val", lookback, horizon)
        models = [model for model, _ in fitted.values()]
        errors = np.stack([_val_errors(forecast(m, states(m, data.values), val_origins, horizon), val_y)
                           for m in models])  # (F, C)
        choice = np.argmin(errors, axis=0)  # (C,)
        model = models[0].pick(models[1:], choice)
        state = states(model, data.values)
        val = scaled_errors(forecast(model, state, val_origins, horizon), val_y)
        pred = forecast(model, state, data.starts("test", lookback, horizon), horizon)
    return Result(pred, val, _chosen(data.columns, list(FORMS), choice, model, fitted), clock.cpu_s,
                  clock.wall_s)


def _chosen(columns: list[str], forms: list[str], choice: np.ndarray, model: HoltWinters,
            fitted: dict[str, tuple[HoltWinters, list[bool]]]) -> dict[str, Any]:
    """What was fitted and chosen, per channel: form and parameters; fits that did not converge."""
    def per(values: np.ndarray) -> str:
        return ",".join(f"{v:.3g}" for v in values)

    kept = zip(columns, choice, strict=True)
    out: dict[str, Any] = {"period": model.period, "forms": ",".join(f"{c}:{forms[i]}" for c, i in kept)}
    out.update({k: per(getattr(model, k)) for k in ("alpha", "beta", "gamma", "phi")})
    out["refit"] = "none (rolling origin)"
    failed = [f"{f}:{columns[c]}" for f, (_, ok) in fitted.items() for c, flag in enumerate(ok) if not flag]
    if failed:
        out["unconverged"] = ",".join(failed)
    return out
