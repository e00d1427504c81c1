"""Multi-head self-attention for any ``posenc`` scheme: the module, its path choice and its kernels.

:class:`Attention` calls the scheme's three hooks the same way for every scheme. Each call packs
what the kernels need besides q, k, v into one :class:`AttentionCall`, chooses its path once
(:func:`route`: the scheme's metadata through :func:`choose_path`, under the conditions only the
call knows) and runs that path's kernel from :data:`KERNELS`. The scheme's class is never
looked at. Paths:

* ``sdpa-fused`` — no bias hook: :func:`torch.nn.functional.scaled_dot_product_attention` with no
  mask (``is_causal`` for a causal model without padding), SDPA's fused kernels.
* ``sdpa+toeplitz`` — a translation-invariant position-only bias on CPU, contiguous positions and no
  key padding: the bias is a (1, H, T, T) strided view of one (H, 2T − 1) distance table, read by
  SDPA's fused kernel at any length (:mod:`posenc.nn.toeplitz`); memory linear in T, no blocks.
* ``sdpa+bias`` — a bias hook, short input: the dense (B', H, T, T) bias as SDPA's additive mask.
* ``sdpa-blocked`` — a bias hook, long input: queries in blocks of R rows; each block asks the
  scheme for its (B', H, R, Tk) bias (positions are explicit, so ``bias(q_blk, q_pos_blk, k_pos, k)``
  is the same hook) and runs SDPA on it. R shrinks as Tk grows so a block holds a fixed number of
  bias elements: memory is linear in the length. Under autograd each block is checkpointed (its bias
  is recomputed in backward) so training memory stays linear too.
* ``explicit`` / ``explicit-blocked`` — a value-side term (Shaw): weights computed explicitly
  (whole, or per query block) and handed to ``pe.value_term``.
* ``clipped`` — clipped relative keys and values (``meta.clipped_relative``, Shaw) on CPU, no key
  padding or attention dropout, unit-step positions and T > 2m: keys beyond ±m run through the fused
  flash kernel with shifted keys/values, the 2m − 1 nearer ones explicitly (:mod:`posenc.nn.clipped`).
* ``flex`` — CUDA only, a translation-invariant position-only bias, more keys than
  ``long_threshold``, heads of at least 16 dimensions, no attention dropout, no gradient to the
  scheme's parameters: FlexAttention whose ``score_mod`` reads the bias from a per-head distance
  table built by the bias hook; nothing L×L is stored. Where Flex fails (a kernel that does not
  compile) the layer falls back to the SDPA paths and keeps the verdict (:mod:`posenc.nn.flex`).

A position-only mask or distance table is built by the first layer of a forward and read by the
others (:mod:`posenc.nn.share`).

Local window (``window`` = w; LM-Infinite's local branch, Han et al. 2024, "LM-Infinite: Zero-Shot
Extreme Length Generalization for Large Language Models"; the sliding window of Longformer and Mistral):
query i attends only keys j with |i − j| < w (causal: its w latest keys, itself included), so a model
trained on windows of w tokens never sees a relative distance it was not trained on, at any length.
Unlike the other settings it changes what is computed. An input longer than w runs on the blocked path
with each query block visiting only the keys its window reaches (memory O(T·w)); a shorter one is
unaffected.

Log-length temperature (``log_scale_len`` = L0, :mod:`posenc.nn.temperature`): the logits of query
i, content and bias alike, are multiplied by s_i = max(1, log n_i / log L0). Every kernel applies it:
q is scaled row by row (the bias hooks still see the unscaled q) and so is the bias; the Toeplitz view
takes only a scale constant over rows (bidirectional), so a causal call that needs one goes to the
dense or blocked path, and FlexAttention is skipped for it (its ``score_mod`` is not given the scale).

Adding a path is a local change: write a kernel ``fn(q, k, v, ctx) -> (B, H, T, Dh)`` reading
what else it needs from the :class:`AttentionCall` (and ``ctx.share`` for anything built once per
forward), add it to :data:`KERNELS` under a new name, and return that name from one branch of
:func:`choose_path` (a condition only the call can check, such as the positions, goes in as a
lazily evaluated ``can_*`` argument from :func:`route`, like ``can_toeplitz``), then add the
path to the configurations ``tests/test_attention_paths.py`` checks against its dense float64
reference.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from posenc.base import PosencError, PositionalEncoding, as_batched
from posenc.nn.clipped import clipped_attention, fits
from posenc.nn.flex import MIN_HEAD_DIM, flex_attention_bias
from posenc.nn.mask import band, build_mask
from posenc.nn.paths import AttentionSettings, choose_path
from posenc.nn.share import ForwardShare
from posenc.nn.temperature import check_log_scale_len, length_scale
from posenc.nn.toeplitz import distance_table, grad_rows, toeplitz_attention

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttentionCall:
    """Everything one attention call's kernel needs besides q, k and v.

    Attributes:
        pos: positions (T,) or (B, T) of the queries and keys.
        pe: the positional encoding whose hooks the kernels call.
        key_padding_mask: (B, T) bool, True at padded keys, or ``None``.
        causal: forbid keys after the query.
        drop: attention dropout probability (0 outside training).
        settings: how the attention runs.
        share: what the layers of this forward share (a fresh one lives for this call alone).
        flex_ok: FlexAttention has not failed on this layer's bias.
        row_scale: (B', 1, T, 1) log-length temperature per query row (:func:`length_scale`), or
            ``None`` where every row's is 1.
        window: keys less than this many rows from the query are attended (``None``: all).
    """

    pos: Tensor
    pe: PositionalEncoding
    key_padding_mask: Tensor | None = None
    causal: bool = False
    drop: float = 0.0
    settings: AttentionSettings = field(default_factory=AttentionSettings)
    share: ForwardShare = field(default_factory=ForwardShare)
    flex_ok: bool = True
    row_scale: Tensor | None = None
    window: int | None = None


class Attention(nn.Module):
    """Multi-head self-attention with its positional encoding built in.

    The encoding is given once, when the attention is built (a
    :class:`~posenc.nn.transformer.Transformer` hands one instance to all its layers); every call
    then asks it for ``rotate``, ``bias`` and ``value_term``. ``embed`` acts on the token
    embeddings before the first layer, so it is the caller's (the Transformer calls it).

    Args:
        d_model: width D (divisible by ``n_heads``).
        n_heads: heads H.
        pe: the positional encoding, built for (d_model, n_heads); ``None``: no encoding (NoPE).
        dropout: attention dropout probability (applied in training only).
        causal: forbid keys after the query.
        settings: how the attention runs (every path gives the same result).
        log_scale_len: L0, the training length: logits of a query attending n keys are multiplied by
            max(1, log n / log L0) (see the module docstring); ``None``: no temperature.
        window: local attention window w: query i attends keys with |i − j| < w (see the module
            docstring); ``None``: every key. May be changed after building (an inference setting).
    """

    def __init__(self, d_model: int, n_heads: int, pe: PositionalEncoding | None = None,
                 dropout: float = 0.0, causal: bool = False,
                 settings: AttentionSettings | None = None, log_scale_len: int | None = None,
                 window: int | None = None) -> None:
        super().__init__()
        if d_model % n_heads:
            raise PosencError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.log_scale_len = check_log_scale_len(log_scale_len)
        self.window = check_window(window)
        self.n_heads = n_heads
        self.pe = pe if pe is not None else PositionalEncoding(d_model, n_heads)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = dropout
        self.causal = causal
        self.settings = settings or AttentionSettings()
        # False where FlexAttention cannot run this layer: a head under its minimum size, or a
        # failed Flex call (set then)
        self.flex_ok = d_model // n_heads >= MIN_HEAD_DIM

    def forward(self, x: Tensor, pos: Tensor, key_padding_mask: Tensor | None = None,
                share: ForwardShare | None = None) -> Tensor:
        """Attend over ``x`` (B, T, C) at positions ``pos`` (T,) or (B, T).

        Args:
            key_padding_mask: (B, T) bool, True at padded keys, or ``None``.
            share: what the layers of one forward share (the Transformer passes it); ``None``
                for a call on its own.
        """
        B, T, C = x.shape
        q, k, v = self._qkv(x, pos)  # 3 × (B, H, T, Dh)
        drop = self.dropout if self.training else 0.0
        share = share if share is not None else ForwardShare()
        scale = length_scale(T, self.log_scale_len, self.causal, key_padding_mask, q,
                             self.window)  # (B', 1, T, 1) or None
        ctx = AttentionCall(pos, self.pe, key_padding_mask, self.causal, drop, self.settings, share,
                            self.flex_ok, scale, self.window)
        path = route(ctx, T, x.device)  # the path, chosen once
        y = self._flex_or_sdpa(q, k, v, ctx) if path == "flex" else KERNELS[path](q, k, v, ctx)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, H, T, Dh) → (B, T, C)
        return self.out(y)

    def _qkv(self, x: Tensor, pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries and keys rotated by the encoding, and values: 3 × (B, H, T, Dh)."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = self.pe.rotate(q, k, pos, pos)
        return q, k, v

    def _flex_or_sdpa(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionCall) -> Tensor:
        """``flex``; a bias that does not trace falls back to the SDPA paths for good (this layer
        keeps the verdict: later forwards skip flex)."""
        try:
            return flex(q, k, v, ctx)
        except Exception as exc:  # noqa: BLE001 - any tracing failure means "not expressible"
            self.flex_ok = False
            log.warning("FlexAttention unavailable for %s (%s); using SDPA", type(self.pe).__name__, exc)
        ctx = replace(ctx, flex_ok=False)
        return KERNELS[route(ctx, q.shape[-2], q.device)](q, k, v, ctx)

    @torch.no_grad()
    def weights(self, x: Tensor, pos: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The softmax weights (B, H, T, T) this layer gives ``x`` (B, T, C), computed explicitly
        in float32 (what the attention diagnostics plot); a row whose keys are all masked is 0."""
        T = x.shape[1]
        q, k, _ = self._qkv(x, pos)  # (B, H, T, Dh) each
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])  # (B, H, T, T)
        bias = self.pe.bias(q, pos, pos, k=k)
        if bias is not None:
            scores = scores + bias.float()
        scale = length_scale(T, self.log_scale_len, self.causal, key_padding_mask, scores, self.window)
        scores = scores if scale is None else scores * scale  # (B, H, T, T)
        keep = band(T, T, 0, self.causal, self.window, x.device)[None, None]  # (1, 1, T, T)
        if key_padding_mask is not None:
            keep = keep & ~key_padding_mask[:, None, None, :]  # (B, 1, T, T)
        return scores.masked_fill(~keep, float("-inf")).softmax(dim=-1).nan_to_num(0.0)


