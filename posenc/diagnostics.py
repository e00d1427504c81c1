"""Diagnostics of a positional encoding: numbers here, figures in :mod:`posenc.diagnostic_plots`.

Each function reads a scheme only through its public hooks (``embed``, ``rotate``, ``bias``) and
its frequencies, so it works for every scheme of the catalogue, compositions included:

* :func:`position_features` — what the scheme attaches to each position (T, F);
* :func:`similarity_vs_offset` — F(t)·F(t + Δ) for several anchors t (overlapping curves: relative);
* :func:`aliasing_distance` and :func:`local_minima` — ‖F(t) − F(t + T)‖ against the lag T;
* :func:`band_periods` — the period of every rotary band, pinned bands marked;
* :func:`phase_mismatch_signal` — how the q·k signal of a periodic pattern decays when the band
  that carries it rotates at a slightly different frequency;
* :func:`bias_vs_distance` — the logit bias per head against the signed distance;
* :func:`attention_weights` and :func:`attention_distance_histogram` — where a model's attention
  mass falls (any model built on :class:`posenc.nn.Attention`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from posenc.base import PosencError, PositionalEncoding, as_batched
from posenc.nn.attention import Attention

# ----------------------------------------------------------------------------- features


@torch.no_grad()
def position_features(pe: PositionalEncoding, pos: Tensor) -> Tensor | None:
    """What the scheme attaches to positions ``pos`` (T,), as (T, F) float64, or ``None``.

    Input and conv schemes: ``embed(1, pos) − 1``, the change they make to a constant input (the
    table P(pos) for additive schemes; the zero-padding edges for a convolution). Rotary schemes:
    the all-ones query of one head rotated to each position, so F(t)·F(u) is the rotary q·k
    signal. Both are concatenated for compositions; bias-only schemes have no features.
    """
    acts, parts = set(pe.meta.acts_on), []
    if acts & {"input", "conv"}:
        ones = torch.ones(1, pos.shape[-1], pe.d_model)  # (1, T, D)
        parts.append((pe.embed(ones, pos) - ones)[0].double())  # (T, D)
    if "rotate" in acts:
        q = torch.ones(1, 1, pos.shape[-1], pe.head_dim, dtype=torch.float64)  # (1, 1, T, Dh)
        rq, _ = pe.rotate(q, q, pos, pos)
        parts.append(rq[0, 0].double())  # (T, Dh)
    return torch.cat(parts, dim=-1) if parts else None  # (T, F)


def similarity_vs_offset(features: Tensor, anchors: Sequence[int], max_offset: int) -> np.ndarray:
    """F(t)·F(t + Δ) / F(t)·F(t) for each anchor t and Δ = 0..max_offset: (len(anchors), Δ + 1).

    ``features`` must cover positions up to max(anchors) + max_offset (row index = position).
    """
    if max(anchors) + max_offset >= features.shape[0]:
        need = max(anchors) + max_offset + 1
        raise PosencError(f"features cover {features.shape[0]} positions, need {need}")
    rows = []
    for t in anchors:
        f0 = features[t]  # (F,)
        norm = float(f0 @ f0) or 1.0
        rows.append((features[t : t + max_offset + 1] @ f0 / norm).numpy())  # (Δ + 1,)
    return np.stack(rows)


def aliasing_distance(features: Tensor, max_lag: int, n_anchor: int) -> np.ndarray:
    """Mean over t < ``n_anchor`` of ‖F(t) − F(t + T)‖ / mean ‖F(t)‖, for T = 0..max_lag: (max_lag + 1,).

    A near-zero value at T > 0 means positions T apart look alike (the encoding aliases them).
    """
    if n_anchor + max_lag > features.shape[0]:
        raise PosencError(f"features cover {features.shape[0]} positions, need {n_anchor + max_lag}")
    base = features[:n_anchor]  # (N, F)
    scale = float(base.norm(dim=-1).mean()) or 1.0
    out = [(features[lag : lag + n_anchor] - base).norm(dim=-1).mean() for lag in range(max_lag + 1)]
    return np.asarray([float(v) / scale for v in out])


def local_minima(values: np.ndarray, k: int = 5) -> list[int]:
    """Indices (> 0) of the ``k`` deepest strict local minima of a 1-D curve, deepest first."""
    v = np.asarray(values)
    idx = [i for i in range(1, len(v) - 1) if v[i] < v[i - 1] and v[i] <= v[i + 1]]
    return sorted(idx, key=lambda i: (v[i], i))[:k]


# ----------------------------------------------------------------------------- rotary bands


def rotary_part(pe: nn.Module) -> nn.Module | None:
    """The first (sub)module with RoPE frequencies (``scaled_frequencies``), or ``None``."""
    for m in pe.modules():
        if hasattr(m, "scaled_frequencies") and hasattr(m, "pinned"):
            return m
    return None


def band_periods(pe: nn.Module) -> tuple[np.ndarray, np.ndarray]:
    """Period 2π/θ_i of every rotary band (after static scaling) and the pinned mask, each (Dh/2,)."""
    rope = rotary_part(pe)
    if rope is None:
        raise PosencError(f"{type(pe).__name__} has no rotary bands")
    with torch.no_grad():
        freqs = rope.scaled_frequencies().double()  # (Dh/2,)
    return (2 * math.pi / freqs).numpy(), rope.pinned().numpy()


def phase_mismatch_signal(freqs: np.ndarray, period: float, n_repeats: int) -> np.ndarray:
    """Per band, cos(θ_i·n·P) for n = 0..n_repeats: (Dh/2, n_repeats + 1).

    A query and a key one period P apart carry the same periodic pattern, so ideally their
    logit is the same at every repeat n. Band i rotates them apart by θ_i·n·P; only a band with
    θ_i = 2π/P (a pinned band) keeps the signal at 1, a band off by δ loses it as cos(δ·n·P).
    """
    n = np.arange(n_repeats + 1)
    phase = np.asarray(freqs)[:, None] * n[None, :] * period  # (Dh/2, N + 1)
    return np.cos(np.remainder(phase, 2 * math.pi))


def mean_band_signal(freqs: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(1/n)·Σ_i cos(θ_i·Δ): the rotary logit of a q = k aligned in every band, at offsets Δ."""
    return np.cos(np.remainder(np.outer(offsets, freqs), 2 * math.pi)).mean(axis=1)


