"""One pre-LN Transformer encoder whose attention takes any ``posenc`` scheme.

The attention calls the scheme's three hooks the same way for every scheme and picks its kernel
from the scheme's metadata and the input length only (:func:`pipelines.model.attention.choose_path`):
SDPA's fused path with no bias, a strided view of one distance table for a translation-invariant
bias on CPU (any length, no L×L tensor), SDPA with an additive mask for other short biased inputs,
query blocks for long ones (memory linear in length), explicit weights for a value-side term,
FlexAttention for position-only biases on CUDA. A position-only bias (or distance table) is
computed once per forward and shared by every layer (the scheme instance is shared, so the bias is
the same).
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipelines.model.attention import AttentionSettings, blocked, build_mask, choose_path, dense, explicit, flex
from pipelines.model.toeplitz import distance_table, grad_rows, toeplitz_attention, unit_steps
from posenc import PosencError, PositionalEncoding, as_batched

log = logging.getLogger(__name__)
_NO_FLEX: set[int] = set()  # ids of scheme instances whose bias FlexAttention could not trace

__all__ = ["Attention", "AttentionSettings", "Block", "ForwardShare", "Transformer", "build_mask",
           "length_bucket"]


class ForwardShare:
    """What the layers of one forward share: the position-only mask (or distance table, ``kind``
    says which) built by the first layer, and whether the positions advance in unit steps.

    Without autograd (evaluation) the mask is also kept between forwards: ``key`` identifies the
    positions, the scheme's parameter/buffer versions (bumped by every in-place update, optimizer
    steps and ``load_state_dict`` included), the dtype and the device; a later forward with the same
    key reuses the mask. Only masks without key padding are kept, and only under ``no_grad``.
    """

    def __init__(self, reuse: ForwardShare | None = None, key: tuple | None = None,
                 pos: Tensor | None = None) -> None:
        self.mask: Tensor | None = None
        self.kind = ""
        self.ready = False
        self.unit: bool | None = None
        self.key, self.pos = key, pos
        if reuse is not None and key is not None and reuse.key == key and torch.equal(reuse.pos, pos):
            self.mask, self.kind, self.ready, self.unit = reuse.mask, reuse.kind, reuse.ready, reuse.unit


def share_key(
    pe: PositionalEncoding, pos: Tensor, key_padding_mask: Tensor | None, x: Tensor
) -> tuple | None:
    """Cache key of a position-only mask across forwards, or ``None`` when it must not be kept."""
    if torch.is_grad_enabled() or key_padding_mask is not None or pe.meta.content_bias:
        return None
    if "bias" not in pe.meta.acts_on:
        return None
    versions = tuple(t._version for t in (*pe.parameters(), *pe.buffers()))
    autocast = torch.is_autocast_enabled(x.device.type)
    return (tuple(pos.shape), pos.dtype, str(x.device), x.dtype, autocast, versions)


def _learns_bias(pe: PositionalEncoding) -> bool:
    """Whether gradients must reach the scheme's parameters (FlexAttention is then not used: its
    score_mod would capture them, and the SDPA paths' gradients are the tested ones)."""
    return torch.is_grad_enabled() and any(p.requires_grad for p in pe.parameters())


