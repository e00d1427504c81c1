"""How a claim's verdict is called (see :mod:`pipelines.studies.verdicts` for the arithmetic).

* Every claim declares ONE primary measurement in its config before the run (``primary:``): for a
  claim judged on paired comparisons over seeds, a mapping ``{a, b, length, expect, min_effect}``
  (condition labels; ``length`` omitted = the training length; ``min_effect`` the smallest difference
  that matters, in the metric's units); otherwise a sentence naming the measurement.
* Every paired call an experiment makes is one member of its family: Holm-adjusted together
  (:class:`Judgement`); the verdict is three-way (:func:`three_way`), read from
  the primary call's adjusted interval: yes, no (opposite called, or within ± min_effect), or
  inconclusive with the reason.
* A trained claim declares its **gate** (``gate:`` — :class:`Gate`): the claimed arm, the position-free
  control, the smallest gain of one over the other the testbed must show, and the widest the primary's
  95 % interval may be; a verdict whose testbed misses it is inconclusive, with the reason.
* Seeds: :data:`CLAIM_SEEDS` unless a config lists others; ``--quick`` keeps :data:`QUICK_SEEDS` and
  :data:`QUICK_STEPS` of the training steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.studies.bootstrap import Arm
from pipelines.studies.tables import md_table
from pipelines.studies.verdicts import LEVEL, Call, PairedStat, gain, holm_calls, power
from posenc import PosencError

# ----------------------------------------------------------------------------- three-way verdicts
YES, NO, INCONCLUSIVE = "yes", "no", "inconclusive"
EXPECT = ("better", "worse", "differ")


def three_way(call: Call | None, expect: str, margin: float) -> tuple[str, str]:
    """(verdict, reason) of a primary comparison ``a − b`` after Holm.

    * ``yes``: the expected direction is called (``expect`` better/worse: that side; ``differ``: either);
    * ``no``: the opposite direction is called, or the whole interval (at the Holm level) lies within
      ±``margin`` (the claim's declared minimum effect, in the metric's units): an equivalence;
    * ``inconclusive``: everything else — not called and the interval reaches past ±``margin``, or the
      comparison is undefined.
    """
    if expect not in EXPECT:
        raise ValueError(f"expect must be one of {EXPECT}, got {expect!r}")
    if call is None or not (math.isfinite(call.lo) and math.isfinite(call.hi)):
        return INCONCLUSIVE, "the primary comparison is undefined (an arm is missing or has no interval)"
    want = {"better": 1, "worse": -1, "differ": call.sign}[expect]
    where = f"[{call.lo:+.4g}, {call.hi:+.4g}] at level {call.level:.4g}"
    if call.sign != 0 and call.sign == want:
        return YES, f"called {'better' if call.sign == 1 else 'worse'} in the expected direction: {where}"
    if call.sign != 0:
        return NO, f"the opposite direction is called: {where}"
    if -margin <= call.lo and call.hi <= margin:
        return NO, f"not called and the interval {where} lies within ±{margin:g} (the minimum effect)"
    return INCONCLUSIVE, (f"not called (p_adj {call.p_adj:.2g}) and the interval {where} reaches past "
                          f"±{margin:g} (the minimum effect): neither an effect nor its absence is shown")


def gate_reason(gain_over_control: PairedStat | None, min_gain: float, primary: PairedStat | None,
                max_width: float, level: float = LEVEL) -> str:
    """Why a testbed cannot carry a verdict (``""``: it can). It can when the claimed arm's gain over the
    position-free control has its lower ``level`` bound at or above ``min_gain`` (the testbed rewards
    position at all), and the primary comparison's ``level`` interval is at most ``max_width`` wide."""
    why = []
    if gain_over_control is not None:
        lo, hi = gain_over_control.interval(level)
        if not lo >= min_gain:
            why.append(f"the claimed arm's gain over the control {gain_over_control.mean:+.4g} "
                       f"[{lo:+.4g}, {hi:+.4g}] has its lower bound below {min_gain:g}")
    if primary is not None:
        lo, hi = primary.interval(level)
        if not math.isfinite(hi - lo):
            why.append(f"the primary has no {level:.0%} interval (undefined, or one seed)")
        elif not hi - lo <= max_width:
            why.append(f"the primary's {level:.0%} interval [{lo:+.4g}, {hi:+.4g}] is wider than "
                       f"{max_width:g}")
    return "; ".join(why)

