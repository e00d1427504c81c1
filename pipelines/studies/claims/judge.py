"""How a claim's verdict is called (see :mod:`pipelines.studies.verdicts` for the arithmetic).

* Every claim declares ONE primary measurement in its config before the run (``primary:``): for a
  claim judged on paired comparisons over seeds, a mapping ``{a, b, length, expect, min_effect}``
  (condition labels; ``length`` omitted = the training length; ``min_effect`` the smallest difference
  that matters, in the metric's units); otherwise a sentence naming the measurement. ``a`` or ``b`` may
  be a list: the primary is then the conjunction of every ``a − b`` pair (a claim that each of several
  arms is useful, or that one arm beats each of several: the weakest pair decides).
* Every paired call an experiment makes is one member of its family: Holm-adjusted together
  (:class:`Judgement`); the verdict is three-way (:func:`three_way`), read from the primary call's
  adjusted interval: yes (called in the expected direction AND clear of ± min_effect), no (opposite
  called, or within ± min_effect), or inconclusive with the reason.
* A trained claim declares its **gate** (``gate:`` — :class:`~pipelines.studies.claims.gates.Gate`):
  every arm the primary compares over the position-free control by a declared margin, and the widest the
  primary's 95 % interval may be; a verdict whose testbed misses it is inconclusive, with the reason.
* Seeds: :data:`CLAIM_SEEDS` unless a config lists others; ``--quick`` keeps :data:`QUICK_SEEDS` and
  :data:`QUICK_STEPS` of the training steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipelines.studies.bootstrap import Arm
from pipelines.studies.claims.gates import nonneg
from pipelines.studies.tables import md_table
from pipelines.studies.verdicts import Call, PairedStat, gain, holm_calls, power
from posenc import PosencError

# ----------------------------------------------------------------------------- three-way verdicts
YES, NO, INCONCLUSIVE = "yes", "no", "inconclusive"
EXPECT = ("better", "worse", "differ")


def three_way(call: Call | None, expect: str, margin: float) -> tuple[str, str]:
    """(verdict, reason) of a primary comparison ``a − b`` after Holm.

    * ``yes``: the expected direction is called (``expect`` better/worse: that side; ``differ``: either)
      and the whole interval (at the Holm level) lies beyond ±``margin`` on that side: an effect at least
      the claim's declared minimum effect (in the metric's units) is shown;
    * ``no``: the opposite direction is called, or the whole interval lies within ±``margin``: an
      equivalence;
    * ``inconclusive``: everything else — not called and the interval reaches past ±``margin``, called
      but the interval reaches inside ±``margin``, or the comparison is undefined.
    """
    if expect not in EXPECT:
        raise ValueError(f"expect must be one of {EXPECT}, got {expect!r}")
    if call is None or not (math.isfinite(call.lo) and math.isfinite(call.hi)):
        return INCONCLUSIVE, "the primary comparison is undefined (an arm is missing or has no interval)"
    want = {"better": 1, "worse": -1, "differ": call.sign}[expect]
    where = f"[{call.lo:+.4g}, {call.hi:+.4g}] at level {call.level:.4g}"
    side = "better" if call.sign == 1 else "worse"
    if call.sign != 0 and call.sign == want:
        if min(abs(call.lo), abs(call.hi)) >= margin:
            return YES, (f"called {side} in the expected direction, clear of ±{margin:g} (the minimum "
                         f"effect): {where}")
        return INCONCLUSIVE, (f"called {side} in the expected direction, but the interval {where} reaches "
                              f"inside ±{margin:g} (the minimum effect): an effect that matters is not shown")
    if call.sign != 0:
        return NO, f"the opposite direction is called: {where}"
    if -margin <= call.lo and call.hi <= margin:
        return NO, f"not called and the interval {where} lies within ±{margin:g} (the minimum effect)"
    return INCONCLUSIVE, (f"not called (p_adj {call.p_adj:.2g}) and the interval {where} reaches past "
                          f"±{margin:g} (the minimum effect): neither an effect nor its absence is shown")


def all_of(named: Sequence[tuple[str, tuple[str, str]]]) -> tuple[str, str]:
    """The verdict of a conjunction of primary comparisons: no if any is no, yes if every one is yes,
    inconclusive otherwise (each reason named)."""
    if len(named) == 1:
        return named[0][1]
    for want in (NO, INCONCLUSIVE):
        found = [f"{name}: {why}" for name, (v, why) in named if v == want]
        if found:
            return want, "; ".join(found)
    return YES, "; ".join(f"{name}: {why}" for name, (_, why) in named)


CLAIM_SEEDS = (0, 1, 2, 3, 4)  # the claims' default seeds (≥ 5: issue 26)
QUICK_SEEDS = 3  # seeds kept by --quick (the table says so)
QUICK_STEPS = 0.5  # the fraction of each child's training steps --quick keeps (trainer.limit_train_batches)
Key = tuple[str, str, int]  # (a, b, length): the paired difference a − b at length


@dataclass(frozen=True)
class Primary:
    """The declared primary comparison ``a − b`` at ``length`` (None: the training length), what the
    claim expects of it (``a`` called better than ``b``, worse, or either: differ) and the minimum
    effect (metric units) an effect must clear for a yes, and within which "no difference" is a no.
    ``more``: further ``(a, b)`` pairs that must hold too (a conjunction; the config's list form)."""

    a: str
    b: str
    length: int | None = None
    expect: str = "better"
    min_effect: float = 0.0
    more: tuple[tuple[str, str], ...] = ()

    def pairs(self) -> list[tuple[str, str]]:
        return [(self.a, self.b), *self.more]

    def keys(self, train_length: int) -> list[Key]:
        return [(a, b, self.length or train_length) for a, b in self.pairs()]

    def key(self, train_length: int) -> Key:
        return self.keys(train_length)[0]

    def labels(self) -> list[str]:
        """Every condition the primary compares, in order, once."""
        return list(dict.fromkeys(x for pair in self.pairs() for x in pair))

    def brief(self) -> str:
        """``a − b at L = n`` (each pair of a conjunction, joined by "and"): how the docs name it."""
        at = f" at L = {self.length}" if self.length else " at L₀"
        return " and ".join(f"{a} − {b}" for a, b in self.pairs()) + at

    def text(self) -> str:
        at = f" at L = {self.length}" if self.length else " at L₀"
        diffs = " and ".join(f"{a} − {b}" for a, b in self.pairs())
        if self.more:
            return f"{diffs}{at} (expected: each {self.expect})"
        return f"{diffs}{at} (expected: {self.a} {self.expect}" + (
            f" than {self.b})" if self.expect != "differ" else f" from {self.b})")

    def verdict(self, calls: Call | Sequence[Call | None] | None) -> tuple[str, str]:
        """(yes | no | inconclusive, reason) of the primary call(s) after Holm (:func:`three_way`; a
        conjunction: :func:`all_of`)."""
        found = list(calls) if isinstance(calls, list | tuple) else [calls]
        found += [None] * (len(self.pairs()) - len(found))
        return all_of([(f"{a} − {b}", three_way(c, self.expect, self.min_effect))
                       for (a, b), c in zip(self.pairs(), found, strict=False)])

    def rule(self) -> str:
        """The verdict rule in words."""
        m = f"±{self.min_effect:g} (the declared minimum effect)"
        what = (f"every one of the primary comparisons {self.text()} is" if self.more else
                f"the primary comparison {self.text()} is")
        return (f"yes if {what} called so after Holm over all of the experiment's paired calls (its "
                f"adjusted interval on that side of 0, adjusted p < 0.05) with its whole adjusted interval "
                f"clear of {m}; no if {'any' if self.more else 'it'} is called the opposite way or has its "
                f"adjusted interval within {m}; inconclusive otherwise (also when called but not clear of "
                "the minimum effect); the other comparisons are reported, not used")


def parse_primary(value: Any, where: str) -> Primary | str:
    """The config's ``primary``: a :class:`Primary` from ``{a, b, min_effect[, length, expect]}`` (``a`` or
    ``b`` a label or a list of labels), or a sentence."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    keys = {"a", "b", "length", "expect", "min_effect"}
    if isinstance(value, Mapping) and {"a", "b", "min_effect"} <= set(value) <= keys:
        length, expect, margin = value.get("length"), value.get("expect", "better"), value["min_effect"]
        if length is not None and (not isinstance(length, int) or length < 1):
            raise PosencError(f"{where}: primary.length must be a positive integer, got {length!r}")
        if expect not in EXPECT:
            raise PosencError(f"{where}: primary.expect must be one of {', '.join(EXPECT)}, got {expect!r}")
        margin = nonneg(margin, where, "primary.min_effect")
        sides = [_labels(value[k], where, k) for k in ("a", "b")]
        pairs = [(x, y) for x in sides[0] for y in sides[1]]
        return Primary(*pairs[0], length, expect, margin, tuple(pairs[1:]))
    raise PosencError(f"{where}: primary must be {{a: <label>, b: <label>, min_effect: <number>, length: "
                      f"<int>, expect: better|worse|differ}} (length, expect optional; a or b may be a list) "
                      f"or a sentence, got {value!r}")


def _labels(value: Any, where: str, key: str) -> list[str]:
    found = value if isinstance(value, list) else [value]
    if not found or not all(isinstance(x, str | int | float) and str(x).strip() for x in found):
        raise PosencError(f"{where}: primary.{key} must be a label or a list of labels, got {value!r}")
    return [str(x) for x in found]


@dataclass
class Judgement:
    """Every paired call of one experiment after Holm, and the primary one(s)."""

    calls: dict[Key, Call]
    primary_key: Key | None
    higher_is_better: bool
    more_keys: list[Key] = field(default_factory=list)  # a conjunction's further primary comparisons

    @property
    def primary_keys(self) -> list[Key]:
        return [] if self.primary_key is None else [self.primary_key, *self.more_keys]

    @property
    def primary(self) -> Call | None:
        return self.calls.get(self.primary_key) if self.primary_key is not None else None

    @property
    def primary_calls(self) -> list[Call | None]:
        return [self.calls.get(k) for k in self.primary_keys]

    def primary_stat(self) -> PairedStat | None:
        """The primary's statistic the gate's width reads: of a conjunction, the widest member's."""
        stats = [c.stat for c in self.primary_calls if c is not None]
        if len(stats) != len(self.primary_keys) or not stats:
            return None
        return max(stats, key=lambda s: _width(s))

    def sign(self, a: str, b: str, length: int) -> int:
        """+1 ``a`` called better than ``b`` at ``length`` (after Holm), −1 worse, 0 not called."""
        return self.calls[(a, b, length)].sign

    def summary(self) -> str:
        """The primary call(s) in one line, for the table."""
        if self.primary_key is None:
            return "no primary comparison"
        return "; ".join(f"{a} − {b} at {n}: " + (c.text() + f" (Holm over {c.m})" if c else "undefined")
                         for (a, b, n), c in zip(self.primary_keys, self.primary_calls, strict=True))

    def table(self, metric: str, digits: int = 4) -> str:
        """Markdown: every call with raw and Holm-adjusted p, its interval and the call."""
        rows = []
        for (a, b, n), c in self.calls.items():
            star = " (primary)" if (a, b, n) in self.primary_keys else ""
            interval = "undefined" if not math.isfinite(c.lo) else (
                f"[{c.lo:+.{digits}f}, {c.hi:+.{digits}f}] at {c.level:.4g}")
            rows.append([f"{a} − {b}{star}", n, "undefined" if not math.isfinite(c.stat.mean) else
                         f"{c.stat.mean:+.{digits}f}", interval, _p(c.p), _p(c.p_adj),
                         {1: "better", -1: "worse", 0: "not called"}[c.sign], c.stat.method])
        head = ["comparison", "length", f"Δ {metric}", "interval (Holm level)", "p", "p Holm", "call",
                "interval from"]
        tested = sum(math.isfinite(c.p) for c in self.calls.values())
        return (f"\nEvery paired call of this experiment: Holm–Bonferroni over the {tested} defined of "
                f"{len(self.calls)} (family-wise α = 0.05); the verdict reads the primary one only:\n\n"
                + md_table(head, rows))


def _width(stat: PairedStat) -> float:
    lo, hi = stat.interval()
    return hi - lo if math.isfinite(hi - lo) else math.inf


def verdict_reason(ctx, j: Judgement | None, holds: str) -> str:
    """Why the primary comparison gave ``holds`` (``""`` when ``holds`` is not the primary's verdict)."""
    if j is None or not isinstance(ctx.primary, Primary):
        return ""
    verdict, reason = ctx.primary.verdict(j.primary_calls)
    return reason if verdict == holds else ""


def _p(p: float) -> str:
    return "—" if not math.isfinite(p) else f"{p:.2g}"


def judge_stats(stats: Mapping[Key, PairedStat | None], primary: Primary | str | None, train_length: int,
                higher_is_better: bool) -> Judgement:
    """Holm over ``stats`` (every paired call of the experiment, the primary among them)."""
    keys = primary.keys(train_length) if isinstance(primary, Primary) else []
    if any(k not in stats for k in keys):
        raise PosencError(f"primary comparison {primary.text()} is not among the experiment's comparisons")
    return Judgement(holm_calls(stats, higher_is_better), keys[0] if keys else None, higher_is_better,
                     keys[1:])


def power_over(values: Sequence[float], trivial: float, higher_is_better: bool) -> tuple[float, PairedStat]:
    """Power of one arm (one value per seed) against a constant baseline (e.g. R² 0, chance 0.5)."""
    g = gain(Arm.from_values(values), Arm.from_values([trivial] * len(values)), higher_is_better)
    return power(g), g


def power_text(name: str, control: str, g: PairedStat, ratio: float) -> str:
    """``gain of rope over nope at 32 +0.48 [0.47, 0.49] → power 96``."""
    lo, hi = g.interval()
    return (f"gain of {name} over {control} {g.mean:+.4g} [{lo:.4g}, {hi:.4g}] "
            f"→ power {ratio:.3g} ({g.method})")
