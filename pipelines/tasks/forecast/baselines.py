"""Forecasting baselines scored on the model's own test windows: seasonal naive and ridge regressions.

What a practitioner would use instead of the Transformer, given the same data:

- ``seasonal_naive``: the value one season earlier, the period in steps of the data: of the calendar
  cycles its step implies that fit in the lookback (e.g. daily 24 and weekly 168 for hourly data),
  the one with the lowest error on the validation windows; without a calendar, the training split's
  periodogram peak.
- ``linear``: ridge regression from *the inputs the Forecaster gets* — the lookback's targets
  (``x``) and its covariates and calendar features (``cov``), and the horizon's known-future inputs
  (``fut``: calendar features, ``data.future_cols``) when the model gets them — to the whole horizon
  (a direct multi-step linear model).
- ``linear_ar``: the same ridge from the lookback's targets only (autoregressive).
  DLinear (:mod:`pipelines.tasks.forecast.linear`) is this function class, an affine map of the
  lookback's targets, trained by gradient descent; the ridge is its closed-form fit.

Both ridges are fitted on training windows, their penalty chosen on the validation windows (as the
Forecaster's checkpoint is), and scored on the test windows the Forecaster was scored on.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import lightning as L
import numpy as np
import scipy.linalg
from lightning.pytorch.utilities import rank_zero_info
from scipy.linalg import LinAlgWarning

from datamodules.timeseries.calendar import calendar_cycles, estimate_period
from datamodules.timeseries.timestamps import format_step
from datamodules.timeseries.windows import gather_windows
from pipelines.tasks.base import baseline_datamodule
from posenc import PosencError

RIDGE_ALPHAS = (0.1, 1.0, 10.0, 100.0, 1000.0)  # penalties tried on the validation windows


def seasonal_naive(values: np.ndarray, starts: np.ndarray, horizon: int, period: int) -> np.ndarray:
    """Forecast ``values[τ + h]`` by the value one (or more) whole periods earlier that is known at
    τ: ``values[τ + h - period·⌈(h + 1)/period⌉]``. Returns (n, horizon, C)."""
    if period < 1:
        raise PosencError(f"seasonal period must be ≥ 1, got {period}")
    h = np.arange(horizon)
    back = period * ((h + period) // period)  # period·ceil((h+1)/period)
    idx = np.asarray(starts)[:, None] + h[None, :] - back[None, :]  # (n, H)
    if len(idx) and idx.min() < 0:
        raise PosencError(f"seasonal period {period} reaches before the start of the series")
    return values[idx]


class LinearBaseline:
    """Ridge regression from the flattened lookback inputs (L·F) to the flattened horizon (H·C)
    (a direct multi-step linear model), fitted on training windows; an unpenalised intercept, as
    scikit-learn's ``Ridge`` (data centred, then ``(XᵀX + αI) W = XᵀY``)."""

    def __init__(self, alpha: float = 1.0) -> None:
        self.alpha = float(alpha)

    def fit(self, x: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None) -> LinearBaseline:
        """x (n, L, F) or (n, D), y (n, H, C); windows with any unobserved target (``mask`` False)
        are dropped."""
        return self.fit_path([self.alpha], x, y, mask)[0]

    @classmethod
    def fit_path(cls, alphas, x: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None,
                 weight: np.ndarray | None = None) -> list:
        """One fit per penalty in ``alphas``, sharing the Gram matrix (one pass over the data);
        ``weight`` (n,): each window's weight in the squared error (``None``: equal)."""
        system = cls.normal_equations(x, y, mask, weight)
        return [cls.solve(alpha, system) for alpha in alphas]

    @staticmethod
    def normal_equations(x: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None,
                         weight: np.ndarray | None = None) -> tuple:
        """The centred Gram matrix and cross products of the windows (one pass over the data), which
        :meth:`solve` turns into a fit at any penalty: ``(gram, cross, x_mean, y_mean, out_shape)``."""
        keep = np.ones(len(x), dtype=bool) if mask is None else mask.reshape(len(mask), -1).all(axis=1)
        if not keep.any():
            raise PosencError("no training window has fully observed targets for the linear baseline")
        n = int(keep.sum())
        xs = x[keep].reshape(n, -1).astype(np.float64)  # (n, D)
        ys = y[keep].reshape(n, -1).astype(np.float64)  # (n, H·C)
        if weight is None:  # unweighted: exactly the arithmetic of before (the README's numbers)
            x_mean, y_mean = xs.mean(axis=0), ys.mean(axis=0)
            xs -= x_mean
            xw = xs
        else:
            w = np.asarray(weight, dtype=np.float64).reshape(-1)[keep]
            w = w / w.mean()  # the penalty keeps its scale
            x_mean, y_mean = w @ xs / n, w @ ys / n
            xs -= x_mean
            xw = xs * w[:, None]
        return xw.T @ xs, xw.T @ (ys - y_mean), x_mean, y_mean, y.shape[1:]  # (D, D), (D, H·C), …

    @classmethod
    def solve(cls, alpha: float, system: tuple) -> LinearBaseline:
        """The fit at penalty ``alpha`` from :meth:`normal_equations`' ``system``."""
        gram, cross, x_mean, y_mean, out_shape = system
        lin = cls(alpha)
        with warnings.catch_warnings():  # lagged calendar features are collinear: the penalty handles it
            warnings.simplefilter("ignore", LinAlgWarning)
            lin.coef = scipy.linalg.solve(gram + alpha * np.eye(len(gram)), cross, assume_a="pos")
        lin.intercept = y_mean - x_mean @ lin.coef  # (H·C,)
        lin.out_shape = out_shape
        return lin

    def predict(self, x: np.ndarray) -> np.ndarray:
        """x (n, L, F) or (n, D) → (n, H, C)."""
        flat = x.reshape(len(x), -1) @ self.coef + self.intercept  # (n, H·C)
        return flat.reshape(len(x), *self.out_shape)


