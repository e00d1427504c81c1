"""DLinear: the linear forecaster a practitioner would try first, trained by the Forecaster's loop."""

from __future__ import annotations

import logging
import tempfile
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from datamodules.config import as_group
from pipelines.tasks.forecast import Forecaster
from pipelines.tasks.forecast_baselines import ForecastBaselines, masked_errors
from pipelines.tasks.options import ForecastOutput, Optim, SeriesInput
from posenc import PosencError, PositionOutOfRange

log = logging.getLogger(__name__)

#: Weights of the zero-block Transformer older DLinear checkpoints carried (built on a dummy backbone).
_DUMMY_PREFIXES = ("backbone.", "embed.", "head.")


def moving_average(x: Tensor, kernel: int) -> Tensor:
    """Centred moving average along time of x (B, L) with the ends padded by repetition: (B, L)."""
    front, back = (kernel - 1) // 2, kernel // 2
    padded = torch.cat((x[:, :1].expand(-1, front), x, x[:, -1:].expand(-1, back)), dim=1)  # (B, L + k - 1)
    return padded.unfold(1, kernel, 1).mean(dim=-1)  # (B, L)


class DLinearForecaster(Forecaster):
    """DLinear (Zeng et al., 2023, "Are Transformers Effective for Time Series Forecasting?"): each
    target channel's lookback is split into a trend (a moving average) and the remainder (seasonal),
    and each part is mapped to the horizon by its own linear layer (lookback → horizon, shared by
    the channels); the forecast is their sum. Targets only: no covariates or known-future inputs.

    A :class:`~pipelines.tasks.forecast.Forecaster` in everything but the network: the same data,
    loss, AdamW + warm-up/cosine schedule, checkpointing on ``val/loss``, test metrics at every
    lookback (a longer lookback is cut to its last ``lookback`` steps; a shorter one is undefined)
    and inference. Run it with ``configs/ltsf/dlinear_etth1.yaml``.

    Args:
        lookback: input steps L (linked from the datamodule).
        kernel_size: moving-average window of the trend (25 in the paper).
        revin: reversible instance normalisation around the linear map (off in the paper).
        **kwargs: the Forecaster's data links (``n_targets``, ``horizon``, …), loss and optimiser
            arguments; its backbone arguments are ignored.
    """

    task_name = "ts_forecast_dlinear"
    has_backbone = False  # no Transformer, token embedding or head: two linear maps

    def __init__(self, lookback: int = 336, kernel_size: int = 25, revin: bool = False,
                 **kwargs: Any) -> None:
        if lookback < 1 or kernel_size < 1:
            raise PosencError(f"model.lookback and model.kernel_size must be ≥ 1, got {lookback}, "
                              f"{kernel_size}")
        series = replace(as_group(SeriesInput, kwargs.pop("series", None), "series"), revin=revin)
        output = replace(as_group(ForecastOutput, kwargs.pop("output", None), "output"), head="last",
                         linear_path=False)
        super().__init__(lookback=lookback, series=series, output=output, **kwargs)
        self._register_load_state_dict_pre_hook(_drop_dummy_backbone)
        self.kernel_size = kernel_size
        self.trend = nn.Linear(lookback, self.horizon)
        self.seasonal = nn.Linear(lookback, self.horizon)
        self.save_hyperparameters({**self.hparams, "kernel_size": kernel_size, "revin": revin})

    @property
    def n_extra_tokens(self) -> int:
        return 0

    def forward(self, x: Tensor, cov: Tensor | None = None, pos: Tensor | None = None,
                fut: Tensor | None = None) -> Tensor:
        """Forecast (B, H, C) in scaled units from the last ``lookback`` steps of ``x`` (B, L', C);
        ``cov``, ``pos`` and ``fut`` are accepted and not used."""
        b, n, c = x.shape
        if c != self.n_targets:
            raise PosencError(f"the model was built for {self.n_targets} target channel(s), got {c}")
        if n < self.lookback:
            raise PositionOutOfRange(f"DLinear needs a lookback of at least {self.lookback} steps, got {n}")
        x = x[:, n - self.lookback:]  # (B, L, C)
        if self.revin is not None:
            x, mu, sd = self.revin.normalize(x)
        seq = x.permute(0, 2, 1).reshape(b * c, self.lookback)  # (B·C, L)
        trend = moving_average(seq, self.kernel_size)  # (B·C, L)
        out = self.trend(trend) + self.seasonal(seq - trend)  # (B·C, H)
        y = out.reshape(b, c, self.horizon).permute(0, 2, 1)  # (B, H, C)
        return self.revin.denormalize(y, mu, sd) if self.revin is not None else y


