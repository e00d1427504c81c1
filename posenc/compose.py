"""Composition of positional encodings: several schemes behind the one interface."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from posenc.base import PosencError, PositionalEncoding, SchemeMeta, Where
from posenc.registry import build_encoding

_HOOK_ORDER: tuple[Where, ...] = ("input", "conv", "rotate", "bias")

#: What a Compose *may* do, read from the class (docs, discovery): every hook, any flag that a child
#: can switch on, and no promise to extrapolate. Instances report their children's actual combination.
COMPOSE_CLASS_META = SchemeMeta(
    acts_on=_HOOK_ORDER, extrapolates=False, quadratic_memory=True, content_bias=True, value_term=True
)


def combine_meta(metas: list[SchemeMeta]) -> SchemeMeta:
    """Union of hooks, ``extrapolates`` if all do, ``translation_invariant`` if every biasing child is,
    never ``clipped_relative`` (a Compose has no :meth:`~PositionalEncoding.clipped_tables`, and its
    other children's biases would be lost), every other flag if any child has it."""
    acts = {where for m in metas for where in m.acts_on}
    return SchemeMeta(
        acts_on=tuple(w for w in _HOOK_ORDER if w in acts) + tuple(sorted(acts - set(_HOOK_ORDER))),
        extrapolates=all(m.extrapolates for m in metas),
        quadratic_memory=any(m.quadratic_memory for m in metas),
        content_bias=any(m.content_bias for m in metas),
        value_term=any(m.value_term for m in metas),
        translation_invariant=all(m.translation_invariant for m in metas if "bias" in m.acts_on)
        and any("bias" in m.acts_on for m in metas),
    )


def combine_max_len(lengths: list[int | None]) -> int | None:
    """The smallest defined ``max_len`` (``None`` when no child bounds positions)."""
    bounded = [n for n in lengths if n is not None]
    return min(bounded) if bounded else None


def sum_optional(terms: list[Tensor | None]) -> Tensor | None:
    """Broadcasting sum of the non-``None`` terms, or ``None`` if there are none."""
    present = [t for t in terms if t is not None]
    if not present:
        return None
    total = present[0]
    for t in present[1:]:
        total = total + t  # (B', H, Tq, Tk) + (B, H, Tq, Tk) → (B, H, Tq, Tk)
    return total


class _InstanceMeta:
    """``meta`` descriptor: the combined metadata on an instance, ``COMPOSE_CLASS_META`` on the class."""

    def __get__(self, obj: Compose | None, objtype: type | None = None) -> SchemeMeta:
        if obj is None:
            return COMPOSE_CLASS_META
        return obj.__dict__.get("_combined_meta", COMPOSE_CLASS_META)


class Compose(PositionalEncoding):
    """Several positional encodings applied together (e.g. RoPE + a Gaussian locality prior).

    Not a paper's scheme: combinations such as rotary + bias appear across the literature, e.g.
    "RoFormer: Enhanced Transformer with Rotary Position Embedding" (Su et al., 2021) composed
    with the biases of "Train Short, Test Long" (Press, Smith and Lewis, 2022).

    Each child is built with :func:`posenc.build_encoding` for the same (d_model, n_heads).
    ``embed`` applies the children's embeddings in order, ``rotate`` chains their rotations,
    ``bias`` sums the non-``None`` biases (``None`` if every child has none) and ``value_term``
    sums the children's value terms. Content biases see q and k after *all* rotations, since the
    attention rotates before it asks for the bias.

    ``meta`` read from an instance combines the children (:func:`combine_meta`); read from the
    class it is ``COMPOSE_CLASS_META``, a conservative superset. ``max_len`` is the smallest child's.
    ``spec()`` lists the children's own specs, so it round-trips through ``build_encoding``.

    Args:
        schemes: the children, each a ``{class_path, init_args}`` dict.
    """

    meta = _InstanceMeta()  # shadows the base class's ClassVar with a per-instance value

    def __init__(self, d_model: int, n_heads: int, *, schemes: list[dict[str, Any]]) -> None:
        super().__init__(d_model, n_heads)
        if not isinstance(schemes, (list, tuple)) or not schemes:
            raise PosencError(f"Compose needs a non-empty list of scheme specs, got {schemes!r}")
        self.schemes = nn.ModuleList(build_encoding(item, d_model, n_heads) for item in schemes)
        self._combined_meta = combine_meta([pe.meta for pe in self.schemes])
        self.max_len = combine_max_len([pe.max_len for pe in self.schemes])

    def spec(self) -> dict[str, Any]:
        """``{class_path, init_args: {schemes: [child specs]}}``."""
        spec = super().spec()
        spec["init_args"] = {"schemes": [pe.spec() for pe in self.schemes]}
        return spec

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        for pe in self.schemes:
            x = pe.embed(x, pos)  # (B, T, D)
        return x

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        for pe in self.schemes:
            q, k = pe.rotate(q, k, q_pos, k_pos)  # (B, H, T, Dh) each
        return q, k

    def bias(
        self, q: Tensor, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None
    ) -> Tensor | None:
        return sum_optional([pe.bias(q, q_pos, k_pos, k=k) for pe in self.schemes])

    def value_term(self, weights: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        children = [pe for pe in self.schemes if pe.meta.value_term]
        return sum_optional([pe.value_term(weights, q_pos, k_pos) for pe in children])