def ridge_on_val(train: tuple, val_error: Callable[[LinearBaseline], float],
                 weight: np.ndarray | None = None, alphas: tuple[float, ...] = RIDGE_ALPHAS,
                 bounds: tuple[float, float] | None = None) -> tuple[LinearBaseline, float]:
    """The one ridge fit: :meth:`LinearBaseline.solve` on ``train``'s normal equations (x, y[, mask])
    for every penalty of ``alphas`` (default :data:`RIDGE_ALPHAS`; ``weight``: each window's weight),
    the fit with the lowest ``val_error`` and its penalty (ties → the smaller penalty).

    ``bounds`` ``(lo, hi)``: a penalty at an end of the grid is not a choice, so while val picks the
    grid's smallest (largest) penalty, one more step of the grid's ratio is tried below (above) it, as
    far as ``lo`` (``hi``); interior choices are exactly those of the grid alone. ``None``: the grid
    as given."""
    system = LinearBaseline.normal_equations(*train, weight=weight)
    grid = sorted(float(a) for a in alphas)
    fits = {a: LinearBaseline.solve(a, system) for a in grid}
    errors = {a: val_error(fit) for a, fit in fits.items()}
    while True:
        best = min(grid, key=lambda a: (errors[a], a))
        step = grid[-1] / grid[-2] if len(grid) > 1 else 10.0
        nxt = best / step if best == grid[0] else best * step if best == grid[-1] else None
        if bounds is None or nxt is None or not bounds[0] * (1 - 1e-9) <= nxt <= bounds[1] * (1 + 1e-9):
            return fits[best], best
        fits[nxt] = LinearBaseline.solve(nxt, system)
        errors[nxt] = val_error(fits[nxt])
        grid = sorted(fits)


