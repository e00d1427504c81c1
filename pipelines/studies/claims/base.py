"""What every claim experiment shares: its result, its context (MLflow parent run, output folder,
budget), and the base class the experiment modules derive from.

An experiment is a class with ``claim`` (the literature's claim, one sentence) and
:meth:`Experiment.run`, built from ``configs/experiments/<name>.yaml`` (``class_path`` /
``init_args``). It returns a :class:`ClaimResult`: the table row (setup, measured, holds?) and the
details written to ``docs/claims.md``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pipelines.eval.statistics import Estimate, estimate

Verdict = Literal["yes", "no", "partly", "inconclusive"]


@dataclass
class ClaimResult:
    """One row of the claims table and what backs it.

    Attributes:
        setup: what was trained and measured, in one or two sentences.
        measured: the numbers (mean ± 95 % Student-t half-width over seeds where there are seeds).
        holds: ``yes``, ``no``, ``inconclusive`` (or ``partly`` for a two-part probe) — decided from
            the measurements by the experiment's rule — or ``inconclusive`` when the runner's gate
            overrides it.
        rule: the rule that decided ``holds``, in words.
        why: the reason for ``holds`` (always given for ``inconclusive``).
        power: the claimed arm's gain over the position-free control / half-width of its 95 % interval
            (reported; the gate reads the gain's lower bound).
        power_text: how the power was measured (arm, control, gain, interval, method).
        gate: the declared gate, in words (``""``: none declared).
        gate_failed: why the testbed misses the gate (``""``: it passes; None: not measured).
        primary: the declared primary comparison and its Holm-adjusted result.
        raw_holds: the rule's verdict before the gate.
        details: Markdown tables with every number the row summarises.
        figures: PNG paths written by the experiment.
        metrics: flat numbers logged to the parent MLflow run.
    """

    setup: str
    measured: str
    holds: Verdict
    rule: str
    details: str = ""
    figures: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    why: str = ""
    power: float | None = None
    power_text: str = ""
    gate: str = ""
    gate_failed: str | None = None
    primary: str = ""
    raw_holds: str = ""
    name: str = ""
    claim: str = ""
    short: str = ""  # the claim in a few words (the config's ``short``: docs/results.md's table)
    headline: str = ""  # what the data show, in words, where the verdict alone would mislead
    number: str = ""
    command: str = ""
    wall_s: float = math.nan
    cpu_s: float = math.nan
    children: list[str] = field(default_factory=list)

    def to_json(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, default=str))


class Experiment:
    """Base of the claim experiments: subclasses set ``claim`` and implement :meth:`run`; one that
    trains nothing (or measures an exact identity) says why in ``power_exempt`` (no gate)."""

    claim: ClassVar[str] = ""
    power_exempt: ClassVar[str] = ""

    def run(self, ctx: Any) -> ClaimResult:
        raise NotImplementedError

    def children(self, ctx: Any) -> list[Any]:
        """The trainings :meth:`run` asks ``ctx.train`` for, in the order it asks
        (:class:`~pipelines.studies.claims.context.Child`); ``--jobs N`` trains them ahead in workers
        (one left out is trained in the main process when asked for, so a miss costs time, not
        correctness). Default: none."""
        return []


def est(values: Sequence[float]) -> Estimate:
    """:func:`pipelines.eval.statistics.estimate` of the finite values (NaN estimate if none)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    return estimate(finite) if finite else estimate([math.nan])


def fmt(e: Estimate, digits: int = 3) -> str:
    """``mean ± half-width (n)``; a single value without an interval; ``undefined`` for NaN."""
    if not math.isfinite(e.mean):
        return "undefined"
    return f"{e.text(digits)}" + (f" (n={e.n})" if e.n > 1 else "")