def _drop_dummy_backbone(state_dict: dict, prefix: str, *args: Any) -> None:
    """Checkpoints of DLinear built on the zero-block Transformer hold its unused weights: drop them,
    so those models load and predict as before."""
    for key in [k for k in state_dict if k.startswith(tuple(prefix + p for p in _DUMMY_PREFIXES))]:
        del state_dict[key]


def fit_dlinear(dm: Any, epochs: int, seed: int = 0, **hparams: Any) -> DLinearForecaster:
    """A :class:`DLinearForecaster` trained by the Lightning loop on ``dm``'s training windows
    (AdamW + warm-up/cosine, ``epochs`` epochs of ``dm``'s sampler), the weights of its best
    validation epoch kept (as a checkpoint on ``val/loss``); no logger, nothing left on disk.
    ``hparams`` go to the model (``kernel_size``, ``optim``, …)."""

    import lightning as L  # heavy: lightning
    from lightning.pytorch.callbacks import ModelCheckpoint  # heavy: lightning

    # Called from a callback while the outer trainer tests (inference mode): training needs autograd back.
    # The caller's random state (e.g. the Forecaster's) is left as it was.
    with torch.inference_mode(False), torch.enable_grad(), torch.random.fork_rng():
        torch.manual_seed(seed)
        model = DLinearForecaster(lookback=dm.lookback, n_targets=dm.n_targets, horizon=dm.horizon,
                                  patch_len=dm.patch_len, output=ForecastOutput(plot_examples=0), **hparams)
        with tempfile.TemporaryDirectory() as tmp:
            best = ModelCheckpoint(dirpath=tmp, monitor="val/loss", mode="min", save_top_k=1)
            trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, callbacks=[best],
                                enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp)
            val = dm.val_dataloader()
            trainer.fit(model, train_dataloaders=dm.train_dataloader(), val_dataloaders=val or None)
            if best.best_model_path:
                state = torch.load(best.best_model_path, map_location="cpu", weights_only=True)
                model.load_state_dict(state["state_dict"])
    return model.eval()


class DLinearBaselines(ForecastBaselines):
    """:class:`ForecastBaselines` plus DLinear trained by the Forecaster's loop (:func:`fit_dlinear`,
    ``epochs`` epochs of the datamodule's sampler, best validation epoch kept), scored on the same
    test windows and logged as ``baseline/dlinear_{mse,mae}``. Skipped under DDP (rank 0 alone
    would train it, on its shard of the windows), with a log line.

    Args:
        epochs: DLinear's training epochs.
        lr: its peak learning rate.
        **kwargs: :class:`ForecastBaselines`' arguments.
    """

    def __init__(self, epochs: int = 3, lr: float = 0.005, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if epochs < 1:
            raise PosencError(f"DLinearBaselines.epochs must be ≥ 1, got {epochs}")
        self.epochs, self.lr = int(epochs), float(lr)

    def extra(self, dm: Any, test: dict, orig: Any, truth: Any) -> dict[str, float]:
        if getattr(getattr(dm, "trainer", None), "world_size", 1) > 1:
            log.info("DLinear baseline skipped: it is not trained under DDP (run without DDP to get it)")
            return {}
        seed = int(getattr(dm, "seed", 0) or 0)
        model = fit_dlinear(dm, self.epochs, seed=seed, optim=Optim(lr=self.lr))
        with torch.inference_mode():
            pred = model(torch.as_tensor(test["x"], dtype=torch.float32)).numpy()  # (n, H, C) scaled
        return {f"dlinear_{k}": v for k, v in masked_errors(orig(pred), truth, test["y_mask"]).items()}
