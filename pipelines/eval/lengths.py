"""The length sweep's arithmetic on test lengths (no torch): which lengths a sweep scores, and the
relative-tolerance extrapolation ratio (used by :mod:`pipelines.eval.extrapolation`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from posenc import PosencError

DEFAULT_FACTORS = (1, 2, 4, 8, 16)


def _increasing(values: Sequence[float], what: str, cast: type) -> list:
    """``values`` cast to ``cast``, or :class:`PosencError` unless positive and strictly increasing."""
    out = [cast(v) for v in values]
    if not out or out[0] <= 0 or any(b <= a for a, b in zip(out, out[1:], strict=False)):
        raise PosencError(f"extrapolation {what} must be a non-empty, strictly increasing list of "
                          f"positive numbers, got {list(values)}")
    return out


def check_lengths(lengths: Sequence[int], what: str = "lengths") -> list[int]:
    """``lengths`` as a list of ints, or :class:`PosencError` unless positive and strictly increasing."""
    return _increasing(lengths, what, int)


def within(value: float, reference: float, higher_is_better: bool, tolerance: float) -> bool:
    """Whether ``value`` is no more than ``tolerance`` (relative) worse than ``reference``."""
    slack = tolerance * abs(reference)
    return value >= reference - slack if higher_is_better else value <= reference + slack


def extrapolation_ratio(
    metrics: dict[int, float | None],
    train_length: int,
    higher_is_better: bool = False,
    tolerance: float = 0.05,
) -> tuple[int | None, float | None]:
    """(largest length, that length / ``train_length``) whose metric — and every shorter tested
    length's — stays within ``tolerance`` of the metric at ``train_length``.

    ``metrics`` maps tested lengths to values (``None``/NaN: undefined there). Returns
    ``(None, None)`` when the training length itself was not scored.
    """
    ref = metrics.get(train_length)
    if ref is None or not math.isfinite(ref):
        return None, None
    best = train_length
    for length in sorted(n for n in metrics if n > train_length):
        value = metrics[length]
        if value is None or not math.isfinite(value) or not within(value, ref, higher_is_better, tolerance):
            break
        best = length
    return best, best / train_length


def resolve_lengths(
    train_length: int, factors: Sequence[float] | None, lengths: Sequence[int] | None
) -> list[int]:
    """Absolute test lengths from ``lengths`` or from ``factors`` × ``train_length`` (one of the two)."""
    if lengths is not None:
        return check_lengths(lengths)
    factors = check_factors(factors if factors is not None else DEFAULT_FACTORS)
    return check_lengths([round(f * train_length) for f in factors])


def check_factors(factors: Sequence[float]) -> list[float]:
    """``factors`` as a list of floats, or :class:`PosencError` unless positive and strictly increasing."""
    return _increasing(factors, "factors", float)
