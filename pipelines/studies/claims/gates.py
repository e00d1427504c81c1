"""The gate a trained claim declares before its run (``gate:`` in its config): whether its testbed can
carry a verdict at all.

* **Every arm the primary compares** must beat the position-free ``control`` at the gate's length: the
  lower 95 % bound of each arm's gain over the control at least ``min_gain``; the weakest arm decides
  (a comparison between a trained arm and a half-trained one says nothing about the encodings). An arm
  the claim itself predicts to carry no usable position (the control periods of claim 3, an untrained
  reference, …) is left out only by name, with the reason (``exclude``); a primary over pooled arms
  names its component arms (``arms``).
* Optionally, every gated arm must also beat the task's **trivial baseline** (seasonal naive for the
  forecasters) by ``baseline_gain``: a forecaster no better than repeating the last season is no
  testbed for an encoding.
* The primary's 95 % interval must be at most ``max_width`` wide.

A claim with no position-free arm says why (``control: null``, ``why``) and is gated on the width alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.studies.verdicts import LEVEL, PairedStat, power
from posenc import PosencError


def gate_reason(gain_over_control: PairedStat | None, min_gain: float, primary: PairedStat | None,
                max_width: float, level: float = LEVEL, name: str = "the claimed arm",
                over: str = "the control") -> str:
    """Why a testbed cannot carry a verdict (``""``: it can), for one arm: its gain over the control has
    its lower ``level`` bound at or above ``min_gain``, and the primary comparison's ``level`` interval
    is at most ``max_width`` wide (either may be None: not checked)."""
    why = []
    if gain_over_control is not None:
        lo, hi = gain_over_control.interval(level)
        if not lo >= min_gain:
            why.append(f"the gain of {name} over {over} {gain_over_control.mean:+.4g} "
                       f"[{lo:+.4g}, {hi:+.4g}] has its lower bound below {min_gain:g}")
    if primary is not None:
        lo, hi = primary.interval(level)
        if not math.isfinite(hi - lo):
            why.append(f"the primary has no {level:.0%} interval (undefined, or one seed)")
        elif not hi - lo <= max_width:
            why.append(f"the primary's {level:.0%} interval [{lo:+.4g}, {hi:+.4g}] is wider than "
                       f"{max_width:g}")
    return "; ".join(why)


@dataclass(frozen=True)
class Gate:
    """The declared gate (see the module's docstring); gains and widths in the metric's units."""

    max_width: float
    control: str | None = None
    min_gain: float = 0.0
    length: int | None = None
    why: str = ""
    arms: tuple[str, ...] = ()  # explicit arms (a primary over pooled arms); default: the primary's
    exclude: tuple[tuple[str, str], ...] = ()  # (arm, why) of the primary's arms not gated
    baseline_gain: float | None = None  # each gated arm's gain over the task's trivial baseline

    def gated(self, primary: Any) -> list[str]:
        """The arms this gate reads: ``arms``, else every label the primary compares, less the control
        and the excluded ones (none without a control)."""
        if self.control is None:
            return []
        labels = list(self.arms) or list(getattr(primary, "labels", lambda: [])())
        skip = {self.control, *(a for a, _ in self.exclude)}
        return [a for a in labels if a not in skip]

    def text(self, arms: Sequence[str] = ()) -> str:
        if not self.control:
            return f"no position-free control ({self.why}); primary's 95 % interval ≤ {self.max_width:g} wide"
        which = ", ".join(arms) or "the primary's arms"
        head = (f"gain over {self.control} ≥ {self.min_gain:g} (lower 95 % bound) for every arm the "
                f"primary compares ({which}; the weakest decides)")
        if self.exclude:
            head += "; not gated: " + "; ".join(f"{a} ({why})" for a, why in self.exclude)
        if self.baseline_gain is not None:
            head += f"; each also over the task's trivial baseline ≥ {self.baseline_gain:g}"
        return f"{head}; primary's 95 % interval ≤ {self.max_width:g} wide"

    def reason(self, gains: Mapping[str, PairedStat | None], primary: PairedStat | None,
               baseline: Mapping[str, PairedStat | None] | None = None, baseline_name: str = "") -> str:
        """Why the testbed cannot carry the verdict (``""``: it can); an unmeasured quantity fails."""
        missing = [f"the gain of {a} over {self.control}" for a, g in gains.items() if g is None]
        if self.control and not gains:
            missing.append(f"the gain over {self.control} (no arm to gate)")
        if self.baseline_gain is not None:
            found = baseline or {}
            missing += [f"the gain of {a} over the trivial baseline" for a in gains if found.get(a) is None]
        if primary is None:
            missing.append("the primary")
        if missing:
            return " and ".join(missing) + " not measured"
        why = [gate_reason(g, self.min_gain, None, math.inf, name=a, over=str(self.control))
               for a, g in gains.items()]
        if self.baseline_gain is not None:
            why += [gate_reason(g, self.baseline_gain, None, math.inf, name=a, over=baseline_name or
                                "the trivial baseline") for a, g in (baseline or {}).items() if a in gains]
        why.append(gate_reason(None, 0.0, primary, self.max_width))
        return "; ".join(w for w in why if w)


def weakest(gains: Mapping[str, PairedStat | None]) -> tuple[str, PairedStat] | None:
    """The arm whose gain has the lowest lower 95 % bound (None if any gain is missing)."""
    if not gains or any(g is None for g in gains.values()):
        return None
    return min(gains.items(), key=lambda kv: kv[1].interval()[0])


def parse_gate(value: Any, where: str) -> Gate:
    """The config's ``gate``: ``{max_width, control, min_gain[, length, arms, exclude, baseline_gain]}`` or
    ``{max_width, control: null, why}``."""
    keys = {"control", "min_gain", "length", "max_width", "why", "arms", "exclude", "baseline_gain"}
    if not isinstance(value, Mapping) or not {"max_width", "control"} <= set(value) <= keys:
        raise PosencError(f"{where}: gate must be {{control: <label>, min_gain: <number>, max_width: "
                          "<number>[, length, arms: [<label>...], exclude: {<label>: <why>}, baseline_gain]} "
                          f"or {{control: null, why: <sentence>, max_width: <number>}}, got {value!r}")
    control = value["control"]
    if control is None and not str(value.get("why", "")).strip():
        raise PosencError(f"{where}: gate.control null needs gate.why (why there is no position-free arm)")
    if control is not None and "min_gain" not in value:
        raise PosencError(f"{where}: gate.min_gain missing (the gain over {control} the testbed must show)")
    length = value.get("length")
    if length is not None and (not isinstance(length, int) or length < 1):
        raise PosencError(f"{where}: gate.length must be a positive integer, got {length!r}")
    arms, exclude = value.get("arms") or [], value.get("exclude") or {}
    if not isinstance(arms, list) or not all(isinstance(a, str) for a in arms):
        raise PosencError(f"{where}: gate.arms must be a list of condition labels, got {arms!r}")
    if not isinstance(exclude, Mapping) or not all(str(w).strip() for w in exclude.values()):
        raise PosencError(f"{where}: gate.exclude must map each arm left out to why, got {exclude!r}")
    baseline = value.get("baseline_gain")
    return Gate(nonneg(value["max_width"], where, "gate.max_width"),
                None if control is None else str(control),
                nonneg(value.get("min_gain", 0.0), where, "gate.min_gain"), length,
                str(value.get("why", "")).strip(), tuple(arms),
                tuple((str(a), " ".join(str(w).split())) for a, w in exclude.items()),
                None if baseline is None else nonneg(baseline, where, "gate.baseline_gain"))


def nonneg(value: Any, where: str, key: str) -> float:
    """``value`` as a float ≥ 0, or a one-line error naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise PosencError(f"{where}: {key} must be a number ≥ 0 (the metric's units), got {value!r}")
    return float(value)


def measure_gate(result: Any, gate: Gate | None, gains: Mapping[str, PairedStat | None],
                 primary: PairedStat | None, baseline: Mapping[str, PairedStat | None] | None = None,
                 where: str = "", baseline_name: str = "") -> None:
    """Record on ``result`` the declared gate, its weakest arm's gain over the control (as a power,
    reported) and why the testbed misses the gate (``gate_failed``; ``""``: it passes). ``gains``: each
    gated arm's gain over the control (``where``: at what length). No gate declared: the runner reports
    the verdict inconclusive ("no gate declared")."""
    if gate is None:
        return
    result.gate = gate.text(list(gains))
    result.gate_failed = gate.reason(gains, primary, baseline, baseline_name)
    found = weakest(gains) if gate.control else None
    if found is not None:
        arm, g = found
        result.power = power(g)
        lo, hi = g.interval()
        of = f" (the weakest of {len(gains)} arms)" if len(gains) > 1 else ""
        result.power_text = (f"gain of {arm}{' at ' + where if where else ''} over {gate.control} "
                             f"{g.mean:+.4g} [{lo:.4g}, {hi:.4g}] → power {result.power:.3g}{of} "
                             f"({g.method})")
