"""The comparison's statistics, one :class:`Row` per scheme (and RoPE variant): the metric per
length over seeds; the paired difference from the reference scheme, Holm-adjusted over every call of
the table; the paired difference from NoPE (scheme ``none``) at every length; the gain over the
trivial baseline at L₀ and its power; the guarded retained gain and the extrapolation ratio on it.
Pure arithmetic on the children read from MLflow (:mod:`pipelines.studies.compare.runs`); the numbers
come from :mod:`pipelines.eval.statistics` and :mod:`pipelines.studies.verdicts` (per-block sums of the
test region, where the children logged them, add a block bootstrap to every interval)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipelines.eval.extrapolation import TRAINED
from pipelines.eval.lengths import extrapolation_ratio
from pipelines.eval.statistics import LEVEL, Estimate, estimate
from pipelines.studies.bootstrap import Arm
from pipelines.studies.compare.runs import ChildRun, TaskInfo
from pipelines.studies.verdicts import (
    Call,
    PairedStat,
    Retained,
    gain,
    holm_calls,
    paired,
    paired_difference,
    power,
    retained,
)

NOPE = "none"  # the scheme without positions: every row's absolute difference from it is shown


@dataclass
class Row:
    """One scheme (or scheme + RoPE variant) over its seeds."""

    label: str
    scheme: str
    variant: str
    values: dict[int, dict[int, float | None]]  # seed → length → metric (None: undefined)
    blocks: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)  # seed → length → (K, 2)
    metric: dict[int, Estimate | None] = field(default_factory=dict)  # length → over seeds
    diff: dict[int, Estimate | None] = field(default_factory=dict)  # length → paired (t), vs the reference
    holm: dict[int, Call] = field(default_factory=dict)  # length → the call after Holm over the table
    calls: dict[int, int] = field(default_factory=dict)
    nope: dict[int, PairedStat | None] = field(default_factory=dict)  # length → paired, vs NoPE
    retained: dict[int, Retained | None] = field(default_factory=dict)
    gain: PairedStat | None = None  # gain over the trivial baseline at the training length
    power: float | None = None  # gain / half-width of its 95 % interval
    ratio: int | None = None  # longest length with retained gain's lower bound ≥ retain
    no_ratio: str = ""  # why there is no ratio
    tolerance_ratio: int | None = None

    @property
    def seeds(self) -> list[int]:
        return sorted(self.values)

    def arm(self, length: int, seeds: list[int]) -> Arm | None:
        """The row at ``length`` over ``seeds`` (per block where every seed has blocks); ``None`` if
        undefined for any seed."""
        vals = _over_seeds(self.values, length, seeds)
        if vals is None or not seeds:
            return None
        found = [self.blocks.get(s, {}).get(length) for s in seeds]
        if all(b is not None for b in found):
            return Arm.from_blocks(found)
        return Arm.from_values(vals)


def _over_seeds(values: dict[int, dict[int, float | None]], length: int,
                seeds: list[int]) -> list[float] | None:
    """The metric at ``length`` for every seed in ``seeds``, or ``None`` if undefined for any."""
    out = [values[s].get(length) for s in seeds]
    return None if any(v is None for v in out) else [float(v) for v in out]


def make_rows(children: list[ChildRun]) -> list[Row]:
    """One row per scheme and variant, in the order the schemes were named (reference included)."""
    rows: dict[tuple[str, str], Row] = {}
    for c in children:
        if not c.ok:
            continue
        for variant, curve in c.curves.items():
            label = c.scheme if variant == TRAINED else f"{c.scheme}+{variant}"
            row = rows.setdefault((c.scheme, variant), Row(label, c.scheme, variant, {}))
            row.values[c.seed] = curve
            row.blocks[c.seed] = c.blocks.get(variant, {})
    return list(rows.values())


def _find(rows: list[Row], scheme: str) -> Row | None:
    return next((r for r in rows if r.scheme == scheme and r.variant == TRAINED), None)


def fill(rows: list[Row], info: TaskInfo, reference: str, trivial: dict[int, float], retain: float,
         tolerance: float | None, level: float = LEVEL,
         trivial_blocks: dict[int, np.ndarray] | None = None) -> None:
    """Compute every row's statistics in place (``trivial``: seed → the trivial baseline's value;
    ``trivial_blocks``: seed → its per-block (sum, count), where logged)."""
    ref, nope = _find(rows, reference), _find(rows, NOPE)
    family: dict[tuple[str, int], PairedStat | None] = {}
    for row in rows:
        for n in info.lengths:
            vals = _over_seeds(row.values, n, row.seeds)
            row.metric[n] = estimate(vals, level) if vals else None
            row.diff[n] = _difference(row, ref, n, level) if row is not ref else None
            if row is not ref and ref is not None:
                family[(row.label, n)] = _paired(row, ref, n)
            row.nope[n] = _paired(row, nope, n) if nope is not None and row is not nope else None
        _retained(row, info, trivial, trivial_blocks or {}, retain, level)
        if tolerance is not None:
            means = {n: (e.mean if e else None) for n, e in row.metric.items()}
            row.tolerance_ratio = extrapolation_ratio(means, info.train_length, info.higher_is_better,
                                                      tolerance)[0]
    calls = holm_calls(family, info.higher_is_better, 1.0 - level)
    for row in rows:
        row.holm = {n: calls[(row.label, n)] for n in info.lengths if (row.label, n) in calls}
        row.calls = {n: (row.holm[n].sign if n in row.holm else 0) for n in info.lengths}


def _both(row: Row, other: Row) -> list[int]:
    return [s for s in row.seeds if s in other.values]


def _difference(row: Row, ref: Row | None, length: int, level: float) -> Estimate | None:
    """Paired difference row − reference at ``length`` over the seeds both have defined there (t)."""
    if ref is None:
        return None
    both = _both(row, ref)
    a, b = _over_seeds(row.values, length, both), _over_seeds(ref.values, length, both)
    return paired_difference(a, b, level) if a and b else None


def _paired(row: Row, other: Row | None, length: int) -> PairedStat | None:
    """Paired row − other at ``length`` (seeds and, where logged, blocks); ``None`` if undefined."""
    if other is None:
        return None
    both = _both(row, other)
    a, b = row.arm(length, both), other.arm(length, both)
    return paired(a, b) if a is not None and b is not None and len(both) >= 2 else None


def _trivial_arm(seeds: list[int], trivial: dict[int, float], blocks: dict[int, np.ndarray]) -> Arm:
    if all(s in blocks for s in seeds):
        return Arm.from_blocks([blocks[s] for s in seeds])
    return Arm.from_values([trivial[s] for s in seeds])


def _retained(row: Row, info: TaskInfo, trivial: dict[int, float], trivial_blocks: dict[int, np.ndarray],
              retain: float, level: float) -> None:
    """Gain over the trivial baseline at L₀ and its power, guarded retained gain per length, and
    the ratio (or why none)."""
    seeds = [s for s in row.seeds if s in trivial]
    if not trivial:
        row.no_ratio = "no trivial baseline"
        return
    at_train = row.arm(info.train_length, seeds)
    if at_train is None or len(seeds) < 2:
        row.no_ratio = (f"undefined at L₀ = {info.train_length}" if at_train is None
                        else "one seed: no interval for the gain at L₀")
        return
    base = _trivial_arm(seeds, trivial, trivial_blocks)
    row.gain = gain(at_train, base, info.higher_is_better)
    row.power = power(row.gain, level)
    for n in info.lengths:
        arm = row.arm(n, seeds)
        row.retained[n] = None if arm is None else retained(
            arm, at_train, base, base, info.higher_is_better, info.metric, level)
    first = row.retained[info.train_length]
    if first is not None and not first.defined:
        row.no_ratio = first.why
        return
    row.ratio = info.train_length
    for n in (x for x in info.lengths if x > info.train_length):
        found = row.retained.get(n)
        if found is None or not found.defined or not found.lo >= retain:
            break
        row.ratio = n


@dataclass
class Comparison:
    """Everything the comparison's tables and figure show."""

    info: TaskInfo
    rows: list[Row]
    children: list[ChildRun]
    reference: str
    retain: float
    tolerance: float | None
    level: float
    trivial: dict[int, float]  # seed → the trivial baseline's value on that seed's test data
    baselines: dict[str, float]  # name → mean over the children (no model)

    @property
    def seeds(self) -> list[int]:
        return sorted({c.seed for c in self.children})


def compare(children: list[ChildRun], reference: str, retain: float = 0.9, tolerance: float | None = None,
            level: float = LEVEL) -> Comparison:
    """The statistics of ``children`` (read from MLflow) against the ``reference`` scheme."""
    ok = [c for c in children if c.ok and c.info is not None]
    info = ok[0].info
    trivial = {c.seed: c.trivial for c in ok if c.trivial is not None}
    trivial_blocks = {c.seed: c.trivial_blocks for c in ok if c.trivial_blocks is not None}
    names = {k for c in ok for k in c.baselines}
    baselines = {k: float(sum(c.baselines[k] for c in ok if k in c.baselines) /
                          sum(k in c.baselines for c in ok)) for k in sorted(names)}
    rows = make_rows(children)
    fill(rows, info, reference, trivial, retain, tolerance, level, trivial_blocks)
    return Comparison(info, rows, children, reference, retain, tolerance, level, trivial, baselines)