class Attention(nn.Module):
    """Multi-head self-attention calling ``pe.rotate``, ``pe.bias`` and ``pe.value_term``."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0,
                 settings: AttentionSettings | None = None) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = dropout
        self.settings = settings or AttentionSettings()

    def forward(
        self,
        x: Tensor,
        pos: Tensor,
        pe: PositionalEncoding,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        share: ForwardShare | None = None,
    ) -> Tensor:
        B, T, C = x.shape
        H = self.n_heads
        q, k, v = self.qkv(x).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, Dh)
        q, k = pe.rotate(q, k, pos, pos)
        drop = self.dropout if self.training else 0.0
        path = self._path(pe, T, x.device, drop, pos, key_padding_mask, share)
        if path.endswith("blocked"):
            y = blocked(q, k, v, pos, pe, key_padding_mask, causal, drop, self.settings,
                        value_side=path == "explicit-blocked")
        elif path == "flex":
            y = self._flex_or_fallback(q, k, v, pos, pe, key_padding_mask, causal, share)
        elif path == "sdpa+toeplitz":
            table = _shared(share, "table", lambda: distance_table(pe, q, T, causal))  # (H, 2T − 1)
            y = toeplitz_attention(q, k, v, table, drop, grad_rows(B, H, T))
        elif path == "sdpa-fused" and key_padding_mask is None:
            y = dense(q, k, v, None, causal, drop)
        else:
            mask = self._mask(q, k, pos, pe, key_padding_mask, causal, share)
            y = explicit(q, k, v, pos, pos, pe, mask, drop) if path == "explicit" else dense(
                q, k, v, mask, False, drop)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, H, T, Dh) → (B, T, C)
        return self.out(y)

    def _path(self, pe, T, device, drop, pos, key_padding_mask, share) -> str:
        """:func:`choose_path`, then the runtime conditions: FlexAttention traced and not learning
        the bias; contiguous positions and no key padding for the Toeplitz view."""
        settings = self.settings
        path = choose_path(pe.meta, T, device, settings, dropout=drop)
        if path == "flex" and (id(pe) in _NO_FLEX or _learns_bias(pe)):
            settings = replace(settings, flex=False)
            path = choose_path(pe.meta, T, device, settings, dropout=drop)
        if path == "sdpa+toeplitz" and (key_padding_mask is not None or not _unit_steps(pos, share)):
            path = choose_path(pe.meta, T, device, replace(settings, toeplitz=False), dropout=drop)
        return path

    def _flex_or_fallback(self, q, k, v, pos, pe, key_padding_mask, causal, share) -> Tensor:
        """FlexAttention; a scheme whose bias does not trace (e.g. ``torch.unique``) falls back to
        the SDPA paths once and for all, with a warning."""
        try:
            return flex(q, k, v, pos, pe, key_padding_mask, causal)
        except Exception as exc:  # noqa: BLE001 - any tracing failure means "not expressible"
            _NO_FLEX.add(id(pe))
            log.warning("FlexAttention unavailable for %s (%s); using SDPA", type(pe).__name__, exc)
        T = q.shape[-2]
        if T > self.settings.long_threshold:
            return blocked(q, k, v, pos, pe, key_padding_mask, causal, 0.0, self.settings, False)
        return dense(q, k, v, self._mask(q, k, pos, pe, key_padding_mask, causal, share), False, 0.0)

    @staticmethod
    def _mask(q, k, pos, pe, key_padding_mask, causal, share) -> Tensor | None:
        """The dense (B', H, T, T) additive mask; a position-only one is built once per forward."""
        T = q.shape[-2]

        def build() -> Tensor | None:
            return build_mask(pe.bias(q, pos, pos, k=k), key_padding_mask, causal, T, T, q.dtype, q.device)

        return build() if pe.meta.content_bias else _shared(share, "mask", build)


def _shared(share: ForwardShare | None, kind: str, build):
    """``build()``, or what an earlier layer of this forward (or a kept forward) built of this kind."""
    if share is not None and share.ready and share.kind == kind:
        return share.mask
    value = build()
    if share is not None:
        share.mask, share.kind, share.ready = value, kind, True
    return value


def _unit_steps(pos: Tensor, share: ForwardShare | None) -> bool:
    """:func:`pipelines.model.toeplitz.unit_steps`, checked once per forward."""
    if share is None:
        return unit_steps(pos)
    if share.unit is None:
        share.unit = unit_steps(pos)
    return share.unit


class Block(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float,
                 settings: AttentionSettings | None = None) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, dropout, settings)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model), nn.Dropout(dropout)
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pos, pe, key_padding_mask, causal, share: ForwardShare | None = None) -> Tensor:
        x = x + self.drop(self.attn(self.ln1(x), pos, pe, key_padding_mask, causal, share))
        return x + self.mlp(self.ln2(x))


