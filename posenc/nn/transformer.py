"""One pre-LN Transformer encoder whose attention takes any ``posenc`` scheme.

The attention (its module, path choice and kernels) is :mod:`posenc.nn.attention`. A
position-only bias (or distance table) is computed once per forward and shared by every layer
through a :class:`posenc.nn.share.ForwardShare` (the scheme instance is shared, so the bias is
the same); under evaluation it is kept between forwards while positions and parameters are unchanged.
"""

from __future__ import annotations

import math
import re
from dataclasses import fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc import PosencError, PositionalEncoding, as_batched
from posenc.nn.attention import Attention, check_window
from posenc.nn.paths import AttentionSettings
from posenc.nn.share import ForwardShare, share_key
from posenc.nn.temperature import check_log_scale_len

__all__ = ["Block", "Transformer", "length_bucket"]


class Block(nn.Module):
    """Pre-LN block around a built attention: x + Attn(LN(x)), then x + MLP(LN(x)).

    Args:
        attn: the attention (its encoding, causality and settings are given when it is built).
        d_ff: MLP width.
        dropout: dropout on the attention output and in the MLP.
    """

    def __init__(self, attn: Attention, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        d_model = attn.out.out_features
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = attn
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model), nn.Dropout(dropout)
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, pos: Tensor, key_padding_mask: Tensor | None = None,
                share: ForwardShare | None = None) -> Tensor:
        """``x`` (B, T, D) at positions ``pos`` → (B, T, D)."""
        x = x + self.drop(self.attn(self.ln1(x), pos, key_padding_mask, share))
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
        embedding_dropout: dropout on the embedding sum alone (default: ``dropout``); with
            ``dropout=0`` it is the "Dropout(√d·E(token) + PE(p))" of the embedding options.
        log_scale_len: L0 of the log-length attention temperature (:mod:`posenc.nn.temperature`):
            a query attending n > L0 keys has its logits multiplied by log n / log L0 in every layer;
            ``None``: off.
        window: local attention window w of every layer (:mod:`posenc.nn.attention`): query i attends
            only keys with |i − j| < w; ``None``: all keys. Assigning ``transformer.window`` changes it in
            every layer (e.g. set to the training length for inference on longer inputs).
        settings: how the attention runs (:class:`~posenc.nn.AttentionSettings`: the blocked-path
            threshold and block size, FlexAttention, the Toeplitz view, the clipped kernel, and
            ``compile``, which runs the encoder through ``torch.compile`` with inputs padded (masked
            keys) to :func:`length_bucket` lengths so new lengths rarely recompile; schemes with a
            ``conv`` hook see the padding, so for them lengths are not padded, ``dynamic`` shapes
            instead). Every setting gives the same result.

    The six settings were flat keywords before (``long_threshold=``, ``compile=``…); passing one names
    its new place instead of failing on an unknown keyword.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        pe: PositionalEncoding,
        *,
        d_ff: int | None = None,
        dropout: float = 0.0,
        causal: bool = False,
        scale_embedding: bool = False,
        embedding_dropout: float | None = None,
        log_scale_len: int | None = None,
        window: int | None = None,
        settings: AttentionSettings = AttentionSettings(),  # noqa: B008 - frozen: a shared default is safe
        **moved: object,
    ) -> None:
        super().__init__()
        if moved:
            raise TypeError(_moved_message(moved))
        if d_model % n_heads:
            raise PosencError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.pe = pe
        self.causal = causal
        self.scale = math.sqrt(d_model) if scale_embedding else 1.0
        self.use_compile = settings.compile
        self.drop = nn.Dropout(dropout if embedding_dropout is None else embedding_dropout)
        self.blocks = nn.ModuleList(
            Block(Attention(d_model, n_heads, pe, dropout, causal, settings, log_scale_len, window),
                  d_ff or 4 * d_model, dropout)
            for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.register_state_dict_post_hook(_save_encoding_once)
        self.register_load_state_dict_pre_hook(_load_encoding_everywhere)

    def __setattr__(self, name: str, value: object) -> None:
        """Assigning ``pe`` swaps the encoding of every layer too (one encoding per Transformer)."""
        super().__setattr__(name, value)
        if name == "pe" and "blocks" in self._modules:
            for block in self.blocks:
                block.attn.pe = value

    @property
    def window(self) -> int | None:
        """The local attention window of every layer (``None``: all keys); assignable."""
        return self.blocks[0].attn.window

    @window.setter
    def window(self, value: int | None) -> None:
        for block in self.blocks:
            block.attn.window = check_window(value)

    @property
    def log_scale_len(self) -> int | None:
        """L0 of every layer's log-length attention temperature (``None``: off); assignable."""
        return self.blocks[0].attn.log_scale_len

    @log_scale_len.setter
    def log_scale_len(self, value: int | None) -> None:
        for block in self.blocks:
            block.attn.log_scale_len = check_log_scale_len(value)

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
            x = block(x, pos, key_padding_mask, share)
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


def _moved_message(given: dict[str, object]) -> str:
    """The message for keywords ``Transformer`` does not take: the settings' new place, or the names."""
    known = {f.name for f in fields(AttentionSettings)}
    settings = ", ".join(f"{k}={v!r}" for k, v in given.items() if k in known)
    other = sorted(set(given) - known)
    if other:
        return f"Transformer got unknown keyword(s) {other}"
    return f"Transformer: the attention settings are one argument now: settings=AttentionSettings({settings})"


_LAYER_PE = re.compile(r"blocks\.\d+\.attn\.pe\.")


def _save_encoding_once(module: Transformer, state_dict: dict, prefix: str, _meta: object) -> None:
    """State-dict post-hook: the encoding every layer shares is saved once, under ``pe.``."""
    for key in [k for k in state_dict if k.startswith(prefix) and _LAYER_PE.match(k, len(prefix))]:
        del state_dict[key]


def _load_encoding_everywhere(module: Transformer, state_dict: dict, prefix: str, *_args: object) -> None:
    """Load pre-hook: the saved ``pe.`` entries also fill each layer's (shared) encoding."""
    saved = {k[len(prefix) + 3:]: v for k, v in state_dict.items() if k.startswith(prefix + "pe.")}
    for i in range(len(module.blocks)):
        state_dict.update({f"{prefix}blocks.{i}.attn.pe.{rest}": v for rest, v in saved.items()})
