"""Calls a reviewer can sign: paired differences with intervals that cover the seeds *and* the test
data, Holm–Bonferroni within an experiment, a power gate, and a guarded retained gain. Pure float64
arithmetic (numpy/scipy) on arrays; the claims (:mod:`pipelines.studies.claims`) and ``make compare``
(:mod:`pipelines.studies.compare.stats`) feed it.

* **Interval of a paired difference** ``a − b`` (:func:`paired`): the Student-t interval over the
  per-seed differences (each on the whole test region), and — where every arm has per-block sums of
  the test region — the seed × block bootstrap interval (:mod:`pipelines.studies.bootstrap`). The
  interval used is their *union* (the lower of the two lower bounds, the higher of the upper ones)
  and the p-value the larger of the two: the t interval stays honest with few seeds (a bootstrap
  over 5 seeds is too narrow), the bootstrap adds the test data's own variability.
* **Holm** (:func:`holm_calls`): the p-values of every paired call of one experiment (one claim, or
  one ``make compare`` table) are adjusted together; a call needs its adjusted p < α = 0.05, and its
  interval is shown at the level Holm tested it at (1 − α / (m − rank)), so a called difference's
  interval always excludes 0. Its direction is read from the interval's side of 0, never the mean.
* **Power** (:func:`power`): a gain / the half-width of its 95 % interval (reported; ``make compare``
  reads :data:`POWER_MIN`).
* **Three-way verdicts** (:func:`three_way`): yes when the expected direction is called, no when the
  opposite is called or the interval lies within ± the declared minimum effect, else inconclusive with
  the reason; a **gate** (:func:`gate_reason`) turns a verdict inconclusive when the claimed arm does not
  beat the position-free control by a declared margin, or the primary's interval is wider than declared.
* **Retained gain** (:func:`retained`): the ratio of mean gains over the trivial baseline,
  gain(L) / gain(L₀), with a paired bootstrap interval; defined only when the gain at L₀ has its
  lower 95 % bound above 0 and above :func:`~pipelines.eval.statistics.min_effect`, otherwise
  undefined (with the reason).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from pipelines.eval.statistics import LEVEL, Estimate, estimate, min_effect
from pipelines.studies.bootstrap import N_BOOT, Arm, Resampler, p_value, percentile_interval

ALPHA = 1.0 - LEVEL  # family-wise error rate of one experiment's calls
POWER_MIN = 10.0  # gain at L₀ / half-width of its interval make compare needs before judging


def paired_difference(values: Sequence[float], reference: Sequence[float], level: float = LEVEL) -> Estimate:
    """Estimate of ``values[i] − reference[i]`` over pairs (same seed), Student-t interval."""
    a, b = np.asarray(values, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired values need the same seeds: {a.size} vs {b.size} values")
    return estimate(a - b, level)


# ----------------------------------------------------------------------------- Student t and Holm
def sign_of(lo: float, hi: float, higher_is_better: bool) -> int:
    """+1 if the interval [lo, hi] of a difference lies on the *better* side of 0, −1 on the worse
    side, 0 if it holds 0 (or is NaN)."""
    if lo > 0:
        return 1 if higher_is_better else -1
    if hi < 0:
        return -1 if higher_is_better else 1
    return 0


def t_p_value(e: Estimate) -> float:
    """Two-sided one-sample t-test p-value of "the mean is 0" for the values behind ``e`` (NaN for
    one value; 0 when every value is the same non-zero number, 1 when all are 0)."""
    from scipy import stats  # optional: scipy

    if e.n < 2 or not math.isfinite(e.mean):
        return math.nan
    if e.std == 0:
        return 1.0 if e.mean == 0 else 0.0
    t = e.mean / (e.std / math.sqrt(e.n))
    return float(2.0 * stats.t.sf(abs(t), e.n - 1))


def t_interval(e: Estimate, level: float) -> tuple[float, float]:
    """The Student-t interval of the values behind ``e`` at another ``level`` (NaN for one value)."""
    from scipy import stats  # optional: scipy

    if e.n < 2:
        return math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, e.n - 1)) * e.std / math.sqrt(e.n)
    return e.mean - half, e.mean + half


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order: sorted ascending, the i-th smallest
    (0-based) becomes max over j ≤ i of min(1, (m − j)·p₍ⱼ₎). A hypothesis is rejected at family-wise
    level α exactly when its adjusted p-value is < α. NaN p-values (comparisons not made) stay NaN and
    do not count in m."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    m = tested.size
    if m == 0:
        return out.tolist()
    order = tested[np.argsort(p[tested], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out.tolist()


# ----------------------------------------------------------------------------- the seed × block bootstrap
@lru_cache(maxsize=32)
def resampler(n_seeds: int, n_blocks: int, n_boot: int = N_BOOT) -> Resampler:
    """The shared draws for arms of ``n_seeds`` × ``n_blocks`` (the same draws for every arm: paired)."""
    return Resampler(n_seeds, n_blocks, n_boot)


def aligned(*arms: Arm) -> tuple[Arm, ...]:
    """The arms as they can be compared: with their blocks when all have the same number (> 1),
    else each collapsed to one value per seed (no block bootstrap)."""
    blocks = {a.n_blocks for a in arms}
    if len(blocks) == 1 and blocks != {1}:
        return arms
    return tuple(Arm.from_values(a.values()) for a in arms)


@dataclass
class PairedStat:
    """A paired difference over seeds (and blocks): per-seed differences and bootstrap replicates."""

    diffs: np.ndarray  # (S,) per-seed difference on the whole test region
    replicates: np.ndarray | None = None  # (B,) seed × block bootstrap replicates (None: no blocks)
    n_blocks: int = 1

    @property
    def t(self) -> Estimate:
        return estimate(self.diffs)

    @property
    def mean(self) -> float:
        return float(np.mean(self.diffs))

    @property
    def method(self) -> str:
        n = len(self.diffs)
        if self.replicates is None:
            return f"Student t over {n} seeds"
        return f"Student t over {n} seeds ∪ seed × block bootstrap ({self.n_blocks} blocks)"

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        """The union of the t interval and (with blocks) the bootstrap interval at ``level``."""
        lo, hi = t_interval(self.t, level)
        if self.replicates is not None:
            b_lo, b_hi = percentile_interval(self.replicates, level)
            lo, hi = min(lo, b_lo), max(hi, b_hi)
        return lo, hi

    @property
    def p(self) -> float:
        """Two-sided p-value of "no difference": the larger of the t-test's and the bootstrap's."""
        p = t_p_value(self.t)
        return p if self.replicates is None else max(p, p_value(self.replicates))


def paired(a: Arm, b: Arm, n_boot: int = N_BOOT) -> PairedStat:
    """``a − b`` paired by seed (and by block where both have the same blocks)."""
    if a.n_seeds != b.n_seeds:
        raise ValueError(f"paired arms need the same seeds: {a.n_seeds} vs {b.n_seeds}")
    a, b = aligned(a, b)
    diffs = a.values() - b.values()
    if a.n_blocks == 1:
        return PairedStat(diffs)
    rs = resampler(a.n_seeds, a.n_blocks, n_boot)
    return PairedStat(diffs, rs.metric(a) - rs.metric(b), a.n_blocks)


def gain(model: Arm, trivial: Arm, higher_is_better: bool, n_boot: int = N_BOOT) -> PairedStat:
    """Gain over the trivial baseline on the same test data, positive = better than the baseline."""
    return paired(model, trivial, n_boot) if higher_is_better else paired(trivial, model, n_boot)


# ----------------------------------------------------------------------------- Holm
@dataclass
class Call:
    """One paired comparison of an experiment after Holm: raw and adjusted p, the interval at the
    level Holm tested it at, and the call (+1 better, −1 worse, 0 not called)."""

    name: str
    stat: PairedStat
    p: float
    p_adj: float
    level: float
    lo: float
    hi: float
    sign: int
    m: int  # comparisons in the family

    def text(self, digits: int = 4) -> str:
        """``+0.0123 [0.0040, 0.0206], p_adj 0.003``."""
        if not math.isfinite(self.p):
            return "undefined"
        return (f"{self.stat.mean:+.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}], "
                f"p_adj {self.p_adj:.2g}")


def holm_calls(stats: Mapping[str, PairedStat | None], higher_is_better: bool,
               alpha: float = ALPHA) -> dict[str, Call]:
    """Every comparison of one experiment, Holm-adjusted together (``None``: not made, no call)."""
    names = list(stats)
    raw = [stats[n].p if stats[n] is not None else math.nan for n in names]
    adj = holm(raw)
    tested = sorted((p, i) for i, p in enumerate(raw) if math.isfinite(p))
    rank = {i: r for r, (_, i) in enumerate(tested)}
    m, out = len(tested), {}
    for i, name in enumerate(names):
        stat = stats[name]
        if stat is None or i not in rank:
            out[name] = Call(name, stat or PairedStat(np.array([math.nan])), math.nan, math.nan,
                             math.nan, math.nan, math.nan, 0, m)
            continue
        level = 1.0 - alpha / (m - rank[i])
        lo, hi = stat.interval(level)
        sign = sign_of(lo, hi, higher_is_better) if adj[i] < alpha else 0
        out[name] = Call(name, stat, raw[i], adj[i], level, lo, hi, sign, m)
    return out


# ----------------------------------------------------------------------------- power
def power(gain_at_train: PairedStat, level: float = LEVEL) -> float:
    """Gain over the trivial baseline at L₀ divided by the half-width of its ``level`` interval
    (∞ for an exact gain, NaN without an interval)."""
    lo, hi = gain_at_train.interval(level)
    half = (hi - lo) / 2.0
    if not math.isfinite(half):
        return math.nan
    return math.inf if half == 0 else gain_at_train.mean / half


# ----------------------------------------------------------------------------- retained gain
@dataclass
class Retained:
    """Retained gain at one length: ratio of mean gains and its bootstrap interval, or why undefined."""

    mean: float = math.nan
    lo: float = math.nan
    hi: float = math.nan
    why: str = ""  # "" when defined
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def defined(self) -> bool:
        return not self.why


def guard(gain_at_train: PairedStat, metric: str, trivial: float, level: float = LEVEL) -> str:
    """Why retained gain is undefined for this gain at L₀ (``""``: it is defined); one run's
    version, without an interval, is :func:`~pipelines.eval.statistics.point_guard`."""
    lo, _ = gain_at_train.interval(level)
    floor = min_effect(metric, trivial)
    if not math.isfinite(lo):
        return "no interval for the gain at L₀ (one seed)"
    if lo <= 0 or lo <= floor:
        return (f"gain over the trivial baseline at L₀ {gain_at_train.mean:+.4g} has its lower "
                f"{level:.0%} bound {lo:.3g} ≤ max(0, minimum effect {floor:.3g})")
    return ""


def retained(model_l: Arm, model_l0: Arm, trivial_l: Arm, trivial_l0: Arm, higher_is_better: bool,
             metric: str, level: float = LEVEL, n_boot: int = N_BOOT) -> Retained:
    """gain(L) / gain(L₀) as a ratio of means over seeds, with a paired bootstrap interval (the same
    seed and block draws for numerator and denominator); undefined unless the gain at L₀ passes
    :func:`guard`."""
    g0 = gain(model_l0, trivial_l0, higher_is_better, n_boot)
    why = guard(g0, metric, float(np.mean(trivial_l0.values())), level)
    if why:
        return Retained(why=why)
    arms = aligned(model_l, model_l0, trivial_l, trivial_l0)
    rs = resampler(arms[0].n_seeds, arms[0].n_blocks, n_boot)
    sign = 1.0 if higher_is_better else -1.0
    num = sign * (rs.metric(arms[0]) - rs.metric(arms[2]))  # (B,)
    den = sign * (rs.metric(arms[1]) - rs.metric(arms[3]))  # (B,)
    point = float(np.mean(sign * (arms[0].values() - arms[2].values())) /
                  np.mean(sign * (arms[1].values() - arms[3].values())))
    with np.errstate(divide="ignore", invalid="ignore"):
        lo, hi = percentile_interval(num / den, level)
    return Retained(point, lo, hi)
