"""The Forecaster's layers: patching, reversible normalisation and the forecast tokens (its heads)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from posenc import PosencError


def patchify(x: Tensor, patch_len: int) -> Tensor:
    """(B, L, F) steps → (B, L/P, P·F) tokens of P consecutive steps (step-major within a token)."""
    b, n, f = x.shape
    if n % patch_len:
        raise PosencError(f"lookback {n} is not a multiple of patch_len={patch_len}")
    return x.reshape(b, n // patch_len, patch_len * f)


def patch_positions(pos: Tensor, patch_len: int) -> Tensor:
    """Step positions (B, L) → token positions (B, L/P): the patch index for integer positions,
    the patch's start time / P for float (time) positions, so both count in patches."""
    first = pos[:, ::patch_len]
    return first // patch_len if not first.is_floating_point() else first / patch_len


def with_periods(pe: Any, periods: list[float]) -> Any:
    """The encoding ``pe`` (YAML factory or ``{class_path, init_args}`` spec) with its ``periods``
    argument set, e.g. ``posenc.PeriodicRoPE`` pinned to periods estimated from the data."""
    periods = [float(p) for p in periods]
    if isinstance(pe, dict):
        return {**pe, "init_args": {**(pe.get("init_args") or {}), "periods": periods}}
    if pe is None or not callable(pe):
        raise PosencError("data.periods is set, but model.pe is not an encoding that takes periods "
                          "(use posenc.PeriodicRoPE or unset data.periods)")

    def factory(d_model: int, n_heads: int):
        try:
            return pe(d_model, n_heads, periods=periods)
        except TypeError:
            raise PosencError("data.periods is set, but the model's encoding takes no 'periods' argument "
                              "(use posenc.PeriodicRoPE or unset data.periods)") from None

    return factory


class RevIN(nn.Module):
    """Reversible instance normalisation (Kim et al., 2022, "Reversible Instance Normalization for
    Accurate Time-Series Forecasting against Distribution Shift"): each window is normalised by its
    own lookback mean/std per channel (then a learnable affine), and outputs are mapped back."""

    def __init__(self, n_channels: int, affine: bool = True, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n_channels)) if affine else None
        self.bias = nn.Parameter(torch.zeros(n_channels)) if affine else None

    def normalize(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, L, C) → (normalised x, mean (B, 1, C), std (B, 1, C))."""
        mu = x.mean(dim=1, keepdim=True)
        sd = (x.var(dim=1, keepdim=True, unbiased=False) + self.eps).sqrt()
        z = (x - mu) / sd
        if self.weight is not None:
            z = z * self.weight + self.bias
        return z, mu, sd

    def denormalize(self, y: Tensor, mu: Tensor, sd: Tensor) -> Tensor:
        """y (B, H, C) in normalised units → the input's units."""
        if self.weight is not None:
            y = (y - self.bias) / (self.weight + self.eps**2)
        return y * sd + mu


class ForecastTokens(nn.Module):
    """The tokens a Forecaster appends after its lookback tokens, and how it reads the forecast.

    ``query``: one learned token at the position just after the lookback; its output → H·C'.
    ``horizon``: one token per horizon patch (⌈H/P⌉ tokens at the positions that continue the
    lookback's), each a learned vector plus the embedding of that patch's known-future inputs; each
    token's output → its P steps (a decoder head: every future patch is forecast at its own position).
    ``last`` / ``mean``: no extra token; the last lookback token's output / the mean over tokens → H·C'.
    Known-future inputs ``fut`` (B', H, F) reach ``query`` through its token and ``last`` / ``mean``
    through the pooled vector (an embedding of all H·F values).

    Args:
        kind: ``query``, ``horizon``, ``last`` or ``mean``.
        d_model: model width D.
        horizon: forecast steps H.
        patch_len: steps per token P.
        n_out: outputs per step C' (1 per channel-independent sequence, else C).
        n_future: known-future inputs per step F (0: none).
    """

    def __init__(self, kind: str, d_model: int, horizon: int, patch_len: int, n_out: int,
                 n_future: int) -> None:
        super().__init__()
        self.kind, self.horizon, self.patch_len, self.n_out = kind, horizon, patch_len, n_out
        self.n_tokens = {"query": 1, "horizon": math.ceil(horizon / patch_len)}.get(kind, 0)
        if self.n_tokens:
            self.query = nn.Parameter(torch.randn(1, self.n_tokens, d_model) * 0.02)
        else:
            self.query = None
        per_token = kind == "horizon"
        self.future = None
        if n_future:
            width = patch_len * n_future if per_token else horizon * n_future
            self.future = nn.Linear(width, d_model)
        self.out = nn.Linear(d_model, patch_len * n_out if per_token else horizon * n_out)

    def _future(self, fut: Tensor) -> Tensor:
        """(B', H, F) → (B', T', D): one embedding per horizon patch (``horizon``) or of all (T' = 1)."""
        if self.kind != "horizon":
            return self.future(fut.flatten(1))[:, None]  # (B', 1, D)
        pad = self.n_tokens * self.patch_len - fut.shape[1]
        fut = torch.nn.functional.pad(fut, (0, 0, 0, pad))  # (B', M·P, F)
        return self.future(patchify(fut, self.patch_len))  # (B', M, D)

    def tokens(self, batch: int, fut: Tensor | None) -> Tensor | None:
        """The extra tokens (B', M, D), or ``None`` for ``last`` / ``mean``."""
        if self.query is None:
            return None
        tok = self.query.expand(batch, -1, -1)  # (B', M, D)
        return tok + self._future(fut) if self.future is not None else tok

    def positions(self, tok_pos: Tensor, pos: Tensor) -> Tensor:
        """Positions (B', M) of the extra tokens: those that continue the lookback's token positions
        ``tok_pos`` (B', N) (for float time positions, the step after the last ``pos`` (B', L), ÷ P)."""
        steps = torch.arange(self.n_tokens, device=tok_pos.device)
        if tok_pos.is_floating_point():
            return (pos[:, -1:] + 1) / self.patch_len + steps.to(tok_pos.dtype)
        return tok_pos[:, -1:] + 1 + steps

    def read(self, h: Tensor, fut: Tensor | None) -> Tensor:
        """Backbone outputs h (B', T, D) → the forecast (B', H, C')."""
        b = h.shape[0]
        if self.kind == "horizon":
            out = self.out(h[:, -self.n_tokens:])  # (B', M, P·C')
            return out.reshape(b, -1, self.n_out)[:, : self.horizon]  # (B', H, C')
        pooled = h.mean(dim=1) if self.kind == "mean" else h[:, -1]  # (B', D)
        if self.query is None and self.future is not None:
            pooled = pooled + self._future(fut)[:, 0]
        return self.out(pooled).view(b, self.horizon, self.n_out)  # (B', H, C')