def masked_errors(pred: np.ndarray, truth: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """MSE and MAE over the observed entries (mask True) of (n, H, C) arrays."""
    m = mask.astype(np.float64)
    n = max(m.sum(), 1.0)
    err = pred - truth
    return {"mse": float((err**2 * m).sum() / n), "mae": float((np.abs(err) * m).sum() / n)}


def seasonal_naive_errors(dm, test: dict, period: int) -> dict[str, float]:
    """MSE and MAE, in the data's units, of the seasonal-naive forecast at ``period`` steps on ``dm``'s
    windows ``test`` (``dm.windows(split)``)."""
    orig = lambda a: a * dm.target_scale + dm.target_loc  # noqa: E731 - scaled → original units
    naive = seasonal_naive(dm.targets, test["start"], dm.horizon, period)
    return masked_errors(orig(naive), orig(test["y"]), test["y_mask"])


class ForecastBaselines(L.Callback):
    """After testing, score the baselines on exactly the test windows the model was scored on at its
    training lookback (``Forecaster.scored_starts``; original scale, observed targets only) and log
    ``baseline/{seasonal_naive,linear,linear_ar}_{mse,mae}``, ``baseline/season_period`` (steps),
    ``baseline/n_windows`` and, as parameters, how the period was chosen
    (``baseline/season_period_from``) and the data's step (``data/step``).

    Args:
        season_period: seasonal-naive period in steps; ``None`` (default) → from the data: of the
            calendar cycles of its step that fit in the lookback (daily 24 and weekly 168 for hourly
            data), the best on the validation windows; or, without a calendar (row order, numeric,
            irregular or sub-second time), the training split's periodogram peak (see
            :meth:`TimeSeriesDataModule.season_period`).
        max_period: longest period the periodogram may pick (default: the lookback).
        ridge_alpha: L2 penalty of the linear models; ``None`` (default) → the one of
            :data:`RIDGE_ALPHAS` with the lowest error on the validation windows (1.0 without
            validation windows), logged as ``baseline/linear_alpha`` / ``baseline/linear_ar_alpha``;
            the same-inputs ridge gets the horizon's known-future inputs when the model does.
        max_train_windows: training windows used to fit the linear models (evenly subsampled).
        max_train_values: further caps those windows so windows × lookback × features stays below it
            (memory of the design matrix).
    """

    def __init__(
        self,
        season_period: int | None = None,
        max_period: int | None = None,
        ridge_alpha: float | None = None,
        max_train_windows: int = 20000,
        max_train_values: int = 20_000_000,
    ) -> None:
        if season_period is not None and season_period < 1:
            raise PosencError(f"ForecastBaselines.season_period must be ≥ 1 or null, got {season_period}")
        self.season_period, self.max_period = season_period, max_period
        self.ridge_alpha, self.max_train_windows = ridge_alpha, max_train_windows
        self.max_train_values = max_train_values
        self.results: dict[str, float] = {}
        self._ridges: dict[tuple[int, bool], tuple[LinearBaseline, float]] = {}  # per (dm, future)
        self.period_from = ""
        self._announced = False

    def choose_period(self, dm) -> tuple[int, str]:
        """(period in steps, how it was chosen)."""
        if self.season_period is not None:
            return int(self.season_period), "set by ForecastBaselines.season_period"
        if not hasattr(dm, "season_period"):
            train = dm.targets[: dm.n_train, 0]
            max_period = min(self.max_period or dm.lookback, len(train) // 2)
            return estimate_period(train, max_period), "periodogram peak of the training split"
        period, how = dm.season_period(self.max_period)
        cycles = self._calendar_candidates(dm, period)
        if len(cycles) < 2:
            return period, how
        errors = {p: self._naive_error(dm, p, dm.starts["val"]) for _, p in cycles}
        name, best = min(cycles, key=lambda c: errors[c[1]])
        tried = ", ".join(f"{n} {p}" for n, p in cycles)
        return best, f"{name} cycle of {dm.freq} data: the best on the validation windows of {tried}"

    def _calendar_candidates(self, dm, period: int) -> list[tuple[str, int]]:
        """The calendar cycles (name, steps) that fit in the lookback (and the training split twice),
        when ``period`` is itself one of them (a regular calendar); needs validation windows."""
        step = getattr(dm, "step_seconds", None)
        if step is None or len(dm.starts.get("val", ())) == 0:
            return []
        cycles = calendar_cycles(step)
        longest = min(self.max_period or dm.lookback, dm.n_train // 2)
        if period not in [p for _, p in cycles]:
            return []
        return [(name, p) for name, p in cycles if p <= longest]

    @staticmethod
    def _naive_error(dm, period: int, starts: np.ndarray) -> float:
        """Seasonal-naive MSE (scaled units) at the windows ``starts``."""
        pred = seasonal_naive(dm.targets, starts, dm.horizon, period)
        truth = gather_windows(dm.targets, starts, 0, dm.horizon)
        return masked_errors(pred, truth, gather_windows(dm.series.observed, starts, 0, dm.horizon))["mse"]

    def period(self, dm) -> int:
        """The seasonal-naive period in steps (see :meth:`choose_period`)."""
        return self.choose_period(dm)[0]

    def _train_starts(self, dm, n_inputs: int) -> np.ndarray:
        """Training windows for the ridge fits, evenly subsampled to the caps."""
        starts = dm.starts["train"]
        cap = min(self.max_train_windows, max(1, self.max_train_values // max(n_inputs, 1)))
        if len(starts) > cap:
            starts = starts[np.linspace(0, len(starts) - 1, cap).round().astype(int)]
        return starts

    @staticmethod
    def _design(dm, inputs: np.ndarray, future: np.ndarray | None, starts: np.ndarray) -> np.ndarray:
        """(n, L·F + H·F') rows: ``inputs`` (N, F) over each lookback, ``future`` (N, F') over its horizon."""
        x = gather_windows(inputs, starts, dm.lookback, 0).reshape(len(starts), -1)  # (n, L·F)
        if future is None or future.shape[1] == 0:
            return x
        fut = gather_windows(future, starts, 0, dm.horizon).reshape(len(starts), -1)  # (n, H·F')
        return np.concatenate([x, fut], axis=1)

    def _targets(self, dm, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (gather_windows(dm.targets, starts, 0, dm.horizon),
                gather_windows(dm.series.observed, starts, 0, dm.horizon))

    def _fit_ridge(self, dm, inputs: np.ndarray, future: np.ndarray | None) -> tuple[LinearBaseline, float]:
        """Ridge from ``inputs`` (N, F) over the lookback (and ``future`` (N, F') over the horizon),
        fitted on training windows; its penalty ``ridge_alpha`` or the best of :data:`RIDGE_ALPHAS`
        on the validation windows."""
        width = dm.lookback * inputs.shape[1] + (0 if future is None else dm.horizon * future.shape[1])
        starts = self._train_starts(dm, width)
        train = (self._design(dm, inputs, future, starts), *self._targets(dm, starts))
        val = dm.starts.get("val", np.zeros(0, dtype=np.int64))
        if self.ridge_alpha is not None or len(val) == 0:
            alpha = 1.0 if self.ridge_alpha is None else float(self.ridge_alpha)
            return LinearBaseline(alpha).fit(*train), alpha
        xv, (yv, mv) = self._design(dm, inputs, future, val), self._targets(dm, val)
        return ridge_on_val(train, lambda lin: masked_errors(lin.predict(xv), yv, mv)["mse"])

    @staticmethod
    def same_inputs(dm, future: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """What the Forecaster gets: targets and covariates per step (N, C + K) (its ``x`` and
        ``cov``), and the known-future inputs (N, F') (its ``fut``; ``None`` without or unless ``future``)."""
        index = list(getattr(dm, "future_index", [])) if future else []
        known = dm.covariates[:, index] if index else None  # (N, F')
        return np.concatenate([dm.targets, dm.covariates], axis=1), known  # (N, C + K)

    def same_inputs_ridge(self, dm, future: bool = True) -> tuple[LinearBaseline, float]:
        """The same-inputs ridge (``baseline/linear``) and its penalty, fitted as :meth:`compute`
        fits it (the Forecaster's linear path starts from it); fitted once per datamodule."""
        key = (id(dm), bool(future))
        if key not in self._ridges:
            self._ridges[key] = self._fit_ridge(dm, *self.same_inputs(dm, future))
        return self._ridges[key]

    def compute(self, dm, starts: np.ndarray | None = None, future: bool | None = None) -> dict[str, float]:
        """Baseline errors on ``dm``'s test windows starting at ``starts`` (default: all of them);
        usable without a trainer. ``future``: give the same-inputs ridge the horizon's known-future
        inputs (default: when the datamodule has any, as the Forecaster then gets them)."""
        test = dm.windows("test", starts=starts)
        loc, scale = dm.target_loc, dm.target_scale
        orig = lambda a: a * scale + loc  # noqa: E731 - scaled → original units
        truth = orig(test["y"])
        period, self.period_from = self.choose_period(dm)
        results = {f"seasonal_naive_{k}": v for k, v in seasonal_naive_errors(dm, test, period).items()}
        same_inputs, known = self.same_inputs(dm, future is not False)
        for name, inputs, fut in (("linear", same_inputs, known), ("linear_ar", dm.targets, None)):
            if name == "linear_ar" and dm.covariates.shape[1] == 0:  # no covariates: the same model
                results.update({f"linear_ar_{k}": results[f"linear_{k}"] for k in ("mse", "mae", "alpha")})
                continue
            if name == "linear":  # the fit the Forecaster's linear path was set from, if it was
                lin, results["linear_alpha"] = self.same_inputs_ridge(dm, future is not False)
            else:
                lin, results["linear_ar_alpha"] = self._fit_ridge(dm, inputs, fut)
            pred = lin.predict(self._design(dm, inputs, fut, test["start"]))  # (n, H, C)
            errors = masked_errors(orig(pred), truth, test["y_mask"])
            results.update({f"{name}_{k}": v for k, v in errors.items()})
        results["season_period"] = float(period)
        results["n_windows"] = float(len(test["start"]))
        return results

    def describe_period(self, dm, period: int, how: str) -> str:
        """``seasonal naive: period 24 steps = 1d (daily cycle of 1h data)``."""
        step = getattr(dm, "step_seconds", None)
        span = f" = {format_step(period * step)}" if step else ""
        return f"seasonal naive: period {period} steps{span} ({how})"

    def _announce(self, dm, period: int, how: str) -> None:
        if not self._announced:
            rank_zero_info(self.describe_period(dm, period, how))
            self._announced = True

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        if dm is not None and hasattr(dm, "windows"):  # say it early, before a long training
            self._announce(dm, *self.choose_period(dm))

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = baseline_datamodule(trainer, "windows")
        if dm is None:
            return
        scored = getattr(pl_module, "scored_starts", None)  # the windows the model was scored on
        starts = np.unique(np.asarray(scored, dtype=np.int64)) if scored else None
        self.results = self.compute(dm, starts, future=bool(getattr(pl_module, "n_future", 0)))
        self._announce(dm, int(self.results["season_period"]), self.period_from)
        params = {"baseline/season_period_from": self.period_from, "data/step": getattr(dm, "freq", "")}
        for logger in trainer.loggers:
            logger.log_metrics({f"baseline/{k}": v for k, v in self.results.items()})
            logger.log_hyperparams(params)
