"""Statistics for comparisons across seeds: means with Student-t intervals, and
retained gain — the extrapolation measure that means the same on every task — with its guard. The
paired differences and the calls made on them (Holm, the seed × block bootstrap, power) are
:mod:`pipelines.studies.verdicts`'.

Seeds are the unit of replication: one number per seed (a trained model's metric at one length).
Schemes compared with the same seeds are *paired* (same data order and initialisation seed), so a
difference is judged on the per-seed differences, not on two independent means.

Retained gain (for a metric m, a trivial baseline b and the training length L₀)::

    retained(L) = (b − m(L)) / (b − m(L₀))       lower-is-better metrics
    retained(L) = (m(L) − b) / (m(L₀) − b)       higher-is-better metrics

1 = the whole gain over the trivial baseline kept at length L, 0 = none of it, < 0 = worse than the
baseline. It is undefined when the model does not beat the baseline at L₀.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np

LEVEL = 0.95
#: smallest gain over the trivial baseline at L₀ worth extrapolating, in the metric's own units
MIN_EFFECT: dict[str, float] = {"bits_per_base": 0.01, "acc": 0.01, "auroc": 0.01}
MIN_RELATIVE_EFFECT = 0.01  # other metrics (e.g. MSE): 1 % of the trivial baseline's value
#: one trivial-baseline value for every seed, or one per seed (when the test data depend on the seed)
Baseline = Union[float, Sequence[float]]  # noqa: UP007 - a runtime alias


def per_seed(baseline: Baseline, n: int) -> list[float]:
    """``baseline`` as one value per seed (``n`` seeds)."""
    if isinstance(baseline, int | float):
        return [float(baseline)] * n
    out = [float(b) for b in baseline]
    if len(out) != n:
        raise ValueError(f"{len(out)} baseline values for {n} seeds")
    return out


@dataclass(frozen=True)
class Estimate:
    """Mean, sample standard deviation and a two-sided Student-t interval of ``n`` values."""

    mean: float
    std: float
    n: int
    lo: float
    hi: float

    @property
    def half(self) -> float:
        """Half-width of the interval (NaN for one value)."""
        return (self.hi - self.lo) / 2

    @property
    def bound(self) -> float:
        """The interval's lower bound, or the value itself for one value (no interval)."""
        return self.lo if self.n >= 2 else self.mean

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies entirely on one side of 0 (NaN bounds: never)."""
        return bool(self.lo > 0 or self.hi < 0)

    def text(self, digits: int = 4) -> str:
        """``mean ± half-width`` (``mean`` alone for one value)."""
        if self.n < 2 or not math.isfinite(self.hi - self.lo):
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {(self.hi - self.lo) / 2:.{digits}f}"


def estimate(values: Sequence[float], level: float = LEVEL) -> Estimate:
    """Mean ± Student-t ``level`` interval of ``values`` (NaN interval for fewer than two values)."""
    from scipy import stats  # optional: scipy

    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to estimate from")
    mean = float(x.mean())
    if x.size < 2:
        return Estimate(mean, math.nan, 1, math.nan, math.nan)
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1)) * std / math.sqrt(x.size)
    return Estimate(mean, std, int(x.size), mean - half, mean + half)


def retained_gain(metric: float, at_train: float, baseline: float, higher_is_better: bool) -> float:
    """(b − m(L)) / (b − m(L₀)) (sign flipped for higher-is-better); NaN when there is no gain at L₀."""
    sign = 1.0 if higher_is_better else -1.0
    gain0 = sign * (at_train - baseline)
    if not gain0 > 0:
        return math.nan
    return sign * (metric - baseline) / gain0


def min_effect(metric: str, trivial: float) -> float:
    """Smallest gain at L₀ for which retained gain is defined: :data:`MIN_EFFECT` of the metric, else
    :data:`MIN_RELATIVE_EFFECT` × |trivial baseline|."""
    return MIN_EFFECT.get(metric, MIN_RELATIVE_EFFECT * abs(trivial))


def point_guard(gain_at_train: float, metric: str, trivial: float) -> str:
    """Why one run's retained gain is undefined for this gain at L₀ (one value, no interval): it
    must exceed 0 and :func:`min_effect` (``""``: it is defined). Over seeds, the lower bound of the
    gain's interval must (:func:`pipelines.studies.verdicts.guard`)."""
    floor = min_effect(metric, trivial)
    if not math.isfinite(gain_at_train):
        return "no gain at L₀ (the metric or the trivial baseline is undefined there)"
    if gain_at_train <= 0 or gain_at_train <= floor:
        return (f"gain over the trivial baseline at L₀ {gain_at_train:+.4g} ≤ max(0, minimum effect "
                f"{floor:.3g}) (one run: no interval)")
    return ""


def beats_baseline(at_train: Sequence[float], baseline: Baseline, higher_is_better: bool,
                   level: float = LEVEL) -> bool:
    """Whether the model beats the trivial baseline at the training length by a margin: the interval
    of its gain over the seeds (in the metric's units) lies above 0 (one seed: its gain is positive)."""
    sign = 1.0 if higher_is_better else -1.0
    base = per_seed(baseline, len(at_train))
    return estimate([sign * (m - b) for m, b in zip(at_train, base, strict=True)], level).bound > 0


def retained_ratio(curves: dict[int, Sequence[float]], train_length: int, baseline: Baseline,
                   higher_is_better: bool, retain: float = 0.9, level: float = LEVEL
                   ) -> tuple[int | None, dict[int, Estimate]]:
    """The extrapolation ratio on retained gain: the largest tested length L up to which the lower
    ``level`` bound of retained gain (over seeds) stays ≥ ``retain`` at every tested length, and the
    per-length estimates of retained gain.

    Args:
        curves: ``{length: [metric per seed]}`` (same seed order at every length; NaN = undefined).
        train_length: L₀ (must be in ``curves``).
        baseline: the trivial baseline's metric on the same test data (one value, or one per seed).

    Returns:
        ``(None, {})`` when the model does not beat the baseline at L₀ (no ratio is reported).
    """
    at_train = list(curves[train_length])
    if not beats_baseline(at_train, baseline, higher_is_better, level):
        return None, {}
    base = per_seed(baseline, len(at_train))
    per_length: dict[int, Estimate] = {}
    for length in sorted(curves):
        gains = [retained_gain(m, m0, b, higher_is_better)
                 for m, m0, b in zip(curves[length], at_train, base, strict=True)]
        if all(math.isfinite(g) for g in gains):
            per_length[length] = estimate(gains, level)
    best = train_length
    for length in sorted(n for n in curves if n > train_length):
        found = per_length.get(length)
        if found is None or not found.bound >= retain:
            break
        best = length
    return best, per_length