def route(ctx: AttentionCall, length: int, device: torch.device) -> str:
    """The call's path: :func:`choose_path` on the scheme's metadata, with the conditions only the
    call knows (asked only when the path they guard would be chosen): FlexAttention has not failed
    in this layer, no gradient must reach the scheme's parameters and no log-length temperature
    applies; the Toeplitz view and the clipped path need no key padding and positions in unit steps,
    the Toeplitz view a temperature constant over rows, the clipped path T > 2m."""
    pe = ctx.pe
    if ctx.window is not None and length > ctx.window:  # only the blocked kernels visit a window's keys
        return "explicit-blocked" if pe.meta.attention_path == "explicit" else "sdpa-blocked"
    contiguous = lambda: ctx.key_padding_mask is None and ctx.share.unit_steps(ctx.pos)
    constant_scale = ctx.row_scale is None or not ctx.causal  # per-row scales break the Toeplitz view
    return choose_path(
        pe.meta, length, device, ctx.settings, ctx.drop,
        can_flex=lambda: ctx.flex_ok and ctx.row_scale is None and not _learns_bias(pe),
        can_toeplitz=lambda: constant_scale and contiguous(),
        can_clip=lambda: contiguous() and fits(pe, length),
    )


def _learns_bias(pe: PositionalEncoding) -> bool:
    """Whether gradients must reach the scheme's parameters (FlexAttention is then not used: its
    score_mod would capture them, and the SDPA paths' gradients are the tested ones)."""
    return torch.is_grad_enabled() and any(p.requires_grad for p in pe.parameters())


