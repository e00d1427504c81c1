"""PatchTST's layout on the project's Forecaster: overlapping patches and a flatten head.

Nie et al. (ICLR 2023), "A Time Series is Worth 64 Words": every channel is its own sequence
(channel independence), normalised by RevIN, cut into patches of ``patch_len`` steps every
``patch_stride`` steps (the end padded with ``patch_stride`` copies of the last value, as its
``padding_patch='end'``), each patch linearly embedded, encoded by a Transformer and the outputs of
all patches flattened into one linear map to the horizon (its "flatten head").

Only the tokenisation and the head differ from :class:`~pipelines.tasks.forecast.model.Forecaster`: the
Transformer (the project's pre-LN encoder with any posenc scheme), RevIN, loss, optimiser and
validation are the Forecaster's. The flatten head ties the model to its training lookback: another
lookback is refused with :class:`~posenc.PositionOutOfRange`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from datamodules.config import as_group
from pipelines.tasks.forecast.model import Forecaster
from pipelines.tasks.options import ForecastOutput, SeriesInput
from posenc import PosencError, PositionOutOfRange


def n_patches(lookback: int, patch_len: int, stride: int) -> int:
    """Patches of a lookback padded at the end by ``stride`` steps: ⌊(L − P)/S⌋ + 2 (42 for 336/16/8)."""
    if lookback < patch_len:
        raise PosencError(f"lookback {lookback} is shorter than one patch of {patch_len} steps")
    return (lookback - patch_len) // stride + 2


def strided_patches(seq: Tensor, patch_len: int, stride: int) -> Tensor:
    """(B, L) → (B, N, P): patches every ``stride`` steps after padding the end with ``stride`` copies
    of the last step (N from :func:`n_patches`)."""
    padded = nn.functional.pad(seq[:, None], (0, stride), mode="replicate")[:, 0]  # (B, L + S)
    return padded.unfold(1, patch_len, stride)  # (B, N, P)


class FlattenHead(nn.Module):
    """PatchTST's head: the encoder outputs of all N patches (B, N, D) flattened, dropout, one linear
    map to the horizon (B, H). Appends no token (the Forecaster's ``n_extra_tokens`` is 0)."""

    n_tokens = 0
    query = None

    def __init__(self, n_tokens_in: int, d_model: int, horizon: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_in = n_tokens_in
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(n_tokens_in * d_model, horizon)

    def read(self, h: Tensor) -> Tensor:
        """(B, N, D) → (B, H)."""
        return self.out(self.drop(h.flatten(1)))  # (B, N·D) → (B, H)


class PatchTSTForecaster(Forecaster):
    """A channel-independent :class:`Forecaster` with PatchTST's overlapping patches and flatten head.

    Targets only (no covariates or known-future inputs). Positions given to the encoding are the
    patch indices 0..N−1, so a periodic encoding's periods count in strides (24 h at stride 8 = 3).

    With ``output.linear_path`` (not in the paper) the forecaster's linear path, per channel (a fixed
    ridge from each channel's lookback to its horizon, :class:`~pipelines.tasks.forecast.blend.LinearPath`),
    is added to the forecast and the flatten head starts at 0, so the untrained model *is* that ridge
    and the Transformer learns what it misses. It is fitted before training
    (:meth:`~pipelines.tasks.forecast.module.ForecastModule.fit_linear_path`, on an
    :class:`~datamodules.timeseries.ltsf_data.LTSFDataModule`'s windows) unless already fitted; the
    Transformer keeps weight 1 (:attr:`blend_weights`): the LTSF protocol chooses between the start and
    the trained model on val instead.

    Args:
        lookback: training lookback L (the flatten head's width depends on it).
        patch_len: steps per patch P (16 in the paper).
        patch_stride: steps between patch starts S (8 in the paper).
        head_dropout: dropout before the flatten head (0 for ETTh1 in the paper's scripts).
        linear_input: what the linear path reads: ``revin``, the RevIN-normalised lookback (its
            output then denormalised with the head's: RLinear, Li et al. 2023), or ``raw``, the
            lookback as given (a plain linear model; the head then forecasts its residual, scaled by
            the window's std but not shifted by its mean). Without RevIN it reads the raw lookback.
        **kwargs: the Forecaster's arguments (``n_targets``, ``horizon``, ``series``, ``output``, the
            encoding, ``net``, ``optim``); ``series.channel_independent`` and ``output.head`` are fixed.
    """

    task_name = "ts_forecast_patchtst"
    blend_weights = (1.0,)
    linear_per_channel = True

    def __init__(self, lookback: int = 336, patch_len: int = 16, patch_stride: int = 8,
                 head_dropout: float = 0.0, linear_input: str = "revin", **kwargs: Any) -> None:
        if linear_input not in ("revin", "raw"):
            raise PosencError(f"model.linear_input must be 'revin' or 'raw', got {linear_input!r}")
        if patch_stride < 1:
            raise PosencError(f"model.patch_stride must be ≥ 1, got {patch_stride}")
        series = as_group(SeriesInput, kwargs.pop("series", None), "series")
        series = replace(series, channel_independent=True)
        output = replace(as_group(ForecastOutput, kwargs.pop("output", None), "output"), head="last")
        kwargs = {**kwargs, "series": series, "output": output, "n_covariates": 0, "n_future": 0}
        super().__init__(lookback=lookback, patch_len=patch_len, **kwargs)
        self.patch_stride = patch_stride
        self.n_patches = n_patches(lookback, patch_len, patch_stride)
        self.head = FlattenHead(self.n_patches, self.d_model, self.horizon, head_dropout)
        self.start_from_linear_path()
        self.linear_input = linear_input
        self.save_hyperparameters({**self.hparams, "patch_stride": patch_stride, "head_dropout": head_dropout,
                                   "linear_input": linear_input})

    @property
    def normalised_path(self) -> bool:
        """Whether the linear path reads the RevIN-normalised lookback (``linear_input: revin``)."""
        return self.linear is not None and self.linear_input == "revin" and self.revin is not None

    def forward(self, x: Tensor, cov: Tensor | None = None, pos: Tensor | None = None,
                fut: Tensor | None = None) -> Tensor:
        """Forecast (B, H, C) in scaled units from the lookback ``x`` (B, L, C); ``cov``, ``pos`` and
        ``fut`` are accepted (the Forecaster's batch) and not used."""
        b, n, c = x.shape
        if c != self.n_targets:
            raise PosencError(f"the model was built for {self.n_targets} target channel(s), got {c}")
        if n != self.lookback:
            raise PositionOutOfRange(f"the flatten head was built for lookback {self.lookback}, got {n}")
        raw = self.linear is not None and not self.normalised_path
        linear = self.linear(x) if raw else None  # (B, H, C)
        if self.revin is not None:
            x, mu, sd = self.revin.normalize(x)
        seq = x.permute(0, 2, 1).reshape(b * c, n)  # (B·C, L)
        tokens = self.embed(strided_patches(seq, self.patch_len, self.patch_stride))  # (B·C, N, D)
        pos = torch.arange(tokens.shape[1], device=x.device)  # (N,): patch index, shared by every sequence
        h = self.backbone(tokens, pos)  # (B·C, N, D)
        out = self.head.read(h)  # (B·C, H)
        if self.normalised_path:
            out = out + self.linear.rows(seq)  # (B·C, H)
        y = out.reshape(b, c, self.horizon).permute(0, 2, 1)  # (B, H, C)
        if self.revin is None:
            return y + linear if raw else y
        if raw:  # the head forecasts the residual of the linear forecast, in units of the window's std
            return self.revin.denormalize(y, mu, sd) - mu + linear
        return self.revin.denormalize(y, mu, sd)