CLAIM_SEEDS = (0, 1, 2, 3, 4)  # the claims' default seeds (≥ 5: issue 26)
QUICK_SEEDS = 3  # seeds kept by --quick (the table says so)
QUICK_STEPS = 0.5  # the fraction of each child's training steps --quick keeps (trainer.limit_train_batches)
Key = tuple[str, str, int]  # (a, b, length): the paired difference a − b at length



@dataclass(frozen=True)
class Primary:
    """The declared primary comparison ``a − b`` at ``length`` (None: the training length), what the
    claim expects of it (``a`` called better than ``b``, worse, or either: differ) and the minimum
    effect (metric units) within which "no difference" is a "no"."""

    a: str
    b: str
    length: int | None = None
    expect: str = "better"
    min_effect: float = 0.0

    def key(self, train_length: int) -> Key:
        return (self.a, self.b, self.length or train_length)

    def text(self) -> str:
        at = f" at L = {self.length}" if self.length else " at L₀"
        return f"{self.a} − {self.b}{at} (expected: {self.a} {self.expect}" + (
            f" than {self.b})" if self.expect != "differ" else f" from {self.b})")

    def verdict(self, call: Call | None) -> tuple[str, str]:
        """(yes | no | inconclusive, reason) of the primary call after Holm (:func:`three_way`)."""
        return three_way(call, self.expect, self.min_effect)

    def rule(self) -> str:
        """The verdict rule in words."""
        return (f"yes if the primary comparison {self.text()} is called so after Holm over all of the "
                "experiment's paired calls (its adjusted interval on that side of 0, adjusted p < 0.05); "
                f"no if the opposite is called or its adjusted interval lies within ±{self.min_effect:g} "
                "(the declared minimum effect); inconclusive otherwise; the other comparisons are "
                "reported, not used")