# ----------------------------------------------------------------------------- kernels
# Each takes (B, H, T, Dh) q, k, v and the call's context and returns (B, H, T, Dh).


def fused(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionCall) -> Tensor:
    """``sdpa-fused``: no bias; only key padding (as a mask shared by the layers) or causality."""
    qs = _scaled(q, ctx.row_scale)
    if ctx.key_padding_mask is None:
        return F.scaled_dot_product_attention(qs, k, v, dropout_p=ctx.drop, is_causal=ctx.causal)
    return F.scaled_dot_product_attention(qs, k, v, attn_mask=_mask(q, k, ctx), dropout_p=ctx.drop)


def biased(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionCall) -> Tensor:
    """``sdpa+bias``: the dense bias, key padding and causality as one SDPA additive mask."""
    mask = _mask(q, k, ctx)  # the bias hook sees the unscaled q
    return F.scaled_dot_product_attention(_scaled(q, ctx.row_scale), k, v, attn_mask=mask, dropout_p=ctx.drop)


def toeplitz(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionCall) -> Tensor:
    """``sdpa+toeplitz``: the bias as a view of one distance table, built once per forward."""
    B, H, T, _ = q.shape
    table = ctx.share.get("table", lambda: distance_table(ctx.pe, q, T, ctx.causal))  # (H', 2T − 1)
    if ctx.row_scale is not None:  # constant over rows here (route): scale the logits, bias included
        s = ctx.row_scale[0, 0, 0, 0]
        q, table = q * s, table * s
    return toeplitz_attention(q, k, v, table, ctx.drop, grad_rows(B, H, T))


