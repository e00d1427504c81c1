"""How a claim's verdict is called (see :mod:`pipelines.eval.verdicts` for the arithmetic).

* Every claim declares ONE primary measurement in its config before the run (``primary:``): for a
  claim judged on paired comparisons over seeds, a mapping ``{a, b, length}`` (condition labels;
  ``length`` omitted = the training length); otherwise a sentence naming the measurement.
* Every paired call an experiment makes is one member of its family: Holm-adjusted together
  (:class:`Judgement`); the verdict is read from the primary call's adjusted interval and p-value,
  the others are reported, not used.
* A trained claim reports its power: the gain over the task's trivial baseline at L₀ / the half-width
  of its 95 % interval, for whichever of the primary's two arms has the larger ratio
  (:func:`primary_power`; a testbed is powered when one arm of the comparison is far from trivial:
  then "the other arm stays at trivial" is a measured failure, not noise); below 10 the runner
  replaces the verdict by "inconclusive (underpowered)".
* Seeds: :data:`CLAIM_SEEDS` unless a config lists others; ``--quick`` keeps :data:`QUICK_SEEDS` and
  :data:`QUICK_STEPS` of the training steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.eval.bootstrap import Arm
from pipelines.eval.verdicts import Call, PairedStat, gain, holm_calls, power
from pipelines.studies.claims.base import md_table
from posenc import PosencError

CLAIM_SEEDS = (0, 1, 2, 3, 4)  # the claims' default seeds (≥ 5: issue 26)
QUICK_SEEDS = 3  # seeds kept by --quick (the table says so)
QUICK_STEPS = 0.5  # the fraction of each child's training steps --quick keeps (trainer.limit_train_batches)
Key = tuple[str, str, int]  # (a, b, length): the paired difference a − b at length


EXPECT = ("better", "worse", "differ")


@dataclass(frozen=True)
class Primary:
    """The declared primary comparison ``a − b`` at ``length`` (None: the training length), and what
    the claim expects of it: ``a`` called better than ``b`` (default), worse, or either (differ)."""

    a: str
    b: str
    length: int | None = None
    expect: str = "better"

    def key(self, train_length: int) -> Key:
        return (self.a, self.b, self.length or train_length)

    def text(self) -> str:
        at = f" at L = {self.length}" if self.length else " at L₀"
        return f"{self.a} − {self.b}{at} (expected: {self.a} {self.expect}" + (
            f" than {self.b})" if self.expect != "differ" else f" from {self.b})")

    def verdict(self, call: Call | None) -> str:
        """``yes`` if the primary call (after Holm) is what the claim expects, else ``no``."""
        sign = 0 if call is None else call.sign
        want = {"better": sign == 1, "worse": sign == -1, "differ": sign != 0}[self.expect]
        return "yes" if want else "no"

    def rule(self) -> str:
        """The verdict rule in words."""
        return (f"yes if the primary comparison {self.text()} is called so after Holm over all of the "
                "experiment's paired calls (its adjusted interval on that side of 0, adjusted p < 0.05); "
                "no otherwise; the other comparisons are reported, not used")


def parse_primary(value: Any, where: str) -> Primary | str:
    """The config's ``primary``: a :class:`Primary` from ``{a, b[, length]}``, or a sentence."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, Mapping) and {"a", "b"} <= set(value) <= {"a", "b", "length", "expect"}:
        length, expect = value.get("length"), value.get("expect", "better")
        if length is not None and (not isinstance(length, int) or length < 1):
            raise PosencError(f"{where}: primary.length must be a positive integer, got {length!r}")
        if expect not in EXPECT:
            raise PosencError(f"{where}: primary.expect must be one of {', '.join(EXPECT)}, got {expect!r}")
        return Primary(str(value["a"]), str(value["b"]), length, expect)
    raise PosencError(f"{where}: primary must be {{a: <label>, b: <label>, length: <int>, expect: "
                      f"better|worse|differ}} (length, expect optional) or a sentence, got {value!r}")


@dataclass
class Judgement:
    """Every paired call of one experiment after Holm, and the primary one."""

    calls: dict[Key, Call]
    primary_key: Key | None
    higher_is_better: bool

    @property
    def primary(self) -> Call | None:
        return self.calls.get(self.primary_key) if self.primary_key is not None else None

    def sign(self, a: str, b: str, length: int) -> int:
        """+1 ``a`` called better than ``b`` at ``length`` (after Holm), −1 worse, 0 not called."""
        return self.calls[(a, b, length)].sign

    def summary(self) -> str:
        """The primary call in one line, for the table."""
        c = self.primary
        if c is None:
            return "no primary comparison"
        a, b, n = self.primary_key
        return f"{a} − {b} at {n}: {c.text()} (Holm over {c.m})"

    def table(self, metric: str, digits: int = 4) -> str:
        """Markdown: every call with raw and Holm-adjusted p, its interval and the call."""
        rows = []
        for (a, b, n), c in self.calls.items():
            star = " (primary)" if (a, b, n) == self.primary_key else ""
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


def _p(p: float) -> str:
    return "—" if not math.isfinite(p) else f"{p:.2g}"


def judge_stats(stats: Mapping[Key, PairedStat | None], primary: Primary | str | None, train_length: int,
                higher_is_better: bool) -> Judgement:
    """Holm over ``stats`` (every paired call of the experiment, the primary among them)."""
    key = primary.key(train_length) if isinstance(primary, Primary) else None
    if key is not None and key not in stats:
        raise PosencError(f"primary comparison {primary.text()} is not among the experiment's comparisons")
    return Judgement(holm_calls(stats, higher_is_better), key, higher_is_better)


def power_over(values: Sequence[float], trivial: float, higher_is_better: bool) -> tuple[float, PairedStat]:
    """Power of one arm (one value per seed) against a constant trivial baseline (e.g. chance 0.5)."""
    g = gain(Arm.from_values(values), Arm.from_values([trivial] * len(values)), higher_is_better)
    return power(g), g


def primary_power(gains: Mapping[str, PairedStat | None]) -> tuple[str, float, PairedStat] | None:
    """(arm, power, gain) of the arm of ``gains`` (the primary's ``a`` and ``b`` → gain at L₀) with the
    larger power; ``None`` when no arm has a gain. Ties keep the first (``a``)."""
    found = [(name, power(g), g) for name, g in gains.items() if g is not None]
    found = [f for f in found if not math.isnan(f[1])] or found
    return max(found, key=lambda f: f[1], default=None)


def power_text(name: str, trivial_name: str, g: PairedStat, ratio: float) -> str:
    """``gain of a over chance at L₀ +0.48 [0.47, 0.49] → power 96``."""
    lo, hi = g.interval()
    return (f"gain of {name} over {trivial_name} at L₀ {g.mean:+.4g} [{lo:.4g}, {hi:.4g}] "
            f"→ power {ratio:.3g} ({g.method})")