def parse_primary(value: Any, where: str) -> Primary | str:
    """The config's ``primary``: a :class:`Primary` from ``{a, b, min_effect[, length, expect]}``, or a
    sentence."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    keys = {"a", "b", "length", "expect", "min_effect"}
    if isinstance(value, Mapping) and {"a", "b", "min_effect"} <= set(value) <= keys:
        length, expect, margin = value.get("length"), value.get("expect", "better"), value["min_effect"]
        if length is not None and (not isinstance(length, int) or length < 1):
            raise PosencError(f"{where}: primary.length must be a positive integer, got {length!r}")
        if expect not in EXPECT:
            raise PosencError(f"{where}: primary.expect must be one of {', '.join(EXPECT)}, got {expect!r}")
        margin = _nonneg(margin, where, "primary.min_effect")
        return Primary(str(value["a"]), str(value["b"]), length, expect, margin)
    raise PosencError(f"{where}: primary must be {{a: <label>, b: <label>, min_effect: <number>, length: "
                      f"<int>, expect: better|worse|differ}} (length, expect optional) or a sentence, got "
                      f"{value!r}")


def _nonneg(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise PosencError(f"{where}: {key} must be a number ≥ 0 (the metric's units), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Gate:
    """The declared gate: the claimed ``arm``'s gain over the position-free ``control`` at ``length``
    (None: the primary's length) must have its lower 95 % bound ≥ ``min_gain``, and the primary's 95 %
    interval must be at most ``max_width`` wide (both in the metric's units). ``control`` None: the
    claim has no position-free arm (``why`` says so) and only the width is gated."""

    max_width: float
    arm: str | None = None
    control: str | None = None
    min_gain: float = 0.0
    length: int | None = None
    why: str = ""

    def text(self) -> str:
        arm = self.arm or "the primary's a"
        head = (f"gain of {arm} over {self.control} ≥ {self.min_gain:g} (lower 95 % bound)" if self.control
                else f"no position-free control ({self.why})")
        return f"{head}; primary's 95 % interval ≤ {self.max_width:g} wide"

    def reason(self, gain_over_control: PairedStat | None, primary: PairedStat | None) -> str:
        """Why the testbed cannot carry the verdict (``""``: it can); an unmeasured quantity fails."""
        missing = [what for what, x, need in (("the gain over the control", gain_over_control, self.control),
                                              ("the primary", primary, True)) if need and x is None]
        if missing:
            return " and ".join(missing) + " not measured"
        gain_stat = gain_over_control if self.control else None
        return gate_reason(gain_stat, self.min_gain, primary, self.max_width)


def parse_gate(value: Any, where: str) -> Gate:
    """The config's ``gate``: ``{max_width, control, min_gain[, arm, length]}`` or ``{max_width, control:
    null, why}``."""
    keys = {"arm", "control", "min_gain", "length", "max_width", "why"}
    if not isinstance(value, Mapping) or not {"max_width", "control"} <= set(value) <= keys:
        raise PosencError(f"{where}: gate must be {{control: <label>, min_gain: <number>, max_width: "
                          "<number>[, arm, length]} or {control: null, why: <sentence>, max_width: "
                          f"<number>}}, got {value!r}")
    control = value["control"]
    if control is None and not str(value.get("why", "")).strip():
        raise PosencError(f"{where}: gate.control null needs gate.why (why there is no position-free arm)")
    if control is not None and "min_gain" not in value:
        raise PosencError(f"{where}: gate.min_gain missing (the gain over {control} the testbed must show)")
    length = value.get("length")
    if length is not None and (not isinstance(length, int) or length < 1):
        raise PosencError(f"{where}: gate.length must be a positive integer, got {length!r}")
    return Gate(_nonneg(value["max_width"], where, "gate.max_width"),
                None if value.get("arm") is None else str(value["arm"]),
                None if control is None else str(control), _nonneg(value.get("min_gain", 0.0), where,
                "gate.min_gain"), length, str(value.get("why", "")).strip())


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


def verdict_reason(ctx, j: Judgement | None, holds: str) -> str:
    """Why the primary comparison gave ``holds`` (``""`` when ``holds`` is not the primary's verdict)."""
    if j is None or not isinstance(ctx.primary, Primary):
        return ""
    verdict, reason = ctx.primary.verdict(j.primary)
    return reason if verdict == holds else ""



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
    """Power of one arm (one value per seed) against a constant baseline (e.g. R² 0, chance 0.5)."""
    g = gain(Arm.from_values(values), Arm.from_values([trivial] * len(values)), higher_is_better)
    return power(g), g


def power_text(name: str, control: str, g: PairedStat, ratio: float) -> str:
    """``gain of rope over nope at 32 +0.48 [0.47, 0.49] → power 96``."""
    lo, hi = g.interval()
    return (f"gain of {name} over {control} {g.mean:+.4g} [{lo:.4g}, {hi:.4g}] "
            f"→ power {ratio:.3g} ({g.method})")


def measure_gate(result: Any, gate: Gate | None, gain_over_control: PairedStat | None,
                 primary: PairedStat | None, arm: str = "") -> None:
    """Record on ``result`` the declared gate, the measured gain over the control (as a power, reported)
    and why the testbed misses the gate (``gate_failed``; ``""``: it passes). No gate declared: the
    runner reports the verdict inconclusive ("no gate declared")."""
    if gate is None:
        return
    result.gate = gate.text()
    result.gate_failed = gate.reason(gain_over_control, primary)
    if gain_over_control is not None and gate.control:
        result.power = power(gain_over_control)
        result.power_text = power_text(arm or gate.arm or "the claimed arm", gate.control, gain_over_control,
                                       result.power)