def explicit(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionCall) -> Tensor:
    """``explicit``: whole-sequence weights, handed to the scheme's value-side term."""
    return _weighted(q, k, v, _mask(q, k, ctx), ctx, ctx.pos, ctx.pos, ctx.row_scale)


def clipped(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionCall) -> Tensor:
    """``clipped``: far keys by the flash kernel, the band explicitly (:mod:`posenc.nn.clipped`)."""
    m, rel_key, rel_value = ctx.pe.clipped_tables()  # logits q·(k + a^K)/√Dh: linear in q, so scale q
    return clipped_attention(_scaled(q, ctx.row_scale), k, v, m, rel_key, rel_value, ctx.causal)


def blocked(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionCall, value_side: bool = False) -> Tensor:
    """``sdpa-blocked``: one block of query rows at a time; never builds an L×L tensor.

    A causal model's block at rows [s, e) only needs keys [0, e), so later keys are not visited; with
    a local window w only keys [s − w + 1, e + w − 1) (causal: [s − w + 1, e)).
    ``value_side`` computes each block's weights explicitly for the value-side term instead.
    """
    B, H, T, _ = q.shape
    w = ctx.window
    rows = block_rows(ctx.settings, B, H, T) if w is None else min(block_rows(ctx.settings, B, H, 2 * w), w)
    pos_b = as_batched(ctx.pos)  # (B', T)
    kpm_all = ctx.key_padding_mask
    train = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    outs = []
    for s in range(0, T, rows):
        e = min(T, s + rows)
        ks = 0 if w is None else max(0, s - w + 1)  # keys the block can see: [ks, ke)
        ke = e if ctx.causal else (T if w is None else min(T, e + w - 1))
        kpm = kpm_all[:, ks:ke] if kpm_all is not None else None
        args = (q[:, :, s:e], k[:, :, ks:ke], v[:, :, ks:ke], pos_b[:, s:e], pos_b[:, ks:ke], kpm)
        fn = _BlockFn(ctx, s, s - ks, value_side)
        outs.append(checkpoint(fn, *args, use_reentrant=False) if train else fn(*args))  # (B, H, R, Dh)
    return torch.cat(outs, dim=2)  # (B, H, T, Dh)


def explicit_blocked(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionCall) -> Tensor:
    """``explicit-blocked``: :func:`blocked` with explicit weights for the value-side term."""
    return blocked(q, k, v, ctx, value_side=True)


