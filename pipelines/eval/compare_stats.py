"""The comparison's statistics, one :class:`Row` per scheme (and RoPE variant): the metric per
length over seeds, the paired difference from the reference scheme and its call, retained gain over
the trivial baseline, and the extrapolation ratios. Pure arithmetic on the children read from MLflow
(:mod:`pipelines.eval.compare_runs`); the numbers come from :mod:`pipelines.eval.statistics`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipelines.eval.compare_runs import ChildRun, TaskInfo
from pipelines.eval.extrapolation import TRAINED, extrapolation_ratio
from pipelines.eval.statistics import (
    LEVEL,
    Estimate,
    call,
    estimate,
    gain_over,
    paired_difference,
    retained_gain,
    retained_ratio,
)


@dataclass
class Row:
    """One scheme (or scheme + RoPE variant) over its seeds."""

    label: str
    scheme: str
    variant: str
    values: dict[int, dict[int, float | None]]  # seed → length → metric (None: undefined)
    metric: dict[int, Estimate | None] = field(default_factory=dict)  # length → over seeds
    diff: dict[int, Estimate | None] = field(default_factory=dict)  # length → paired, vs the reference
    calls: dict[int, int] = field(default_factory=dict)
    retained: dict[int, Estimate | None] = field(default_factory=dict)
    gain: Estimate | None = None  # gain over the trivial baseline at the training length
    ratio: int | None = None  # longest length with retained gain's lower bound ≥ retain
    no_ratio: str = ""  # why there is no ratio
    tolerance_ratio: int | None = None

    @property
    def seeds(self) -> list[int]:
        return sorted(self.values)


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
    return list(rows.values())


def fill(rows: list[Row], info: TaskInfo, reference: str, trivial: dict[int, float], retain: float,
         tolerance: float | None, level: float = LEVEL) -> None:
    """Compute every row's statistics in place (``trivial``: seed → the trivial baseline's value)."""
    ref = next((r for r in rows if r.scheme == reference and r.variant == TRAINED), None)
    for row in rows:
        seeds = row.seeds
        for n in info.lengths:
            vals = _over_seeds(row.values, n, seeds)
            row.metric[n] = estimate(vals, level) if vals else None
            row.diff[n] = _difference(row, ref, n, level) if row is not ref else None
            row.calls[n] = call(row.diff[n], info.higher_is_better) if row.diff[n] is not None else 0
        _retained(row, info, trivial, retain, level)
        if tolerance is not None:
            means = {n: (e.mean if e else None) for n, e in row.metric.items()}
            row.tolerance_ratio = extrapolation_ratio(means, info.train_length, info.higher_is_better,
                                                      tolerance)[0]


def _difference(row: Row, ref: Row | None, length: int, level: float) -> Estimate | None:
    """Paired difference row − reference at ``length`` over the seeds both have defined there."""
    if ref is None:
        return None
    both = [s for s in row.seeds if s in ref.values]
    a, b = _over_seeds(row.values, length, both), _over_seeds(ref.values, length, both)
    return paired_difference(a, b, level) if a and b else None


def _retained(row: Row, info: TaskInfo, trivial: dict[int, float], retain: float, level: float) -> None:
    """Gain over the trivial baseline at L₀, retained gain per length and the ratio (or why none)."""
    seeds = [s for s in row.seeds if s in trivial]
    at_train = _over_seeds(row.values, info.train_length, seeds) if seeds else None
    if not trivial:
        row.no_ratio = "no trivial baseline"
        return
    if at_train is None:
        row.no_ratio = f"undefined at L₀ = {info.train_length}"
        return
    base = [trivial[s] for s in seeds]
    row.gain = gain_over(at_train, base, info.higher_is_better, level)
    curves = {n: [math.nan if v is None else v for v in (row.values[s].get(n) for s in seeds)]
              for n in info.lengths}
    row.ratio, _ = retained_ratio(curves, info.train_length, base, info.higher_is_better, retain, level)
    for n in info.lengths:  # per length even without a ratio: the table shows what is there
        gains = [retained_gain(m, m0, b, info.higher_is_better)
                 for m, m0, b in zip(curves[n], at_train, base, strict=True)]
        row.retained[n] = estimate(gains, level) if all(math.isfinite(g) for g in gains) else None
    if row.ratio is None:
        worse = row.gain.mean <= 0
        row.no_ratio = ("not better than the trivial baseline at L₀" if worse or len(seeds) < 2
                        else "gain over the trivial baseline at L₀ not separable from 0 (CI includes 0)")


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
    names = {k for c in ok for k in c.baselines}
    baselines = {k: float(sum(c.baselines[k] for c in ok if k in c.baselines) /
                          sum(k in c.baselines for c in ok)) for k in sorted(names)}
    rows = make_rows(children)
    fill(rows, info, reference, trivial, retain, tolerance, level)
    return Comparison(info, rows, children, reference, retain, tolerance, level, trivial, baselines)