# ----------------------------------------------------------------------------- biases


@torch.no_grad()
def bias_vs_distance(pe: PositionalEncoding, max_distance: int, seed: int = 0) -> np.ndarray | None:
    """Bias of the middle query against keys at signed distances −M..M: (H, 2M + 1), or ``None``.

    Content-dependent biases (DeBERTa, Transformer-XL) are shown for random unit-variance q, k
    drawn with ``seed``.
    """
    if "bias" not in pe.meta.acts_on:
        return None
    t = 2 * max_distance + 1
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, pe.n_heads, t, pe.head_dim, generator=g)  # (1, H, T, Dh) each
    pos = torch.arange(t)
    b = pe.bias(q, pos, pos, k=k)
    if b is None:
        return None
    b = b.expand(1, pe.n_heads, t, t)  # (1, H, T, T)
    return b[0, :, max_distance, :].double().numpy()  # (H, 2M + 1)


# ----------------------------------------------------------------------------- trained models


@torch.no_grad()
def attention_weights(model: nn.Module, run: Callable[[], Any]) -> list[Tensor]:
    """Attention weights (B, H, T, T) of every :class:`posenc.nn.Attention` layer of ``model`` during
    ``run()`` (a forward pass), recomputed explicitly from each layer's inputs."""
    captured: list[Tensor] = []
    names = inspect.signature(Attention.forward).parameters
    arg_names = [n for n in names if n != "self"]

    def hook(module: Attention, args: tuple, kwargs: dict, _out: Tensor) -> None:
        a = {**dict(zip(arg_names, args, strict=False)), **kwargs}
        captured.append(module.weights(a["x"], a["pos"], a.get("key_padding_mask")).cpu())

    layers = [m for m in model.modules() if isinstance(m, Attention)]
    if not layers:
        raise PosencError(f"{type(model).__name__} has no posenc.nn.Attention layers")
    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in layers]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return captured


def attention_distance_histogram(weights: list[Tensor], pos: Tensor | None = None) -> np.ndarray:
    """Share of attention mass at each distance |i − j| (0..T−1), averaged over layers, heads, queries.

    ``pos`` (T,) or (B, T) gives the positions (default 0..T−1); distances are in positions.
    """
    T = weights[0].shape[-1]
    p = as_batched(torch.arange(T) if pos is None else pos.cpu()).long()  # (B', T)
    dist = (p[:, None, :] - p[:, :, None]).abs()  # (B', T, T)
    n = int(dist.max()) + 1
    hist = torch.zeros(n, dtype=torch.float64)
    for w in weights:
        d = dist[:, None].expand_as(w)  # (B, H, T, T)
        hist += torch.bincount(d.reshape(-1), weights=w.double().reshape(-1), minlength=n)
    return (hist / hist.sum()).numpy()