class _BlockFn:
    """One query block: its bias, its mask and its attention (a callable for checkpointing)."""

    def __init__(self, ctx: AttentionCall, start: int, offset: int, value_side: bool) -> None:
        self.ctx, self.start, self.offset, self.value_side = ctx, start, offset, value_side

    def __call__(self, qb, kb, vb, q_pos, k_pos, kpm) -> Tensor:
        ctx, R = self.ctx, qb.shape[-2]
        rs = ctx.row_scale
        rs = None if rs is None else rs[:, :, self.start:self.start + R]  # (B', 1, R, 1)
        bias = _scaled(ctx.pe.bias(qb, q_pos, k_pos, k=kb), rs)  # (B', H, R, Tk) or None
        mask = build_mask(bias, kpm, ctx.causal, R, kb.shape[-2], qb.dtype, qb.device, q_offset=self.offset,
                          window=ctx.window)
        if self.value_side:
            return _weighted(qb, kb, vb, mask, ctx, q_pos, k_pos, rs)
        return F.scaled_dot_product_attention(_scaled(qb, rs), kb, vb, attn_mask=mask,
                                              dropout_p=ctx.drop)  # (B, H, R, Dh)


def flex(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionCall) -> Tensor:
    """``flex``: FlexAttention with the scheme's position-only bias as ``score_mod`` (CUDA;
    :func:`posenc.nn.flex.flex_attention_bias`)."""
    return flex_attention_bias(q, k, v, ctx.pe, ctx.pos, ctx.key_padding_mask, ctx.causal, ctx.share)


KERNELS: dict[str, Callable[[Tensor, Tensor, Tensor, AttentionCall], Tensor]] = {
    "sdpa-fused": fused,
    "sdpa+toeplitz": toeplitz,
    "sdpa+bias": biased,
    "sdpa-blocked": blocked,
    "explicit": explicit,
    "explicit-blocked": explicit_blocked,
    "clipped": clipped,
    "flex": flex,  # Attention falls back to the SDPA paths when the bias does not trace
}
"""Path name (as :func:`choose_path` returns it) → kernel."""


# ----------------------------------------------------------------------------- shared pieces


def _mask(q: Tensor, k: Tensor, ctx: AttentionCall) -> Tensor | None:
    """The dense (B', H, T, T) additive mask; a position-only one is built once per forward."""
    T = q.shape[-2]

    def build() -> Tensor | None:
        bias = _scaled(ctx.pe.bias(q, ctx.pos, ctx.pos, k=k), ctx.row_scale)
        return build_mask(bias, ctx.key_padding_mask, ctx.causal, T, T, q.dtype, q.device)

    return build() if ctx.pe.meta.content_bias else ctx.share.get("mask", build)


def _weighted(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttentionCall,
              q_pos: Tensor, k_pos: Tensor, row_scale: Tensor | None = None) -> Tensor:
    """Softmax attention with explicit weights and the scheme's value-side term (``mask`` already
    holds the scaled bias; ``row_scale`` scales the content logits)."""
    scores = _scaled(q, row_scale) @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores + mask
    w = F.dropout(scores.softmax(dim=-1), p=ctx.drop)  # (B, H, Tq, Tk)
    y = w @ v  # (B, H, Tq, Dh)
    extra = ctx.pe.value_term(w, q_pos, k_pos)
    return y if extra is None else y + extra


def _scaled(x: Tensor | None, row_scale: Tensor | None) -> Tensor | None:
    """``x`` (…, Tq, ·) with row i multiplied by the temperature s_i; unchanged without one."""
    return x if x is None or row_scale is None else x * row_scale


def check_window(window: int | None, name: str = "attention window") -> int | None:
    """``window`` as given, or :class:`PosencError` (naming it ``name``) unless it is ``None`` or an
    integer ≥ 1."""
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
        raise PosencError(f"{name} must be an integer >= 1 or null, got {window!r}")
    return window


def block_rows(settings: AttentionSettings, batch: int, heads: int, tk: int) -> int:
    """Query rows per block so one block's bias holds about ``block_elements`` elements."""
    return max(16, settings.block_elements // max(1, batch * heads * tk))
