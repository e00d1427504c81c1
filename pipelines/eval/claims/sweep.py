"""Trained comparisons across seeds: one child per (condition, seed), the task metric per test length.

A *condition* is a scheme (a ``configs/posenc`` name, a scheme YAML or an inline spec) with optional
model/data overrides. For tasks with a length sweep (DNA LM, forecaster) the metric per length comes
from :class:`pipelines.ExtrapolationEval`; for the others (segmentation) from the task's own per-length
test pass. Retained gain (:func:`pipelines.eval.statistics.retained_gain`) is against the task's trivial
baseline on the same test data (Markov order 0 for the LM, seasonal naive for the forecaster).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.eval.claims.base import ClaimResult, Experiment, est, fmt, md_table
from pipelines.eval.extrapolation import adapter_for
from pipelines.eval.statistics import Estimate, call, paired_difference, retained_gain


@dataclass
class Measured:
    """Metric per condition, seed and length (NaN: undefined there), with what judging it needs."""

    metric: str
    higher_is_better: bool
    train_length: int
    lengths: list[int]
    values: dict[str, dict[int, list[float]]] = field(default_factory=dict)  # condition → length → seeds
    baseline: float | None = None
    baseline_name: str = ""
    seeds: list[int] = field(default_factory=list)

    def at(self, cond: str, length: int) -> Estimate:
        return est(self.values[cond][length])

    def retained(self, cond: str, length: int) -> list[float]:
        """Per-seed retained gain at ``length`` (NaN where undefined or without a gain at L0)."""
        if self.baseline is None:
            return [math.nan] * len(self.seeds)
        return [
            retained_gain(m, m0, self.baseline, self.higher_is_better)
            for m, m0 in zip(self.values[cond][length], self.values[cond][self.train_length], strict=True)
        ]

    def diff(self, a: str, b: str, length: int) -> Estimate:
        """Paired (same seed) ``a − b`` at ``length``; NaN estimate when either is undefined."""
        x, y = self.values[a][length], self.values[b][length]
        if not all(math.isfinite(v) for v in [*x, *y]):
            return est([math.nan])
        return paired_difference(x, y)

    def better(self, a: str, b: str, length: int) -> int:
        """+1 if ``a`` is called better than ``b`` at ``length``, −1 worse, 0 not called."""
        d = self.diff(a, b, length)
        return call(d, self.higher_is_better) if math.isfinite(d.mean) else 0


class Sweep(Experiment):
    """Train every condition with every seed on ``task``; subclasses judge the claim.

    Args:
        task: task config (YAML path).
        conditions: ``{label: {scheme: name | path | spec, overrides: {...}}}``.
        seeds: training seeds.
        metric: per-length test metric for tasks without a length sweep (e.g. ``acc``).
        higher_is_better: for ``metric`` (sweep tasks say it themselves).
        baseline: name of the task's trivial baseline (``markov0``, ``seasonal_naive``) for retained gain.
    """

    def __init__(
        self,
        task: str,
        conditions: dict[str, dict],
        seeds: list[int],
        metric: str | None = None,
        higher_is_better: bool = True,
        baseline: str | None = None,
    ) -> None:
        self.task, self.conditions, self.seeds = task, conditions, list(seeds)
        self.metric, self.higher, self.baseline = metric, higher_is_better, baseline

    def collect(self, ctx) -> tuple[Measured, Any]:
        """Train every (condition, seed); returns the measurements and one trained child (for data)."""
        m, last = None, None
        seeds = ctx.seeds(self.seeds)
        for seed in seeds:
            for label, cond in self.conditions.items():
                t = ctx.train(
                    self.task,
                    cond.get("scheme"),
                    seed,
                    label,
                    cond.get("overrides"),
                    test=self.metric is not None,
                )
                values, info = self._values(t)
                if m is None:
                    m = Measured(info["metric"], info["higher"], info["train"], sorted(values), seeds=seeds)
                    m.values = {c: {n: [] for n in m.lengths} for c in self.conditions}
                for n in m.lengths:
                    m.values[label][n].append(values.get(n, math.nan))
                last = t
        if self.baseline is not None and last.sweep is not None:
            m.baseline = float(adapter_for(last.module).baselines(last.datamodule)[self.baseline])
            m.baseline_name = self.baseline
        return m, last

    def _values(self, t) -> tuple[dict[int, float], dict[str, Any]]:
        if self.metric is None:
            s = t.sweep
            values = {n: (v if v is not None else math.nan) for n, v in s.by_length().items()}
            return values, {"metric": s.metric, "higher": s.higher_is_better, "train": s.train_length}
        res = t.module.length_results()
        values = {n: r if isinstance(r, float) else r[self.metric] for n, r in res.items()}  # LM: floats
        for n in getattr(t.datamodule, "eval_lengths", []):
            values.setdefault(n, math.nan)
        return values, {"metric": self.metric, "higher": self.higher, "train": int(t.datamodule.seq_len)}

    # ------------------------------------------------------------------ tables and figure
    def tables(self, m: Measured) -> str:
        head = ["condition", *[f"{n} ({n // m.train_length}×)" for n in m.lengths]]
        rows = [[c, *[fmt(m.at(c, n)) for n in m.lengths]] for c in m.values]
        out = (f"{m.metric} (mean ± 95 % CI over seeds {m.seeds}; undefined = positions the scheme "
               "does not define):\n\n")
        out += md_table(head, rows)
        if m.baseline is not None:
            rows = [[c, *[fmt(est(m.retained(c, n)), 2) for n in m.lengths]] for c in m.values]
            out += (
                f"\nRetained gain over {m.baseline_name} ({m.baseline:.4g} on the same test data): "
                "1 = the whole gain at the training length kept, 0 = none, < 0 = worse than the baseline:\n\n"
            )
            out += md_table(head, rows)
        return out

    def figure(self, m: Measured, path, title: str) -> str:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.4))
        for c in m.values:
            e = [m.at(c, n) for n in m.lengths]
            mean = np.array([x.mean for x in e])
            lo = np.array([x.lo if x.n > 1 else x.mean for x in e])
            hi = np.array([x.hi if x.n > 1 else x.mean for x in e])
            ax.plot(m.lengths, mean, marker="o", ms=3, label=c)
            ax.fill_between(m.lengths, lo, hi, alpha=0.15)
        if m.baseline is not None:
            ax.axhline(m.baseline, color="grey", ls="--", lw=1, label=m.baseline_name)
        ax.set(xscale="log", xlabel="test length", ylabel=m.metric, title=title)
        ax.set_xticks(m.lengths, [str(n) for n in m.lengths])
        ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(path, dpi=80)
        plt.close(fig)
        return str(path)

    def result(
        self, ctx, m: Measured, setup: str, measured: str, holds: str, rule: str, extra: str = ""
    ) -> ClaimResult:
        figure = self.figure(m, ctx.out / f"{ctx.name}.png", ctx.name)
        metrics = {
            f"{c}/{m.metric}_L{n}": m.at(c, n).mean
            for c in m.values
            for n in m.lengths
            if math.isfinite(m.at(c, n).mean)
        }
        return ClaimResult(
            setup=setup,
            measured=measured,
            holds=holds,
            rule=rule,
            details=self.tables(m) + extra,
            figures=[figure],
            metrics=metrics,
        )


def word(sign: int, higher_is_better: bool = True) -> str:
    return {1: "better", -1: "worse", 0: "not called"}[sign]
