"""Claims judged on trained comparisons across seeds (see :mod:`pipelines.studies.claims.sweep`):

* 2 — learned positions fail past the training length, a sinusoid-backed hybrid degrades gracefully;
* 3 — periodicity-tuned RoPE helps on periodic data, because of the period (true vs control periods);
* 4 — relative/bias schemes extrapolate better than absolute ones;
* 9 — √d embedding scaling, dropout on the embedding + encoding sum, add vs concat.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pipelines.eval.extrapolation import adapter_for
from pipelines.studies.claims.base import ClaimResult, fmt
from pipelines.studies.claims.judge import Judgement, Primary
from pipelines.studies.claims.sweep import Measured, Sweep, word
from pipelines.studies.tables import md_table


def _retained_text(m: Measured, cond: str) -> str:
    """Guarded retained gain per longer length: ``2× 0.93 [0.85, 1.01]`` or ``undefined``."""
    parts = []
    for n in m.lengths:
        if n == m.train_length:
            continue
        r = m.retained_guarded(cond, n)
        parts.append(f"{n // m.train_length}× " + (f"{r.mean:.2f} [{r.lo:.2f}, {r.hi:.2f}]" if r.defined
                                                   else "undefined"))
    return f"{cond}: " + ", ".join(parts)


def primary_verdict(ctx, j: Judgement) -> tuple[str, str]:
    """(holds, rule) read from the declared primary comparison after Holm (three-way; the reason is
    :func:`verdict_reason`)."""
    if not isinstance(ctx.primary, Primary):
        return "inconclusive", "no primary comparison declared: nothing to call"
    return ctx.primary.verdict(j.primary_calls)[0], ctx.primary.rule()


class LearnedExtrapolation(Sweep):
    """Args (besides :class:`Sweep`'s): ``learned``, ``hybrid``: the condition labels judged."""

    claim = "Learned positions fail past the training length; a sinusoid-backed hybrid degrades gracefully."

    def __init__(self, learned: str, hybrid: str, task_name: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.learned, self.hybrid, self.task_name = learned, hybrid, task_name

    def run(self, ctx) -> ClaimResult:
        m, _ = self.collect(ctx)
        longer = [n for n in m.lengths if n > m.train_length]
        others = [c for c in m.values if c != self.hybrid]
        j = m.judge([(self.hybrid, c, n) for c in others for n in longer], ctx.primary)
        holds, rule = primary_verdict(ctx, j)
        measured = "retained gain over " + m.baseline_name + ": " + "; ".join(
            _retained_text(m, c) for c in m.values)
        return self.result(
            ctx,
            m,
            f"{self.task_name or 'causal DNA LM (E. coli)'}, L0 = {m.train_length}, {', '.join(m.values)}; "
            f"tested at 1–{longer[-1] // m.train_length}×, {len(m.seeds)} seeds",
            measured,
            holds,
            rule,
            judgement=j,
        )


class PeriodicControl(Sweep):
    """Args (besides :class:`Sweep`'s): ``plain`` (RoPE), ``tuned`` (the data's periods),
    ``controls`` (the same number of pinned pairs at other periods), ``markov`` (report the best
    Markov chain on the same test bases at every length: genome LMs only)."""

    claim = (
        "Periodicity-tuned RoPE helps on periodic data — because of the period: pinning the true "
        "periods beats plain RoPE and beats pinning the same number of pairs to control periods."
    )

    def __init__(self, plain: str, tuned: str, controls: list[str], task_name: str = "",
                 markov: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.plain, self.true, self.controls, self.task_name = plain, tuned, list(controls), task_name
        self.markov = markov

    def run(self, ctx) -> ClaimResult:
        m, last = self.collect(ctx)
        others = [self.plain, *self.controls]
        j = m.judge([(self.true, o, n) for n in m.lengths for o in others]
                    + [(c, self.plain, m.train_length) for c in self.controls], ctx.primary)
        rows = [[f"{n} ({n // m.train_length}×)", f"{self.true} − {o}", fmt(m.diff(self.true, o, n), 4),
                 word(j.sign(self.true, o, n))] for n in m.lengths for o in others]
        holds, rule = primary_verdict(ctx, j)
        L0 = m.train_length
        measured = f"{m.metric} at L0 = {L0}: " + "; ".join(f"{c} {fmt(m.at(c, L0), 4)}" for c in m.values)
        measured += f"; beside the pair, each other arm − {self.plain} at L0 (Holm): " + "; ".join(
            f"{c} {j.calls[(c, self.plain, L0)].text(4)} ({word(j.sign(c, self.plain, L0))})"
            for c in self.controls)
        extra = ("\nPaired differences (same seed), true periods − the others (calls after Holm):\n\n"
                 + md_table(["length", "difference", "mean ± CI", "call"], rows))
        if self.markov:
            chain = markov_at(last, m.lengths)
            measured += "; best Markov chain (order chosen on validation) " + ", ".join(
                f"{n}: {v:.4f}" for n, v in chain.items())
            above = [m.at(c, L0).mean - chain.get(L0, math.nan) for c in m.values]
            if all(math.isfinite(x) for x in above):
                measured += (f"; every arm {'above' if min(above) > 0 else 'against'} the chain at L0 by "
                             f"{min(above):+.4f} to {max(above):+.4f}")
            extra += ("\nThe best interpolated Markov chain (fitted on the train region, order chosen on the "
                      "validation region) on the same test bases, each base seeing only its own window:\n\n"
                      + md_table(["length", m.metric], [[n, f"{v:.4f}"] for n, v in chain.items()]))
        return self.result(
            ctx,
            m,
            f"{self.task_name}: {', '.join(m.values)}; same model, data and budget, {len(m.seeds)} seeds",
            measured,
            holds,
            rule,
            extra,
            judgement=j,
        )


def markov_at(t: Any, lengths: list[int]) -> dict[int, float]:
    """The task's best Markov chain on the test bases scored at each of ``lengths`` (genome LMs)."""
    found = adapter_for(t.module).baselines(t.datamodule)
    return {n: float(found.get(f"markov_best_L{n}", math.nan)) for n in lengths}


RELATIVE, ABSOLUTE = "relative (mean)", "absolute (mean)"


def pool(m: Measured, label: str, arms: list[str]) -> None:
    """Add condition ``label`` to ``m``: per seed and length the mean of ``arms``' metric (paired by
    seed, so ``relative (mean) − absolute (mean)`` is the mean over every relative–absolute pair)."""
    m.values[label] = {n: [float(np.mean(v)) for v in zip(*(m.values[a][n] for a in arms), strict=True)]
                       for n in m.lengths}
    m.blocks[label] = {n: [pooled_blocks(b) for b in zip(*(m.blocks.get(a, {}).get(n) or [None] * len(m.seeds)
                                                              for a in arms), strict=True)]
                       for n in m.lengths}


def pooled_blocks(blocks: tuple[np.ndarray | None, ...]) -> np.ndarray | None:
    """One seed's per-block (sum, count) of the mean of several arms scored on the same blocks: the
    arms' sums averaged, the counts kept (so each block's metric, and the seed × block bootstrap's, is
    the mean of the arms'); None unless every arm has the same blocks with the same counts."""
    if any(b is None for b in blocks) or len({b.shape for b in blocks}) != 1:
        return None
    counts = blocks[0][:, 1]
    if not all(np.array_equal(b[:, 1], counts) for b in blocks):
        return None
    return np.stack([np.mean([b[:, 0] for b in blocks], axis=0), counts], axis=1)  # (K, 2)


class RelativeVsAbsolute(Sweep):
    """Args (besides :class:`Sweep`'s): ``relative`` and ``absolute`` condition labels."""

    claim = "Relative/bias schemes extrapolate better than absolute ones."

    def __init__(self, relative: list[str], absolute: list[str], task_name: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.relative, self.absolute, self.task_name = list(relative), list(absolute), task_name

    def run(self, ctx) -> ClaimResult:
        m, _ = self.collect(ctx)
        wanted = {ctx.primary.a, ctx.primary.b} if isinstance(ctx.primary, Primary) else set()
        for label, arms in ((RELATIVE, self.relative), (ABSOLUTE, self.absolute)):
            if label in wanted:  # a primary over every relative–absolute pair: the contrast of the means
                pool(m, label, arms)
        longest, longer = max(m.lengths), [x for x in m.lengths if x > m.train_length]
        pairs = [(r, a, n) for r in self.relative for a in self.absolute for n in longer]
        j = m.judge(pairs, ctx.primary)
        rows, wins = [], []
        for r, a, n in pairs:
            undefined = m.arm(a, n) is None
            rows.append([f"{n} ({n // m.train_length}×)", f"{r} vs {a}", fmt(m.diff(r, a, n), 4),
                         "absolute undefined" if undefined else word(j.sign(r, a, n))])
            if n == longest:
                wins.append(j.sign(r, a, n) == 1)
        holds, rule = primary_verdict(ctx, j)
        measured = "retained gain: " + "; ".join(_retained_text(m, c) for c in m.values)
        measured += (f"; relative called better (Holm) at {longest // m.train_length}× in "
                     f"{sum(wins)}/{len(wins)} pairs")
        extra = "\nPaired (same seed) relative − absolute (calls after Holm):\n\n" + md_table(
            ["length", "pair", f"Δ {m.metric}", "relative is"], rows
        )
        return self.result(
            ctx,
            m,
            f"{self.task_name}: relative {', '.join(self.relative)} vs absolute {', '.join(self.absolute)}, "
            f"{len(m.seeds)} seeds, trained at {m.train_length}, tested to {longest}",
            measured,
            holds,
            rule,
            extra,
            judgement=j,
        )


class EmbeddingOptions(Sweep):
    """Args (besides :class:`Sweep`'s): ``reference`` (plain addition) and the option labels judged at
    ``factors`` × the training length."""

    claim = (
        "√d embedding scaling, dropout on the embedding + encoding sum, and concatenating instead of "
        "adding the encoding change a language model's loss (seed catalogue item 004; measured on the "
        "synthetic retrieval LM's bits/token, not on DNA)."
    )

    def __init__(self, reference: str, factors: list[int], task_name: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.reference, self.factors, self.task_name = reference, list(factors), task_name

    def run(self, ctx) -> ClaimResult:
        m, _ = self.collect(ctx)
        options = [x for x in m.values if x not in (self.reference, self.nope())]  # NoPE: the gate's control
        pairs = [(c, self.reference, m.train_length * f) for c in options for f in self.factors]
        j = m.judge(pairs, ctx.primary)
        rows, parts = [], []
        for c, _, n in pairs:
            sign, d = j.sign(c, self.reference, n), fmt(m.diff(c, self.reference, n), 4)
            rows.append([c, f"{n // m.train_length}×", d, word(sign)])
            parts.append(f"{c} {n // m.train_length}×: {d.split(' (')[0]} ({word(sign)})")
        holds, rule = primary_verdict(ctx, j)
        extra = (f"\nPaired differences (same seed) against {self.reference} (calls after Holm):\n\n"
                 + md_table(["option", "length", f"Δ {m.metric}", "call"], rows))
        return self.result(
            ctx,
            m,
            f"{self.task_name or 'causal DNA LM'}, sinusoidal encoding: {', '.join(m.values)}; "
            f"{len(m.seeds)} seeds, "
            f"judged at {', '.join(f'{f}×' for f in self.factors)}",
            f"Δ bits/base vs {self.reference} (negative = better): " + "; ".join(parts),
            holds,
            rule,
            extra,
            judgement=j,
        )