def length_bucket(length: int) -> int:
    """Smallest multiple of 2^(⌊log2 T⌋ − 2) ≥ T: four buckets per octave, at most 25 % padding."""
    if length <= 16:
        return 16
    step = 2 ** (int(math.log2(length)) - 2)
    return -(-length // step) * step


class Transformer(nn.Module):
    """Pre-LN encoder over embeddings ``x`` (B, T, D) at explicit positions ``pos`` (T,) or (B, T).

    Args:
        d_model: width D.
        n_heads: heads H (D must be divisible by H).
        n_layers: number of blocks.
        pe: the positional encoding, built for (d_model, n_heads); one instance shared by all layers.
        d_ff: MLP width (default 4·D).
        dropout: dropout in attention, MLP and on the embedding sum.
        causal: forbid attention to later positions.
        scale_embedding: multiply token embeddings by √D before the encoding is added.
        compile: run the encoder through ``torch.compile``; inputs are padded (masked keys) to
            :func:`length_bucket` lengths so new lengths rarely recompile. Schemes with a ``conv``
            hook see the padding, so for them lengths are not padded (``dynamic`` shapes instead).
        long_threshold: lengths above this use the query-blocked attention for biased schemes.
        block_elements: bias elements per query block on the blocked path (sets memory per block).
        flex: use FlexAttention for position-only biases on CUDA.
        toeplitz: on CPU, read translation-invariant biases as a strided view of one distance
            table (:mod:`pipelines.model.toeplitz`) instead of a dense or blocked mask.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        pe: PositionalEncoding,
        d_ff: int | None = None,
        dropout: float = 0.0,
        causal: bool = False,
        scale_embedding: bool = False,
        *,
        compile: bool = False,  # noqa: A002 - the config key users write
        long_threshold: int = 4096,
        block_elements: int = 1 << 25,
        flex: bool = True,
        toeplitz: bool = True,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise PosencError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if long_threshold < 1 or block_elements < 1:
            raise PosencError(f"long_threshold and block_elements must be >= 1, got "
                              f"{long_threshold} and {block_elements}")
        self.pe = pe
        self.causal = causal
        self.scale = math.sqrt(d_model) if scale_embedding else 1.0
        self.use_compile = compile
        settings = AttentionSettings(long_threshold, block_elements, flex, toeplitz)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, d_ff or 4 * d_model, dropout, settings) for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, pos: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """Encode ``x`` (B, T, D); outputs at padded positions (mask True) are zero."""
        if self.use_compile:
            return self._compiled_forward(x, pos, key_padding_mask)
        return self.encode(x, pos, key_padding_mask)

    def encode(self, x: Tensor, pos: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The encoder itself (what ``compile`` compiles)."""
        key = share_key(self.pe, pos, key_padding_mask, x)
        share = ForwardShare(self.__dict__.get("_mask_cache"), key, pos)
        x = self.drop(self.pe.embed(x * self.scale, pos))  # (B, T, D)
        for block in self.blocks:
            x = block(x, pos, self.pe, key_padding_mask, self.causal, share)
        self.__dict__["_mask_cache"] = share if key is not None and share.ready else None
        x = self.ln_f(x)
        if key_padding_mask is not None:
            x = x.masked_fill(key_padding_mask[..., None], 0.0)
        return x

    def _compiled_forward(self, x: Tensor, pos: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        """Pad to the length bucket (extra keys masked, positions repeat the last one), run, cut."""
        fn = self.__dict__.get("_compiled")
        if fn is None:  # kept out of the module tree: no state_dict entry, nothing to pickle
            fn = torch.compile(self.encode, dynamic=True if "conv" in self.pe.meta.acts_on else None)
            self.__dict__["_compiled"] = fn
        B, T, _ = x.shape
        extra = length_bucket(T) - T
        if extra == 0 or "conv" in self.pe.meta.acts_on:
            return fn(x, pos, key_padding_mask)
        x = F.pad(x, (0, 0, 0, extra))  # (B, T', D)
        p = as_batched(pos)  # (B', T)
        p = torch.cat((p, p[:, -1:].expand(-1, extra)), dim=1)  # (B', T')
        pos = p[0] if pos.dim() == 1 else p
        kpm = key_padding_mask if key_padding_mask is not None else x.new_zeros(B, T, dtype=torch.bool)
        kpm = F.pad(kpm, (0, extra), value=True)  # (B, T')
        return fn(x, pos, kpm)[:, :T]

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_compiled", None)  # a compiled function does not pickle; rebuilt on first use
        state.pop("_mask_cache", None)
        return state
