"""Claims judged on trained comparisons across seeds (see :mod:`pipelines.eval.claims.sweep`):

* 2 — learned positions fail past the training length, a sinusoid-backed hybrid degrades gracefully;
* 3 — periodicity-tuned RoPE helps on periodic data, because of the period (true vs control periods);
* 4 — relative/bias schemes extrapolate better than absolute ones;
* 9 — √d embedding scaling, dropout on the embedding + encoding sum, add vs concat.
"""

from __future__ import annotations

import math

from pipelines.eval.claims.base import ClaimResult, est, fmt, md_table
from pipelines.eval.claims.sweep import Measured, Sweep, word


def _retained_text(m: Measured, cond: str) -> str:
    parts = []
    for n in m.lengths:
        if n == m.train_length:
            continue
        e = est(m.retained(cond, n))
        parts.append(f"{n // m.train_length}× {fmt(e, 2).split(' (')[0]}")
    return f"{cond}: " + ", ".join(parts)


class LearnedExtrapolation(Sweep):
    """Args (besides :class:`Sweep`'s): ``learned``, ``hybrid``: the condition labels judged."""

    claim = "Learned positions fail past the training length; a sinusoid-backed hybrid degrades gracefully."

    def __init__(self, learned: str, hybrid: str, task_name: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.learned, self.hybrid, self.task_name = learned, hybrid, task_name

    def run(self, ctx) -> ClaimResult:
        m, _ = self.collect(ctx)
        longer = [n for n in m.lengths if n > m.train_length]
        first = longer[0]
        lr = est(m.retained(self.learned, first))
        learned_fails = not math.isfinite(lr.mean) or lr.mean < 0.5
        graceful = all(est(m.retained(self.hybrid, n)).mean > 0 for n in longer)
        holds = "yes" if learned_fails and graceful else "partly" if learned_fails or graceful else "no"
        measured = "retained gain over Markov-0: " + "; ".join(_retained_text(m, c) for c in m.values)
        return self.result(
            ctx,
            m,
            f"{self.task_name or 'causal DNA LM (E. coli)'}, L0 = {m.train_length}, {', '.join(m.values)}; "
            f"tested at 1–{longer[-1] // m.train_length}×, {len(m.seeds)} seeds",
            measured,
            holds,
            f"yes if {self.learned} is undefined or keeps < 0.5 of its gain at {first // m.train_length}× "
            f"and {self.hybrid} keeps a positive share of its gain at every longer length; "
            "partly if only one",
        )


class PeriodicControl(Sweep):
    """Args (besides :class:`Sweep`'s): ``plain`` (RoPE), ``tuned`` (the data's periods),
    ``controls`` (the same number of pinned pairs at other periods)."""

    claim = (
        "Periodicity-tuned RoPE helps on periodic data — because of the period: pinning the true "
        "periods beats plain RoPE and beats pinning the same number of pairs to control periods."
    )

    def __init__(self, plain: str, tuned: str, controls: list[str], task_name: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.plain, self.true, self.controls, self.task_name = plain, tuned, list(controls), task_name

    def run(self, ctx) -> ClaimResult:
        m, _ = self.collect(ctx)
        rows = []
        for n in m.lengths:
            for other in [self.plain, *self.controls]:
                d = m.diff(self.true, other, n)
                rows.append(
                    [
                        f"{n} ({n // m.train_length}×)",
                        f"{self.true} − {other}",
                        fmt(d, 4),
                        word(m.better(self.true, other, n)),
                    ]
                )
        L0 = m.train_length
        beats_plain = m.better(self.true, self.plain, L0) == 1
        beats_controls = [m.better(self.true, c, L0) == 1 for c in self.controls]
        holds = (
            "yes"
            if beats_plain and all(beats_controls)
            else ("partly" if beats_plain or any(beats_controls) else "no")
        )
        measured = f"{m.metric} at L0 = {L0}: " + "; ".join(f"{c} {fmt(m.at(c, L0), 4)}" for c in m.values)
        controls_better = [c for c in self.controls if m.better(c, self.plain, L0) == 1]
        if controls_better:
            measured += f"; control pinning also beats plain RoPE: {', '.join(controls_better)}"
        extra = "\nPaired differences (same seed), true periods − the others:\n\n" + md_table(
            ["length", "difference", "mean ± CI", "call"], rows
        )
        return self.result(
            ctx,
            m,
            f"{self.task_name}: {', '.join(m.values)}; same model, data and budget, {len(m.seeds)} seeds",
            measured,
            holds,
            f"at the training length, yes if {self.true} is called better (paired 95 % CI) than {self.plain} "
            "and than every control; partly if better than some of them; no if none",
            extra,
        )


class RelativeVsAbsolute(Sweep):
    """Args (besides :class:`Sweep`'s): ``relative`` and ``absolute`` condition labels."""

    claim = "Relative/bias schemes extrapolate better than absolute ones."

    def __init__(self, relative: list[str], absolute: list[str], task_name: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.relative, self.absolute, self.task_name = list(relative), list(absolute), task_name

    def run(self, ctx) -> ClaimResult:
        m, _ = self.collect(ctx)
        longest = max(m.lengths)
        rows, wins = [], []
        for r in self.relative:
            for a in self.absolute:
                for n in (x for x in m.lengths if x > m.train_length):
                    undefined = not math.isfinite(m.at(a, n).mean)
                    c = 1 if undefined and math.isfinite(m.at(r, n).mean) else m.better(r, a, n)
                    d = est([x - y for x, y in zip(m.retained(r, n), m.retained(a, n), strict=True)])
                    rows.append(
                        [
                            f"{n} ({n // m.train_length}×)",
                            f"{r} vs {a}",
                            fmt(m.diff(r, a, n), 4),
                            "absolute undefined" if undefined else fmt(d, 2),
                            word(c),
                        ]
                    )
                    if n == longest:
                        wins.append(c == 1)
        holds = "yes" if all(wins) else "partly" if any(wins) else "no"
        measured = "retained gain: " + "; ".join(_retained_text(m, c) for c in m.values)
        measured += (
            f"; relative called better at {longest // m.train_length}× in {sum(wins)}/{len(wins)} pairs"
        )
        extra = "\nPaired (same seed) relative − absolute, metric and retained gain:\n\n" + md_table(
            ["length", "pair", f"Δ {m.metric}", "Δ retained gain", "relative is"], rows
        )
        return self.result(
            ctx,
            m,
            f"{self.task_name}: relative {', '.join(self.relative)} vs absolute {', '.join(self.absolute)}, "
            f"{len(m.seeds)} seeds, trained at {m.train_length}, tested to {longest}",
            measured,
            holds,
            f"at the longest length ({longest}), yes if every relative scheme is called better "
                f"(paired 95 % CI on "
            f"{m.metric}; an undefined absolute scheme counts as worse) than every absolute one; "
                f"partly if some pairs",
            extra,
        )


class EmbeddingOptions(Sweep):
    """Args (besides :class:`Sweep`'s): ``reference`` (plain addition) and the option labels judged at
    ``factors`` × the training length."""

    claim = (
        "√d embedding scaling, dropout on the embedding + encoding sum, and concatenating instead of "
        "adding the encoding change the DNA LM's bits/base (seed catalogue item 004)."
    )

    def __init__(self, reference: str, factors: list[int], task_name: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.reference, self.factors, self.task_name = reference, list(factors), task_name

    def run(self, ctx) -> ClaimResult:
        m, _ = self.collect(ctx)
        rows, called, parts = [], {}, []
        for c in (x for x in m.values if x != self.reference):
            for f in self.factors:
                n = m.train_length * f
                sign = m.better(c, self.reference, n)
                called.setdefault(c, []).append(sign != 0)
                rows.append([c, f"{f}×", fmt(m.diff(c, self.reference, n), 4), word(sign)])
                parts.append(
                    f"{c} {f}×: {fmt(m.diff(c, self.reference, n), 4).split(' (')[0]} ({word(sign)})"
                )
        any_effect = [any(v) for v in called.values()]
        holds = "yes" if all(any_effect) else "partly" if any(any_effect) else "no"
        extra = f"\nPaired differences (same seed) against {self.reference}:\n\n" + md_table(
            ["option", "length", f"Δ {m.metric}", "call"], rows
        )
        return self.result(
            ctx,
            m,
            f"{self.task_name or 'causal DNA LM'}, sinusoidal encoding: {', '.join(m.values)}; "
            f"{len(m.seeds)} seeds, "
            f"judged at {', '.join(f'{f}×' for f in self.factors)}",
            f"Δ bits/base vs {self.reference} (negative = better): " + "; ".join(parts),
            holds,
            "yes if every option's paired 95 % CI excludes 0 at some judged length; partly if some "
                "do; no if none",
            extra,
        )
