"""The Transformer forecaster over (patched) lookback windows, with any positional encoding: the
network of :class:`Forecaster`; what every forecaster shares is
:class:`~pipelines.tasks.forecast.module.ForecastModule`'s."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from pipelines.tasks.forecast.layers import ForecastTokens, patch_positions, patchify, with_periods
from pipelines.tasks.forecast.module import ForecastModule
from pipelines.tasks.transformer import TransformerTask
from posenc import PosencError


class Forecaster(ForecastModule, TransformerTask):
    """Forecast the next ``horizon`` steps from a lookback window with a non-causal Transformer.

    Each token is a patch of ``patch_len`` steps (one step when 1) linearly embedded; the encoding
    (any posenc scheme) gets the patch positions. With ``channel_independent`` every target channel
    is its own sequence (PatchTST-style, weights shared; covariates and calendar features are
    appended to every channel's steps); otherwise one token holds all channels.

    Head (works for any lookback, so longer lookbacks can be evaluated with the same weights; see
    :class:`~pipelines.tasks.forecast.layers.ForecastTokens`): ``horizon`` appends one token per
    horizon patch at the positions after the lookback, each carrying that patch's known-future
    inputs, and reads each patch's forecast from its own token; ``query`` appends one learned
    forecast token and maps its output to the whole horizon; ``last`` reads the last lookback
    token; ``mean`` mean-pools all tokens (``model.init_args.output.head``).

    Known-future inputs (``fut``, (B, H, F): the horizon's calendar features and the datamodule's
    ``future_cols``) enter when ``n_future`` > 0 (linked from the datamodule). With
    ``output.linear_path`` the forecast is the same-inputs ridge plus the Transformer at a weight
    chosen on the validation windows (:mod:`pipelines.tasks.forecast.blend`); the data, loss, metrics
    and predictor are :class:`~pipelines.tasks.forecast.module.ForecastModule`'s (lookbacks the
    scheme does not define, a learned table past ``max_len``, are recorded as undefined).

    Args:
        patch_len: steps per token P (linked from the datamodule).
        pe_periods: periods in token positions given to the encoding's ``periods`` argument
            (linked from ``data.pe_periods``, i.e. ``data.periods`` in steps ÷ ``patch_len``;
            ``None`` keeps the encoding's own config).
        **kwargs: the data links, ``series`` and ``output`` of
            :class:`~pipelines.tasks.forecast.module.ForecastModule`; the encoding, ``net`` and
            ``attention`` of :class:`~pipelines.tasks.transformer.TransformerTask`; ``optim``.
    """

    causal = False
    task_name = "ts_forecast"
    #: before ForecastTokens the query token was ``query`` and the output layer ``head``
    old_weights = {"query": "head.query", "head.weight": "head.out.weight", "head.bias": "head.out.bias"}
    config_groups: ClassVar[dict[str, type]] = {**ForecastModule.config_groups,
                                                **TransformerTask.config_groups}

    def __init__(self, patch_len: int = 1, pe_periods: list[float] | None = None, **kwargs: Any) -> None:
        if pe_periods is not None:
            kwargs["pe"] = with_periods(kwargs.get("pe"), pe_periods)
        super().__init__(**kwargs)
        if patch_len < 1:
            raise PosencError(f"model.init_args.patch_len: must be ≥ 1, got {patch_len}")
        self.patch_len = patch_len
        per_seq = 1 if self.channel_independent else self.n_targets
        self.n_inputs = patch_len * (per_seq + self.n_covariates)  # token width
        self.embed = nn.Linear(self.n_inputs, self.d_model)
        self.head = ForecastTokens(self.head_kind, self.d_model, self.horizon, patch_len, per_seq,
                                   self.n_future)
        self.add_series_layers()
        self.start_from_linear_path()
        self._save_hparams(**self._forecast_hparams, patch_len=patch_len, pe_periods=pe_periods)

    def start_from_linear_path(self) -> None:
        """With a linear path, the head's output layer starts at zero: the untrained model is the path."""
        if self.linear is not None:
            nn.init.zeros_(self.head.out.weight)
            nn.init.zeros_(self.head.out.bias)

    # ------------------------------------------------------------------ model
    @property
    def n_extra_tokens(self) -> int:
        """Tokens appended after the lookback's: 1 (``query``), ⌈H/P⌉ (``horizon``), 0 otherwise."""
        return self.head.n_tokens

    def n_positions(self, lookback: int) -> int:
        """Tokens the Transformer sees for a lookback: its patches and the appended forecast tokens."""
        return lookback // self.patch_len + self.n_extra_tokens

    def forward(self, x: Tensor, cov: Tensor | None = None, pos: Tensor | None = None,
                fut: Tensor | None = None) -> Tensor:
        """Forecast (B, H, C) in scaled units from lookback targets ``x`` (B, L, C), covariates
        ``cov`` (B, L, K), step positions ``pos`` (B, L) or (L,) (default 0..L-1) and known-future
        inputs ``fut`` (B, H, F) (required when ``n_future`` > 0). With the linear path: the ridge
        plus the Transformer at weight 1 in training, at the weight validation chose in eval mode."""
        cov, fut = self._check_inputs(x, cov, fut)
        out = self._transformer(x, cov, pos, fut)
        if self.linear is None:
            return out
        return self.linear(x, cov, fut) + (1.0 if self.training else self.linear.blend) * out

    def forecast_parts(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The linear path's forecast and the Transformer's (both (B, H, C), scaled) for ``batch``."""
        cov, fut = self._check_inputs(batch["x"], batch["cov"], batch.get("fut"))
        return self.linear(batch["x"], cov, fut), self._transformer(batch["x"], cov, batch["pos"], fut)

    def _transformer(self, x: Tensor, cov: Tensor, pos: Tensor | None, fut: Tensor) -> Tensor:
        """The Transformer's forecast (B, H, C); with the linear path, the residual added to it
        (RevIN then restores the window's scale but not its mean)."""
        b, n, c = x.shape
        pos = torch.arange(n, device=x.device) if pos is None else pos
        pos = pos.expand(b, n) if pos.dim() == 1 else pos
        if self.revin is not None:
            x, mu, sd = self.revin.normalize(x)
        if self.channel_independent:
            seq = x.permute(0, 2, 1).reshape(b * c, n, 1)  # (B·C, L, 1)
            cov = cov.repeat_interleave(c, dim=0)  # (B·C, L, K)
            fut = fut.repeat_interleave(c, dim=0)  # (B·C, H, F)
            pos = pos.repeat_interleave(c, dim=0)  # (B·C, L)
        else:
            seq = x  # (B, L, C)
        tokens = self.embed(patchify(torch.cat((seq, cov), dim=-1), self.patch_len))  # (B', N, D)
        tok_pos = patch_positions(pos, self.patch_len)  # (B', N)
        extra = self.head.tokens(tokens.shape[0], fut)  # (B', M, D) or None
        if extra is not None:
            tokens = torch.cat((tokens, extra), dim=1)  # (B', N + M, D)
            tok_pos = torch.cat((tok_pos, self.head.positions(tok_pos, pos)), dim=1)  # (B', N + M)
        if not tok_pos.is_floating_point() and bool((tok_pos == tok_pos[:1]).all()):
            tok_pos = tok_pos[0]  # shared positions as (T,): cheaper for every scheme
        out = self.head.read(self.backbone(tokens, tok_pos), fut)  # (B', H, C')
        if self.channel_independent:
            y = out.reshape(b, c, self.horizon).permute(0, 2, 1)  # (B, H, C)
        else:
            y = out  # (B, H, C)
        if self.revin is not None:
            y = self.revin.denormalize(y, mu if self.linear is None else torch.zeros_like(mu), sd)
        return y

    def _check_inputs(self, x: Tensor, cov: Tensor | None, fut: Tensor | None) -> tuple[Tensor, Tensor]:
        """Covariates (B, L, K) and known-future inputs (B, H, F), empty when absent; clear errors
        when their widths differ from the model's."""
        b, n, c = x.shape
        if c != self.n_targets:
            raise PosencError(f"the model was built for {self.n_targets} target channel(s), got {c}")
        cov = x.new_zeros(b, n, 0) if cov is None else cov
        if cov.shape[-1] != self.n_covariates:
            raise PosencError(f"the model was built for {self.n_covariates} covariate(s), "
                              f"got {cov.shape[-1]}")
        fut = x.new_zeros(b, self.horizon, 0) if fut is None and not self.n_future else fut
        if fut is None or fut.shape[-1] != self.n_future or fut.shape[1] != self.horizon:
            got = "none" if fut is None else f"{tuple(fut.shape[1:])}"
            raise PosencError(f"the model was built for {self.n_future} known-future input(s) over "
                              f"{self.horizon} steps, got {got}")
        return cov, fut

