"""DLinear: the linear forecaster a practitioner would try first, trained by the Forecaster's loop.

It is a model of its own (``model.class_path: pipelines.tasks.forecast.linear.DLinearForecaster``), a
:class:`~pipelines.tasks.forecast.module.ForecastModule` without a Transformer,
trained as an ordinary run, and not also a baseline trained beside every Forecaster run: without
RevIN, both of its layers and the moving average are linear in the lookback, so a DLinear is one
affine map of a channel's lookback to its horizon, and every such map is a DLinear (both layers
given its weights). The ridge ``baseline/linear_ar`` (:mod:`pipelines.tasks.forecast.baselines`),
logged beside every run, fits that function class in closed form on the same windows (for several
target channels, a class that holds DLinear's channel-shared maps), its penalty chosen on the
validation windows.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import torch
from torch import Tensor, nn

from datamodules.config import as_group
from pipelines.tasks.forecast.module import ForecastModule
from pipelines.tasks.options import ForecastOutput, Net, SeriesInput
from posenc import PosencError, PositionOutOfRange
from posenc.nn import AttentionSettings


def moving_average(x: Tensor, kernel: int) -> Tensor:
    """Centred moving average along time of x (B, L) with the ends padded by repetition: (B, L)."""
    front, back = (kernel - 1) // 2, kernel // 2
    padded = torch.cat((x[:, :1].expand(-1, front), x, x[:, -1:].expand(-1, back)), dim=1)  # (B, L + k - 1)
    return padded.unfold(1, kernel, 1).mean(dim=-1)  # (B, L)


class DLinearForecaster(ForecastModule):
    """DLinear (Zeng et al., 2023, "Are Transformers Effective for Time Series Forecasting?"): each
    target channel's lookback is split into a trend (a moving average) and the remainder (seasonal),
    and each part is mapped to the horizon by its own linear layer (lookback → horizon, shared by
    the channels); the forecast is their sum. Targets only: covariates and known-future inputs, linked
    from the datamodule, are not read.

    A :class:`~pipelines.tasks.forecast.module.ForecastModule` with two linear maps for its network: the
    same data, loss, AdamW + warm-up/cosine schedule, checkpointing on ``val/loss``, test metrics at
    every lookback (a longer lookback is cut to its last ``lookback`` steps; a shorter one is
    undefined) and inference; no Transformer, encoding or patches. Run it with
    ``configs/ltsf/dlinear.yaml``.

    Args:
        lookback: input steps L (linked from the datamodule).
        kernel_size: moving-average window of the trend (25 in the paper).
        series: ``revin``: reversible instance normalisation around the linear maps (off, as in the
            paper); every channel is its own sequence (:class:`~pipelines.tasks.options.SeriesInput`).
        **kwargs: the data links (``n_targets``, ``horizon``…), ``output`` (``loss``, ``plot_examples``;
            no linear path: DLinear is one) and ``optim``.
    """

    task_name = "ts_forecast_dlinear"
    #: of the zero-block Transformer of before: weights dropped, settings the model no longer takes
    old_weights = dict.fromkeys(("backbone.", "embed.", "head."))
    old_settings = ("pe", "net", "attention", "patch_len", "pe_periods",
                    *(f.name for f in fields(Net)), *(f.name for f in fields(AttentionSettings)))

    def __init__(self, lookback: int = 336, kernel_size: int = 25,
                 series: SeriesInput = SeriesInput(revin=False),  # noqa: B008 - frozen: a shared default is safe
                 **kwargs: Any) -> None:
        if lookback < 1 or kernel_size < 1:
            raise PosencError(f"model.lookback and model.kernel_size must be ≥ 1, got {lookback}, "
                              f"{kernel_size}")
        series = as_group(SeriesInput, series, "series")
        output = as_group(ForecastOutput, kwargs.get("output"), "output")
        if not series.channel_independent or output.linear_path:
            raise PosencError("model.init_args: DLinear reads every channel on its own "
                              "(series.channel_independent: true) and is a linear model itself "
                              "(output.linear_path: false)")
        super().__init__(lookback=lookback, series=series, **kwargs)
        self.kernel_size = kernel_size
        self.add_series_layers()
        self.trend = nn.Linear(lookback, self.horizon)
        self.seasonal = nn.Linear(lookback, self.horizon)
        self._save_hparams(**self._forecast_hparams, kernel_size=kernel_size)

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
