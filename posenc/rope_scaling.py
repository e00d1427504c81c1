"""RoPE scalings: one frozen value (:class:`RopeScaling`) and a registry of scaling functions.

Every rotary scheme (:class:`~posenc.RoPE`, :class:`~posenc.PeriodicRoPE`, :class:`~posenc.XPos`)
takes the value once, as ``scaling=``. Its ``type`` names an entry of :data:`SCALINGS`: a function
given the scheme's unscaled frequencies (a :class:`Ladder`) and, for a dynamic type, the span of the
positions, returning the scaled frequencies and the attention factor (applied to q and to k each,
as Hugging Face applies it to cos and sin). The types, and the fields each reads:

* ``none``: plain RoPE.
* ``linear`` (factor): position interpolation, "Extending Context Window of Large Language Models via
  Positional Interpolation" (Chen et al., 2023): θ_i/s.
* ``ntk`` (factor): "NTK-aware scaled RoPE" (bloc97, 2023): base' = base·s^(d/(d−2)).
* ``dynamic_ntk`` (factor, train_len): NTK with s = max(1, a·L/train_len − (a − 1)) for the span L of
  the positions (:func:`~posenc.scaling_math.dynamic_scale`); a = ``factor``.
* ``yarn`` (factor, train_len, beta_fast, beta_slow, truncate, attention_factor, mscale,
  mscale_all_dim): "YaRN: Efficient Context Window Extension of Large Language Models" (Peng et al.,
  2023), the ramp over the pair index as its authors' code, Hugging Face and vLLM run it
  (:func:`~posenc.scaling_math.yarn_factors`), and its temperature (:func:`yarn_attention`).
* ``yarn_paper`` (the same but ``truncate``): the ramp over each pair's rotation count, as the paper's
  Eq. 18 is written (:func:`~posenc.scaling_math.yarn_paper_factors`).
* ``llama3`` (factor, train_len, low_freq_factor, high_freq_factor): Llama 3.1's frequency-band rule
  (:func:`~posenc.scaling_math.llama3_factors`).
* ``longrope`` (factor, train_len, short_factor, long_factor, attention_factor): "LongRoPE: Extending
  LLM Context Window Beyond 2 Million Tokens" (Ding et al., 2024) as Phi-3 runs it: per-pair divisors,
  the long ones once the span of the positions exceeds ``train_len`` (:func:`longrope_scaling`).

``partial_rotary_factor`` f (every type): only the first ⌊f·Dh⌋ features of each head rotate (their
own frequency ladder base^(−2i/⌊f·Dh⌋)), the rest pass through, as in GPT-NeoX's ``rotary_pct`` and
Hugging Face's ``partial_rotary_factor``. A field the type does not read must keep its default: a
setting with no effect is refused, not ignored. :func:`register_scaling` adds a type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from posenc.base import PosencError
from posenc.scaling_math import (
    dynamic_scale,
    llama3_factors,
    ntk_factors,
    yarn_factors,
    yarn_mscale,
    yarn_paper_factors,
)


# --------------------------------------------------------------------------------- the value
@dataclass(frozen=True)
class RopeScaling:
    """How a rotary scheme scales its frequencies at inference time (see the module docstring).

    Attributes:
        type: a key of :data:`SCALINGS` (``none``, ``linear``, ``ntk``, ``dynamic_ntk``, ``yarn``,
            ``yarn_paper``, ``llama3``, ``longrope``).
        factor: s ≥ 1 (Hugging Face's ``factor``; the "a" of ``dynamic_ntk``).
        train_len: the training context length L₀ (HF's ``original_max_position_embeddings``).
        beta_fast: YaRN β: pairs making more rotations than this over ``train_len`` are left alone.
        beta_slow: YaRN α: pairs making fewer are interpolated fully; β_fast ≥ β_slow > 0.
        truncate: ``yarn``: floor/ceil the correction range to whole pairs (HF's default, True).
        attention_factor: the factor on q and on k, given outright (``yarn``, ``longrope``).
        mscale: DeepSeek-V2's YaRN knob, with ``mscale_all_dim`` (both or neither): the factor is
            :func:`yarn_mscale` (s, mscale) / :func:`yarn_mscale` (s, mscale_all_dim).
        mscale_all_dim: see ``mscale``.
        low_freq_factor: ``llama3``: bands longer than train_len/low_freq_factor are divided by s.
        high_freq_factor: ``llama3``: bands shorter than train_len/high_freq_factor are kept.
        short_factor: ``longrope``: per-pair divisors (Dh'/2 of them) while the span ≤ ``train_len``.
        long_factor: ``longrope``: per-pair divisors once the span exceeds ``train_len``.
        partial_rotary_factor: the fraction f ∈ (0, 1] of each head's features that rotate.
    """

    type: str = "none"
    factor: float = 1.0
    train_len: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    partial_rotary_factor: float = 1.0

    def __post_init__(self) -> None:
        for name in ("short_factor", "long_factor"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                if isinstance(value, str) or not hasattr(value, "__iter__"):
                    raise PosencError(f"RoPE scaling {name} must be a list of numbers, got {value!r}")
                object.__setattr__(self, name, tuple(float(v) for v in value))
        check_scaling(self)

    @property
    def rule(self) -> ScalingRule:
        """The registry entry of :attr:`type`."""
        return SCALINGS[self.type]

    def rotary_dim(self, head_dim: int) -> int:
        """The rotated features per head, ⌊f·Dh⌋ (even and ≥ 2, else :class:`PosencError`)."""
        dim = int(head_dim * self.partial_rotary_factor)
        if dim < 2 or dim % 2:
            raise PosencError(f"RoPE rotates pairs: head_dim={head_dim} × partial_rotary_factor="
                              f"{self.partial_rotary_factor} gives {dim} features, not an even number ≥ 2")
        return dim

    @classmethod
    def from_mapping(cls, value: Mapping[str, Any]) -> RopeScaling:
        """The value of a config mapping (``{type: yarn, factor: 8, train_len: 128}``), unknown keys named."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise PosencError(f"RoPE scaling: unknown key(s) {unknown} (known: {sorted(known)})")
        return cls(**value)

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], max_position_embeddings: int | None = None) -> RopeScaling:
        """The value of a Hugging Face ``rope_parameters`` (``rope_scaling``) mapping.

        ``rope_type`` (or ``type``) becomes ``type`` (``default`` → ``none``, ``dynamic`` →
        ``dynamic_ntk``) and ``original_max_position_embeddings`` ``train_len``; the other keys keep
        their names. ``max_position_embeddings`` stands in where HF reads the model's: ``dynamic``'s
        training length, and ``factor`` = max/original where ``yarn`` or ``longrope`` omit it.
        ``rope_theta`` is the scheme's ``base``, not part of the value: pass it as ``base=``.
        """
        p = dict(params)
        if "rope_theta" in p:
            raise PosencError("RoPE scaling: rope_theta is the scheme's base (RoPE(..., base=)), not a "
                              "scaling key")
        kind = p.pop("rope_type", p.pop("type", "default"))
        kind = {"default": "none", "dynamic": "dynamic_ntk"}.get(kind, kind)
        original = p.pop("original_max_position_embeddings", None)
        if kind == "dynamic_ntk" or (original is None and kind in ("yarn", "longrope", "llama3")):
            original = max_position_embeddings  # what HF reads there (dynamic: always the model's)
        if original is not None:
            p["train_len"] = original
        if p.get("factor") is None and kind in ("yarn", "longrope") and max_position_embeddings and original:
            p["factor"] = max_position_embeddings / original
        return cls.from_mapping({"type": kind, **{k: v for k, v in p.items() if v is not None}})


def as_scaling(value: RopeScaling | Mapping[str, Any] | None) -> RopeScaling:
    """``value`` as a :class:`RopeScaling` (a mapping from a config or checkpoint; ``None``: none)."""
    if value is None:
        return RopeScaling()
    if isinstance(value, RopeScaling):
        return value
    if isinstance(value, Mapping):
        return RopeScaling.from_mapping(value)
    raise PosencError(f"RoPE scaling must be a RopeScaling or a mapping of its fields, got {value!r}")


# --------------------------------------------------------------------------------- checks
def _default(name: str) -> Any:
    return RopeScaling.__dataclass_fields__[name].default


def check_scaling(s: RopeScaling) -> None:
    """Raise :class:`PosencError` for an inconsistent :class:`RopeScaling` (one line, naming the field)."""
    if s.type not in SCALINGS:
        raise PosencError(f"RoPE scaling type must be one of {sorted(SCALINGS)}, got {s.type!r}")
    reads = SCALINGS[s.type].reads | {"type", "partial_rotary_factor"}
    idle = [f.name for f in fields(s) if f.name not in reads and getattr(s, f.name) != f.default]
    if idle:
        raise PosencError(f"RoPE scaling {s.type!r} does not read {', '.join(idle)} (it reads "
                          f"{', '.join(sorted(reads - {'type'})) or 'nothing'}): remove it")
    if not (isinstance(s.factor, int | float) and math.isfinite(s.factor) and s.factor >= 1.0):
        raise PosencError(f"RoPE scaling factor must be a number >= 1, got {s.factor!r}")
    if not 0.0 < s.partial_rotary_factor <= 1.0:
        raise PosencError(f"RoPE partial_rotary_factor must be in (0, 1], got {s.partial_rotary_factor}")
    if "train_len" in reads and not (isinstance(s.train_len, int) and not isinstance(s.train_len, bool)
                                     and s.train_len >= 1):
        raise PosencError(f"RoPE scaling {s.type!r} needs train_len, a positive integer, got {s.train_len!r}")
    _check_type(s)


def _check_type(s: RopeScaling) -> None:
    """The checks of one type's own fields."""
    if s.type == "yarn" and not s.beta_fast >= s.beta_slow > 0:
        raise PosencError(f"yarn needs beta_fast >= beta_slow > 0, got {s.beta_fast} and {s.beta_slow}")
    if s.type == "yarn_paper" and not s.beta_fast > s.beta_slow >= 0:
        raise PosencError(f"yarn_paper needs beta_fast > beta_slow >= 0, got {s.beta_fast} and {s.beta_slow}")
    if (s.mscale is None) != (s.mscale_all_dim is None) or 0 in (s.mscale, s.mscale_all_dim):
        raise PosencError("RoPE scaling mscale and mscale_all_dim act together: give both (non-zero) or "
                          f"neither, got {s.mscale} and {s.mscale_all_dim}")
    if s.attention_factor is not None and (s.mscale is not None or not s.attention_factor > 0):
        raise PosencError(f"RoPE attention_factor must be > 0 and replaces mscale (give one), got "
                          f"{s.attention_factor} with mscale {s.mscale}")
    if s.type == "llama3" and not s.high_freq_factor > s.low_freq_factor > 0:
        raise PosencError(f"llama3 needs high_freq_factor > low_freq_factor > 0, got {s.high_freq_factor} "
                          f"and {s.low_freq_factor}")
    if s.type == "longrope":
        if s.short_factor is None or s.long_factor is None:
            raise PosencError("longrope needs short_factor and long_factor (one divisor per rotary pair)")
        if not all(math.isfinite(v) and v > 0 for v in (*s.short_factor, *s.long_factor)):
            raise PosencError("longrope short_factor and long_factor must be positive numbers")
        if s.train_len < 2:
            raise PosencError(f"longrope needs train_len >= 2 (its attention factor reads ln train_len), "
                              f"got {s.train_len}")


# --------------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Ladder:
    """What a scaling function scales.

    Attributes:
        freqs: the scheme's unscaled angular frequency θ_i of each rotary pair, (n,) (float64 on CPU).
        dim: the rotary dimension d = 2n (the head dimension, or its rotated part).
        base: the scheme's frequency base (θ_i = base^(−2i/d) on pairs a variant does not pin).
    """

    freqs: Tensor
    dim: int
    base: float


#: (value, ladder, span of the positions (B',) or None) → (frequencies (n,) or (B', n), attention factor)
ScalingFn = Callable[[RopeScaling, Ladder, "Tensor | None"], tuple[Tensor, float]]


@dataclass(frozen=True)
class ScalingRule:
    """One registry entry: the function, the fields it reads, and whether it reads the span."""

    fn: ScalingFn
    reads: frozenset[str] = frozenset()
    dynamic: bool = False


#: scaling type → its rule; :func:`register_scaling` adds one
SCALINGS: dict[str, ScalingRule] = {}


def register_scaling(name: str, reads: tuple[str, ...] = (), dynamic: bool = False
                     ) -> Callable[[ScalingFn], ScalingFn]:
    """Decorator adding ``fn`` to :data:`SCALINGS` as type ``name``.

    Args:
        reads: the :class:`RopeScaling` fields it reads (any other must keep its default;
            ``train_len`` among them makes it required).
        dynamic: it scales by the span of the positions (given as its third argument; ``None`` means
            "within the training length": a cached, static call).
    """
    def add(fn: ScalingFn) -> ScalingFn:
        SCALINGS[name] = ScalingRule(fn, frozenset(reads), dynamic)
        return fn

    return add


def _ntk_dim(dim: int) -> None:
    if dim <= 2:
        raise PosencError(f"NTK scaling needs a rotary dimension > 2, got {dim}")


@register_scaling("none")
def no_scaling(s: RopeScaling, ladder: Ladder, span: Tensor | None) -> tuple[Tensor, float]:
    """θ_i as they are."""
    return ladder.freqs, 1.0


@register_scaling("linear", ("factor",))
def linear_scaling(s: RopeScaling, ladder: Ladder, span: Tensor | None) -> tuple[Tensor, float]:
    """Position interpolation: θ_i/s."""
    return ladder.freqs / s.factor, 1.0


@register_scaling("ntk", ("factor",))
def ntk_scaling(s: RopeScaling, ladder: Ladder, span: Tensor | None) -> tuple[Tensor, float]:
    """NTK-aware: θ_i·s^(−2i/(d−2))."""
    _ntk_dim(ladder.dim)
    f = ladder.freqs
    return f * ntk_factors(f.shape[-1], ladder.dim, s.factor).to(f), 1.0  # (n,)


@register_scaling("dynamic_ntk", ("factor", "train_len"), dynamic=True)
def dynamic_ntk_scaling(s: RopeScaling, ladder: Ladder, span: Tensor | None) -> tuple[Tensor, float]:
    """NTK with each row's s from its span (:func:`dynamic_scale`); θ_i as they are without one."""
    _ntk_dim(ladder.dim)
    f = ladder.freqs
    if span is None:
        return f, 1.0
    rows = dynamic_scale(span.to(f), s.train_len, s.factor)  # (B',)
    return f * ntk_factors(f.shape[-1], ladder.dim, rows), 1.0  # (B', n)


YARN_READS = ("factor", "train_len", "beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim")


def yarn_attention(s: RopeScaling) -> float:
    """YaRN's factor on q and on k: ``attention_factor`` if given; else with DeepSeek-V2's ``mscale``
    and ``mscale_all_dim`` the ratio of their :func:`yarn_mscale`; else :func:`yarn_mscale` (s),
    whose square is the paper's 1/t = (0.1·ln s + 1)²."""
    if s.attention_factor is not None:
        return float(s.attention_factor)
    if s.mscale is not None:
        return yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim)
    return yarn_mscale(s.factor)


@register_scaling("yarn", (*YARN_READS, "truncate"))
def yarn_scaling(s: RopeScaling, ladder: Ladder, span: Tensor | None) -> tuple[Tensor, float]:
    """YaRN with the index ramp (:func:`yarn_factors`) and its temperature (:func:`yarn_attention`)."""
    f = ladder.freqs
    factors = yarn_factors(f.shape[-1], ladder.dim, ladder.base, s.train_len, s.factor, s.beta_fast,
                           s.beta_slow, s.truncate)  # (n,)
    return f * factors.to(f), yarn_attention(s)


@register_scaling("yarn_paper", YARN_READS)
def yarn_paper_scaling(s: RopeScaling, ladder: Ladder, span: Tensor | None) -> tuple[Tensor, float]:
    """YaRN with the rotation-count ramp of Eq. 18 (:func:`yarn_paper_factors`)."""
    f = ladder.freqs
    factors = yarn_paper_factors(f.detach(), s.train_len, s.factor, s.beta_fast, s.beta_slow)  # (n,)
    return f * factors, yarn_attention(s)


@register_scaling("llama3", ("factor", "train_len", "low_freq_factor", "high_freq_factor"))
def llama3_scaling(s: RopeScaling, ladder: Ladder, span: Tensor | None) -> tuple[Tensor, float]:
    """Llama 3.1's band rule (:func:`llama3_factors`); no temperature."""
    f = ladder.freqs
    return f * llama3_factors(f.detach(), s.train_len, s.factor, s.low_freq_factor, s.high_freq_factor), 1.0


@register_scaling("longrope", ("factor", "train_len", "short_factor", "long_factor", "attention_factor"),
                  dynamic=True)
def longrope_scaling(s: RopeScaling, ladder: Ladder, span: Tensor | None) -> tuple[Tensor, float]:
    """LongRoPE: θ_i/short_i, or θ_i/long_i in rows whose span exceeds ``train_len``; the factor on q
    and on k is ``attention_factor`` if given, else √(1 + ln s / ln train_len) (1 for s = 1)."""
    f = ladder.freqs
    for name in ("short_factor", "long_factor"):
        if len(getattr(s, name)) != f.shape[-1]:
            raise PosencError(f"longrope {name} has {len(getattr(s, name))} values for {f.shape[-1]} "
                              "rotary pairs")
    short, long = (torch.tensor(v, dtype=f.dtype, device=f.device) for v in (s.short_factor, s.long_factor))
    if s.attention_factor is not None:
        attn = float(s.attention_factor)
    else:
        attn = math.sqrt(1 + math.log(s.factor) / math.log(s.train_len)) if s.factor > 1.0 else 1.0
    if span is None:
        return f / short, attn  # (n,)
    longer = (span.to(f) > s.train_len)[:, None]  # (B', 1)
    return f / torch.where(longer, long, short), attn  # (B', n)
