"""The forecasters' one linear path, and the Transformer's weight on top of it chosen on the validation
windows.

:class:`LinearPath` is a fixed linear map from the lookback to the horizon, set from a ridge fit
(:func:`~pipelines.tasks.forecast.baselines.ridge_on_val`, the one that chooses the penalty on the
validation windows). The :class:`~pipelines.tasks.forecast.model.Forecaster` reads it multivariate and
:class:`~pipelines.tasks.forecast.patchtst.PatchTSTForecaster` per channel (:meth:`LinearPath.fit_windows`).

With the Forecaster's ``model.output.linear_path: true`` the forecast is
``ridge(x, cov, fut) + w · transformer(x, cov, fut)``:

- the ridge part's coefficients are set before training from the same-inputs ridge of
  :class:`~pipelines.tasks.forecast.baselines.ForecastBaselines` (same training windows, penalty
  chosen on the validation windows) and then held fixed — so with ``w = 0`` the model *is* the
  ``baseline/linear`` ridge the run is compared with;
- the Transformer learns the ridge's residual (its output layer starts at zero, so training starts
  from the ridge) and is trained at ``w = 1``;
- after every validation epoch, ``w`` is set to the weight of :data:`BLEND_GRID` with the lowest
  validation MSE (original units; ``w = 0`` wins ties). The checkpoint keeps it, so the registered
  model is the blend validation chose: the ridge alone (a logged fallback) when the Transformer part
  did not help on validation.

The test split plays no part in any of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from pipelines.tasks.forecast.baselines import RIDGE_ALPHAS, ForecastBaselines, LinearBaseline, ridge_on_val
from pipelines.tracking.store import mlflow_loggers
from posenc import PosencError, PositionOutOfRange

#: the Transformer part's weights tried on the validation windows
BLEND_GRID = tuple(i / 10 for i in range(11))


def blend_tag(weight: float) -> str:
    """The suffix of the per-weight validation sums: ``@0.3``."""
    return f"@{weight:.1f}"


def channel_rows(x: np.ndarray) -> np.ndarray:
    """(n, T, C) → (n·C, T): one row per window and channel (channel-independent)."""
    return x.transpose(0, 2, 1).reshape(-1, x.shape[1])


def _rows(x: np.ndarray, y: np.ndarray | None, normalised: bool) -> tuple:
    """Per-channel rows (n·C, ·) of x and y, RevIN-normalised without affine by x's mean μ and std σ
    when ``normalised`` (else μ = 0, σ = 1): (x', y' or None, μ (n·C, 1), σ (n·C, 1))."""
    rows = channel_rows(x)
    if normalised:
        mu, sd = rows.mean(axis=1, keepdims=True), np.sqrt(rows.var(axis=1, keepdims=True) + 1e-5)
    else:
        mu, sd = np.zeros((len(rows), 1)), np.ones((len(rows), 1))
    return (rows - mu) / sd, None if y is None else (channel_rows(y) - mu) / sd, mu, sd


class LinearPath(nn.Module):
    """A fixed linear map from the lookback to the horizon, in the datamodule's scaled units: the
    forecasters' one linear path (the Forecaster's same-inputs ridge, PatchTST's RLinear), its
    coefficients set from a ridge fit (:meth:`set_ridge`). Longer lookbacks are cut to their last L
    steps; shorter ones are undefined (:class:`~posenc.PositionOutOfRange`).

    Two layouts: ``per_channel`` False maps the lookback's targets and covariates (L·(C+K)) and the
    horizon's known-future inputs (H·F) to the horizon (H·C); ``per_channel`` True maps each target
    channel's lookback (L) to its horizon (H), one map shared by the channels (no covariates).

    Buffers (saved in every checkpoint): ``coef`` (D, out), ``intercept`` (out,), ``alpha`` (the
    ridge penalty; 0 until fitted, NaN when fitted before it was recorded), ``blend`` (the
    Transformer part's weight at evaluation) and ``val_mse`` (validation MSE of the ridge alone, at
    weight 1 and at the chosen weight).

    Args:
        lookback: input steps L.
        n_targets: target channels C.
        n_covariates: covariate + calendar features per step K.
        horizon: forecast steps H.
        n_future: known-future inputs per horizon step F.
        per_channel: the channel-independent layout (needs K = F = 0).
    """

    def __init__(self, lookback: int, n_targets: int, n_covariates: int, horizon: int, n_future: int,
                 per_channel: bool = False) -> None:
        super().__init__()
        if per_channel and (n_covariates or n_future):
            raise PosencError(f"a per-channel linear path reads the targets only, got {n_covariates} "
                              f"covariate(s) and {n_future} known-future input(s)")
        self.lookback, self.horizon, self.n_targets = lookback, horizon, n_targets
        self.per_channel = per_channel
        width = lookback * (n_targets + n_covariates) + horizon * n_future
        out = horizon if per_channel else horizon * n_targets
        self.register_buffer("coef", torch.zeros(lookback if per_channel else width, out))
        self.register_buffer("intercept", torch.zeros(out))
        self.register_buffer("alpha", torch.zeros(()))
        self.register_buffer("blend", torch.ones(()))
        self.register_buffer("val_mse", torch.full((3,), float("nan")))

    @property
    def fitted(self) -> bool:
        return bool(self.alpha != 0)

    def set_ridge(self, ridge: LinearBaseline, alpha: float) -> None:
        """Take a fitted :class:`~pipelines.tasks.forecast.baselines.LinearBaseline`'s coefficients
        (``coef`` (D, out), ``intercept`` (out,)) and its penalty."""
        if tuple(ridge.coef.shape) != tuple(self.coef.shape):
            raise PosencError(f"model.linear_path: the ridge has {ridge.coef.shape[0]} inputs, the model "
                              f"{self.coef.shape[0]} (covariates or known-future inputs differ)")
        self.coef.copy_(torch.as_tensor(ridge.coef, dtype=self.coef.dtype))
        self.intercept.copy_(torch.as_tensor(ridge.intercept, dtype=self.intercept.dtype))
        self.alpha.fill_(float(alpha))

    def fit(self, dm: Any, baselines: Any, future: bool) -> None:
        """Set the coefficients from ``baselines.same_inputs_ridge(dm, future)`` (a
        :class:`~pipelines.tasks.forecast.baselines.ForecastBaselines`)."""
        if getattr(dm, "lookback", None) != self.lookback:
            raise PosencError(f"model.linear_path: the model's lookback {self.lookback} differs from the "
                              f"datamodule's {getattr(dm, 'lookback', None)}")
        self.set_ridge(*baselines.same_inputs_ridge(dm, future))

    def fit_windows(self, train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray],
                    normalised: bool, alphas: tuple[float, ...] = RIDGE_ALPHAS,
                    bounds: tuple[float, float] | None = None) -> float:
        """The per-channel path's ridge (:func:`ridge_on_val`) on training windows ``train`` (x (n, L, C),
        y (n, H, C), scaled), its penalty chosen on ``val`` (MSE, scaled); returns the penalty.
        ``normalised``: both sides RevIN-normalised per window and channel (RLinear), each window's
        squared error weighted by its variance, so that the fit minimises the error in the data's units
        as training does (unweighted, a calm window whose target moves would dominate it). ``alphas``:
        the penalties tried; ``bounds``: how far past their ends val may take it (:func:`ridge_on_val`)."""
        if not self.per_channel:
            raise PosencError("fit_windows fits a per-channel linear path; this one is multivariate")
        xt, yt, _, sdt = _rows(*train, normalised)
        xv, _, mu, sd = _rows(val[0], None, normalised)
        yv = channel_rows(val[1])
        def val_error(fit: LinearBaseline) -> float:
            return float(np.mean((fit.predict(xv)[..., 0] * sd + mu - yv) ** 2))

        fit, alpha = ridge_on_val((xt, yt[:, :, None]), val_error, weight=sdt[:, 0] ** 2, alphas=alphas,
                                  bounds=bounds)
        self.set_ridge(fit, alpha)
        return alpha

    def fit_for(self, trainer: Any, dm: Any, future: bool) -> None:
        """:meth:`fit` on the datamodule ``dm``, with the ``trainer``'s :class:`ForecastBaselines` callback's
        settings (penalty, caps) or the defaults, so that the path is exactly ``baseline/linear``."""
        if dm is None or not hasattr(dm, "windows"):
            raise PosencError("model.output.linear_path needs a time-series datamodule (data: "
                              "TimeSeriesDataModule)")
        callbacks = getattr(trainer, "callbacks", None) or []
        found = next((c for c in callbacks if isinstance(c, ForecastBaselines)), None)
        self.fit(dm, found or ForecastBaselines(), future)

    def rows(self, inputs: Tensor) -> Tensor:
        """The map on flattened inputs: (..., D) → (..., out). Per channel with ``nn.Linear``'s arithmetic
        on its (out, D) weight, else a matmul plus the intercept: the float32 arithmetic each forecaster's
        path had before (BLAS rounds the layouts differently), so trained numbers reproduce to the bit."""
        if self.per_channel:
            return nn.functional.linear(inputs, self.coef.T.contiguous(), self.intercept)  # (..., out)
        return inputs @ self.coef + self.intercept  # (..., out)

    def forward(self, x: Tensor, cov: Tensor | None = None, fut: Tensor | None = None) -> Tensor:
        """x (B, L', C), cov (B, L', K), fut (B, H, F), scaled → the linear forecast (B, H, C)."""
        b, n, _ = x.shape
        if n < self.lookback:
            raise PositionOutOfRange(f"the linear path needs a lookback of at least {self.lookback} steps, "
                                     f"got {n}")
        if self.per_channel:
            out = self.rows(x[:, n - self.lookback:].permute(0, 2, 1))  # (B, C, L) → (B, C, H)
            return out.permute(0, 2, 1)  # (B, H, C)
        inputs = torch.cat((x, cov), dim=-1)[:, n - self.lookback:].reshape(b, -1)  # (B, L·(C+K))
        if fut.shape[-1]:
            inputs = torch.cat((inputs, fut.reshape(b, -1)), dim=1)  # (B, L·(C+K) + H·F)
        return self.rows(inputs).view(b, self.horizon, self.n_targets)  # (B, H, C)

    def choose(self, values: dict[str, float]) -> dict[str, float]:
        """From the validation means ``val/{loss,mse,mae}@w`` of every weight w in :data:`BLEND_GRID`,
        set ``blend`` to the weight with the lowest MSE and return the metrics to log: ``val/loss``,
        ``val/mse``, ``val/mae`` at it, ``val/blend``, ``val/mse_linear_path`` (w = 0) and
        ``val/mse_full_weight`` (w = 1); the other entries of ``values`` pass through."""
        tags = {blend_tag(w): w for w in BLEND_GRID}
        scored = {w: values[f"val/mse{t}"] for t, w in tags.items() if f"val/mse{t}" in values}
        out = {k: v for k, v in values.items() if not any(k.endswith(t) for t in tags)}
        if not scored:
            return out
        best = min(scored, key=lambda w: (scored[w], w))  # ties → the smaller weight
        for name in ("loss", "mse", "mae"):
            out[f"val/{name}"] = values[f"val/{name}{blend_tag(best)}"]
        out.update({"val/blend": best, "val/mse_linear_path": scored[0.0],
                    "val/mse_full_weight": scored[1.0]})
        self.blend.fill_(best)
        self.val_mse.copy_(torch.tensor([scored[0.0], scored[1.0], scored[best]], dtype=self.val_mse.dtype))
        return out

    def describe(self) -> tuple[str, dict[str, str]]:
        """One console line on what validation chose and why, and the same as MLflow tags."""
        lin, full, chosen = (float(v) for v in self.val_mse)
        w = float(self.blend)
        if not np.isfinite(chosen):
            return "forecaster: linear path with the Transformer at weight 1 (no validation epoch)", {
                "forecast/choice": "ridge + transformer (not validated)", "forecast/blend": f"{w:g}"}
        if w == 0.0:
            what = "the same-inputs ridge alone (fallback: the Transformer part did not lower validation MSE)"
        else:
            what = f"ridge + {w:g} × Transformer"
        why = (f"validation MSE {chosen:.6g} (original units) against {lin:.6g} for the ridge alone and "
               f"{full:.6g} at full Transformer weight; ridge alpha {float(self.alpha):g}")
        tags = {"forecast/choice": what, "forecast/blend": f"{w:g}", "forecast/choice_why": why}
        return f"forecaster: the registered model is {what}: {why}", tags

    def announce(self, trainer: Any) -> None:
        """:meth:`describe` as a console line (rank 0) and as tags of the run's MLflow loggers."""
        line, tags = self.describe()
        rank_zero_info(line)
        for logger in mlflow_loggers(trainer) if trainer.is_global_zero else []:
            for key, value in tags.items():
                logger.experiment.set_tag(logger.run_id, key, value)
