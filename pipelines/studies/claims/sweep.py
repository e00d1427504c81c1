"""Trained comparisons across seeds: one child per (condition, seed), the task metric per test length.

A *condition* is a scheme (a ``configs/posenc`` name, a scheme YAML or an inline spec) with optional
model/data overrides. For tasks with a length sweep (DNA LM, forecaster) the metric per length comes
from :class:`pipelines.ExtrapolationEval`; for the others (segmentation) from the task's own per-length
test pass. Retained gain (:meth:`Measured.retained_guarded`, :func:`pipelines.studies.verdicts.retained`:
a ratio of mean gains, undefined below the guard) is against the task's trivial baseline on the same
test data (Markov order 0 for the LM, seasonal naive for the forecaster).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.eval.extrapolation import TRAINED, adapter_for
from pipelines.eval.statistics import Estimate
from pipelines.studies.bootstrap import Arm
from pipelines.studies.claims.base import ClaimResult, Experiment, est, fmt
from pipelines.studies.claims.context import Child
from pipelines.studies.claims.gates import measure_gate
from pipelines.studies.claims.judge import Judgement, Key, Primary, judge_stats, verdict_reason
from pipelines.studies.tables import md_table
from pipelines.studies.verdicts import PairedStat, Retained, gain, paired, paired_difference, retained


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
    #: condition → length → per seed: (K, 2) per-block (sum, count) of the test region, or None
    blocks: dict[str, dict[int, list[np.ndarray | None]]] = field(default_factory=dict)
    trivial_blocks: list[np.ndarray | None] = field(default_factory=list)  # per seed, same blocks

    def arm(self, cond: str, length: int) -> Arm | None:
        """The condition at ``length`` for the verdict statistics (per-block where every seed has
        blocks); ``None`` where it is undefined for some seed."""
        vals = self.values[cond][length]
        if not vals or not all(math.isfinite(v) for v in vals):
            return None
        found = self.blocks.get(cond, {}).get(length) or []
        if len(found) == len(vals) and all(b is not None for b in found):
            return Arm.from_blocks(found)
        return Arm.from_values(vals)

    def trivial_arm(self) -> Arm | None:
        """The trivial baseline on the same test data (per block when known), one row per seed."""
        if self.baseline is None:
            return None
        n = len(self.seeds)
        if len(self.trivial_blocks) == n and all(b is not None for b in self.trivial_blocks):
            return Arm.from_blocks(self.trivial_blocks)
        return Arm.from_values([self.baseline] * n)

    def stat(self, a: str, b: str, length: int) -> PairedStat | None:
        """Paired ``a − b`` at ``length`` (seeds, and blocks where known); ``None`` if undefined."""
        x, y = self.arm(a, length), self.arm(b, length)
        return paired(x, y) if x is not None and y is not None else None

    def judge(self, pairs: list[Key], primary: Primary | str | None) -> Judgement:
        """Holm over every ``(a, b, length)`` the rule reads, the primary comparison among them."""
        keys = list(dict.fromkeys(pairs))
        if isinstance(primary, Primary):  # the primary's comparisons are always members, first
            first = primary.keys(self.train_length)
            keys = first + [k for k in keys if k not in first]
        stats = {k: self.stat(*k) for k in keys}
        return judge_stats(stats, primary, self.train_length, self.higher_is_better)

    def retained_guarded(self, cond: str, length: int) -> Retained:
        """Retained gain of ``cond`` at ``length``: ratio of mean gains with a bootstrap interval,
        undefined below the guard (:func:`pipelines.studies.verdicts.guard`)."""
        x, x0, t = self.arm(cond, length), self.arm(cond, self.train_length), self.trivial_arm()
        if t is None:
            return Retained(why="no trivial baseline")
        if x is None or x0 is None:
            return Retained(why=f"{cond} undefined at {length if x is None else self.train_length}")
        return retained(x, x0, t, t, self.higher_is_better, self.metric)

    def at(self, cond: str, length: int) -> Estimate:
        return est(self.values[cond][length])

    def diff(self, a: str, b: str, length: int) -> Estimate:
        """Paired (same seed) ``a − b`` at ``length``; NaN estimate when either is undefined."""
        x, y = self.values[a][length], self.values[b][length]
        if not all(math.isfinite(v) for v in [*x, *y]):
            return est([math.nan])
        return paired_difference(x, y)


class Sweep(Experiment):
    """Train every condition with every seed on ``task``; subclasses judge the claim.

    Args:
        task: task config (YAML path).
        conditions: ``{label: {scheme: name | path | spec, overrides: {...}}}``.
        seeds: training seeds (default :data:`~pipelines.studies.claims.judge.CLAIM_SEEDS`).
        metric: per-length test metric for tasks without a length sweep (e.g. ``acc``).
        higher_is_better: for ``metric`` (sweep tasks say it themselves).
        baseline: name of one of the task's reference baselines (``markov0``, ``seasonal_naive``) for
            retained gain and power; default: the task's trivial baseline (``TaskAdapter.trivial_baseline``).
    """

    def __init__(
        self,
        task: str,
        conditions: dict[str, dict],
        seeds: list[int] | None = None,
        metric: str | None = None,
        higher_is_better: bool = True,
        baseline: str | None = None,
    ) -> None:
        self.task, self.conditions, self.seeds = task, conditions, None if seeds is None else list(seeds)
        self.metric, self.higher, self.baseline = metric, higher_is_better, baseline

    def collect(self, ctx) -> tuple[Measured, Any]:
        """Train every (condition, seed); returns the measurements and one trained child (for data)."""
        m, last = None, None
        seeds = ctx.seeds(self.seeds)
        for seed in seeds:
            for label in self.conditions:
                t = ctx.fit(self.child(seed, label))
                values, info = self._values(t)
                if m is None:
                    m = Measured(info["metric"], info["higher"], info["train"], sorted(values), seeds=seeds)
                    m.values = {c: {n: [] for n in m.lengths} for c in self.conditions}
                    m.blocks = {c: {n: [] for n in m.lengths} for c in self.conditions}
                blocks = _blocks(t)
                for n in m.lengths:
                    m.values[label][n].append(values.get(n, math.nan))
                    m.blocks[label][n].append(blocks.get(n))
                last = t
            m.trivial_blocks.append(getattr(last.sweep, "trivial_blocks", None))
        m.baseline_name, m.baseline = self._trivial(last)
        return m, last

    def child(self, seed: int, label: str) -> Child:
        """The training of condition ``label`` at ``seed``."""
        cond = self.conditions[label]
        test = self.metric is not None
        return Child(self.task, cond.get("scheme"), seed, label, cond.get("overrides"), test)

    def children(self, ctx) -> list[Child]:
        return [self.child(seed, label) for seed in ctx.seeds(self.seeds) for label in self.conditions]

    def _trivial(self, t) -> tuple[str, float | None]:
        """The baseline power and retained gain are measured against: the named one, or the task's trivial."""
        adapter = adapter_for(t.module)
        if self.baseline is not None:
            return self.baseline, float(adapter.baselines(t.datamodule)[self.baseline])
        if t.sweep is not None and t.sweep.trivial is not None:
            return t.sweep.trivial_name, float(t.sweep.trivial)
        value = adapter.trivial_baseline(t.datamodule)
        name = getattr(t.datamodule, "trivial_name", adapter.trivial_name)  # synthetic data names its own
        return name, None if value is None else float(value)

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
            out += retained_table(m, head, self.nope())
        return out

    def nope(self) -> str | None:
        """The label of the condition without positions (scheme ``none``), if there is one."""
        return next((c for c, v in self.conditions.items() if v.get("scheme") == "none"), None)

    def figure(self, m: Measured, path, title: str) -> str:
        import matplotlib  # optional: matplotlib, figures only

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # optional: matplotlib, figures only

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
        self, ctx, m: Measured, setup: str, measured: str, holds: str, rule: str, extra: str = "",
        judgement: Judgement | None = None,
    ) -> ClaimResult:
        """The claim's result: tables, figure, and — from ``judgement`` (every paired call, Holm) — the
        Holm table, the primary comparison and its power (the stronger of its two arms)."""
        figure = self.figure(m, ctx.out / f"{ctx.name}.png", ctx.name)
        metrics = {
            f"{c}/{m.metric}_L{n}": m.at(c, n).mean
            for c in m.values
            for n in m.lengths
            if math.isfinite(m.at(c, n).mean)
        }
        out = ClaimResult(setup=setup, measured=measured, holds=holds, rule=rule,
                          details=self.tables(m) + extra, figures=[figure], metrics=metrics)
        if judgement is not None:
            out.details += judgement.table(m.metric)
            out.primary = judgement.summary()
        self.gate_of(ctx, m, out, judgement)
        return out

    def gate_of(self, ctx, m: Measured, out: ClaimResult, judgement: Judgement | None) -> None:
        """The reason for the verdict and the declared gate, measured: the claimed arm's gain over the
        position-free control at the primary's length, and the primary's interval."""
        out.why = verdict_reason(ctx, judgement, out.holds)
        gate, primary = ctx.gate, ctx.primary
        if gate is None:
            return
        found = isinstance(primary, Primary)
        length = gate.length or (primary.length if found and primary.length else m.train_length)
        arms = gate.gated(primary)
        gains = {a: self.gain_at(m, a, gate.control, length) for a in arms}
        trivial = m.trivial_arm()
        baseline = ({a: self.gain_at(m, a, None, length, trivial) for a in arms}
                    if gate.baseline_gain is not None else None)
        stat = judgement.primary_stat() if judgement is not None else None
        measure_gate(out, gate, gains, stat, baseline, f"{length}", m.baseline_name)

    @staticmethod
    def gain_at(m: Measured, arm: str, control: str | None, length: int, trivial: Any = None) -> Any:
        """``arm``'s gain over ``control`` (or over the ``trivial`` baseline's arm) at ``length``; None
        where either is missing or undefined."""
        if arm not in m.values or length not in m.lengths:
            return None
        x = m.arm(arm, length)
        y = trivial if control is None else m.arm(control, length) if control in m.values else None
        return gain(x, y, m.higher_is_better) if x is not None and y is not None else None


