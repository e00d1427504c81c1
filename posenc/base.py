"""The positional-encoding interface: one base class, three hooks.

A Transformer calls every scheme the same way:

* ``embed(x, pos)`` once, on the token embeddings ``x`` of shape (B, T, D);
* ``rotate(q, k, q_pos, k_pos)`` in every attention layer, on (B, H, T, Dh) queries and keys;
* ``bias(q, q_pos, k_pos, k=None)`` in every attention layer, returning an additive logit bias
  broadcastable to (B, H, Tq, Tk), or ``None`` for no bias.

Positions are always passed in explicitly, as integer or float tensors of shape (T,) or (B, T);
no hook infers them from a length, so shifted windows, irregular timestamps and test lengths
longer than training need no new code.

The base class itself is "no positional encoding" (NoPE): every hook leaves its input alone.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

Where = Literal["input", "rotate", "bias", "conv"]


class PosencError(ValueError):
    """A user-facing error: bad configuration or input, reported as one line."""


class PositionOutOfRange(PosencError):
    """A scheme was asked for positions it does not define (e.g. learned PE past ``max_len``)."""


@dataclass(frozen=True)
class SchemeMeta:
    """What a scheme is, for the attention (which path it may take) and the docs.

    Attributes:
        acts_on: the hooks the scheme overrides (``input``, ``rotate``, ``bias``, ``conv``).
        extrapolates: whether it is defined at positions past those seen in training.
        quadratic_memory: whether its bias is an L×L tensor (a dense mask for SDPA).
        content_bias: whether the bias depends on q/k content (not a pure function of positions).
        value_term: whether the scheme adds a position term to the attention output through
            :meth:`PositionalEncoding.value_term` (Shaw et al.), which needs explicit weights.
        translation_invariant: whether the bias depends on positions only through the signed
            distance ``k_pos - q_pos`` (and not on content): the attention may then ask the hook
            for one row of distances and read the L×L bias as a view of it.
        clipped_relative: whether the bias and value term are exactly Shaw et al.'s clipped
            relative keys and values, q_i·a^K_c/√Dh and Σ_j w_ij a^V_c with c = clip(j − i, −m, m),
            from the tables :meth:`PositionalEncoding.clipped_tables` returns: the attention may
            then run the far keys through the fused kernel (:mod:`posenc.nn.clipped`).
    """

    acts_on: tuple[Where, ...] = ()
    extrapolates: bool = True
    quadratic_memory: bool = False
    content_bias: bool = False
    value_term: bool = False
    translation_invariant: bool = False
    clipped_relative: bool = False

    @property
    def attention_path(self) -> str:
        """The attention path the scheme allows (chosen from metadata, never from the class)."""
        if self.value_term:
            return "explicit"  # weights are needed for the value-side term
        if "bias" not in self.acts_on:
            return "sdpa-fused"
        return "sdpa+toeplitz" if self.translation_invariant and not self.content_bias else "sdpa+bias"


class _RecordsInit(type(nn.Module)):
    """Metaclass that remembers the keyword arguments a scheme was built with (for ``spec``)."""

    def __call__(cls, *args: Any, **kwargs: Any):
        obj = super().__call__(*args, **kwargs)
        bound = inspect.signature(cls.__init__).bind(obj, *args, **kwargs)
        bound.apply_defaults()
        args_ = dict(bound.arguments)
        for drop in ("self", "d_model", "n_heads"):
            args_.pop(drop, None)
        obj._init_args = args_
        return obj


class PositionalEncoding(nn.Module, metaclass=_RecordsInit):
    """No positional encoding (NoPE): the base class every scheme derives from.

    Without positional information a bidirectional encoder is permutation-equivariant;
    a causal decoder still recovers some order from the mask (Kazemnejad et al., 2023,
    "The Impact of Positional Encoding on Length Generalization in Transformers").

    Args:
        d_model: model width D.
        n_heads: number of attention heads H; ``d_model`` must be divisible by it.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta()
    #: Largest position + 1 the scheme defines, or ``None`` if unbounded.
    max_len: int | None = None

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model <= 0 or n_heads <= 0:
            raise PosencError(f"d_model and n_heads must be positive, got {d_model} and {n_heads}")
        if d_model % n_heads:
            raise PosencError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads

    # ----------------------------------------------------------------------- hooks
    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        """Add (or otherwise combine) position information into embeddings ``x`` (B, T, D)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Transform queries and keys (B, H, T, Dh) according to their positions."""
        return q, k

    def bias(
        self, q: Tensor, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None
    ) -> Tensor | None:
        """Additive attention-logit bias broadcastable to (B, H, Tq, Tk), or ``None``."""
        return None

    def value_term(self, weights: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Extra output term from attention ``weights`` (B, H, Tq, Tk): (B, H, Tq, Dh) or ``None``.

        Only called when ``meta.value_term`` is true (the attention then computes its weights
        explicitly); Shaw et al. (2018) add Σ_j w_ij·a^V_ij here.
        """
        return None

    def clipped_tables(self) -> tuple[int, Tensor, Tensor]:
        """``(m, a^K, a^V)`` of a ``meta.clipped_relative`` scheme: the clipping distance and the
        (2m + 1, Dh) key and value tables, row c + m for the clipped distance c."""
        raise NotImplementedError(f"{type(self).__name__} is not a clipped relative scheme")

    # ----------------------------------------------------------------------- helpers
    def check_positions(self, pos: Tensor) -> None:
        """Raise :class:`PositionOutOfRange` if ``pos`` exceeds what the scheme defines."""
        if self.max_len is None or pos.numel() == 0:
            return
        hi, lo = pos.max().item(), pos.min().item()
        if hi >= self.max_len or lo < 0:
            raise PositionOutOfRange(
                f"{type(self).__name__} defines positions 0..{self.max_len - 1}, "
                f"got positions up to {hi:g}"
            )

    def spec(self) -> dict[str, Any]:
        """The scheme as a primitive ``{class_path, init_args}`` dict (what a YAML config says); a
        dataclass argument (RoPE's ``scaling``) as the mapping of its fields."""
        args = {k: primitive(v) for k, v in self._init_args.items()}
        return {"class_path": public_class_path(type(self)), "init_args": args}

    def extra_repr(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in getattr(self, "_init_args", {}).items())
        return f"d_model={self.d_model}, n_heads={self.n_heads}" + (f", {args}" if args else "")


#: the classes ``posenc/__init__.py`` re-exports, by name (filled there once its imports are done)
PUBLIC: dict[str, type] = {}


def public_class_path(cls: type) -> str:
    """``posenc.Name`` when the class is re-exported from ``posenc``, else its module path."""
    if PUBLIC.get(cls.__name__) is cls:
        return f"posenc.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def primitive(value: Any) -> Any:
    """A dataclass instance as the mapping of its fields, tuples in it as lists (what YAML and
    ``torch.load(weights_only=True)`` read back); any other value as it is."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    return {f.name: list(v) if isinstance(v := primitive(getattr(value, f.name)), tuple) else v
            for f in dataclasses.fields(value)}


def check_max_len(scheme: str, max_len: Any) -> int:
    """``max_len`` of a table scheme as an int; :class:`PosencError` naming ``scheme`` unless it is a
    positive integer (``2.0`` is accepted, ``2.5``, ``0`` and ``True`` are not)."""
    ok = isinstance(max_len, (int, float)) and not isinstance(max_len, bool) and max_len == int(max_len) >= 1
    if not ok:
        raise PosencError(f"{scheme} max_len must be a positive integer, got {max_len!r}")
    return int(max_len)


def as_batched(pos: Tensor) -> Tensor:
    """Positions (T,) or (B, T) as (B', T) with B' ∈ {1, B}."""
    if pos.dim() == 1:
        return pos.unsqueeze(0)  # (1, T)
    if pos.dim() != 2:
        raise PosencError(f"positions must have shape (T,) or (B, T), got {tuple(pos.shape)}")
    return pos


def relative_distance(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """Signed distances ``k_pos - q_pos`` as float32 of shape (B', 1, Tq, Tk)."""
    q, k = as_batched(q_pos), as_batched(k_pos)
    # Subtract before casting so large integer positions stay exact.
    return (k[:, None, None, :] - q[:, None, :, None]).to(torch.float32)  # (B', 1, Tq, Tk)