def retained_table(m: Measured, head: list[str], nope: str | None) -> str:
    """Retained gain (guarded ratio of mean gains, bootstrap interval) per condition and length, with the
    paired difference from the no-position condition beside it at every length."""
    def cell(c: str, n: int) -> str:
        r = m.retained_guarded(c, n)
        text = f"{r.mean:.2f} [{r.lo:.2f}, {r.hi:.2f}]" if r.defined else "undefined"
        d = m.stat(c, nope, n) if nope is not None and c != nope else None
        if d is not None:
            lo, hi = d.interval()
            text += f"; Δ {nope} {d.mean:+.4f} [{lo:+.4f}, {hi:+.4f}]"
        return text

    rows = [[c, *[cell(c, n) for n in m.lengths]] for c in m.values]
    why = [f"{c}: {r.why}" for c in m.values for r in [m.retained_guarded(c, m.train_length)] if r.why]
    beside = f"; beside it the paired difference from {nope} (95 % interval)" if nope else ""
    return (f"\nRetained gain over {m.baseline_name} ({m.baseline:.4g} on the same test data): ratio of "
            "mean gains gain(L) / gain(L₀), 95 % paired bootstrap interval; undefined unless the gain at "
            f"L₀ has its lower bound above 0 and above the minimum effect{beside}:\n\n"
            + md_table(head, rows) + ("\nUndefined because: " + "; ".join(why) + "\n" if why else ""))


def _blocks(t) -> dict[int, np.ndarray | None]:
    """Length → the trained scheme's per-block (sum, count) of the test region, where the task has them."""
    if t.sweep is None:
        return {}
    return {c.length: getattr(c, "blocks", None) for c in t.sweep.cells if c.variant == TRAINED}


def word(sign: int, higher_is_better: bool = True) -> str:
    return {1: "better", -1: "worse", 0: "not called"}[sign]
