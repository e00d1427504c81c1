"""Claim 12 as a learning-speed claim: "directional rules are easier to learn with a relative bias".

"Easier to learn" is read as *sooner*: every arm trains for the same largest budget with its validation
accuracy read every ``every`` steps (:class:`CriterionSteps`); its steps-to-criterion is the first step
at which that accuracy reaches ``threshold``. An arm that never gets there within the budget is
censored at budget + ``every`` (a lower bound on its true value, so a difference against it is
conservative for the arm that did reach it). The accuracy curve over every budget is reported beside
it, so a reader sees each budget's answer, not just the criterion's.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from pipelines.studies.bootstrap import Arm
from pipelines.studies.claims.base import ClaimResult, Experiment, est, fmt
from pipelines.studies.claims.context import Child, _merge
from pipelines.studies.claims.gates import measure_gate
from pipelines.studies.claims.judge import QUICK_STEPS, judge_stats, verdict_reason
from pipelines.studies.claims.trained import primary_verdict
from pipelines.studies.tables import md_table
from pipelines.studies.verdicts import gain, paired


class CriterionSteps(L.Callback):
    """Records ``module.criterion_curve`` ([(step, value), ...]) of ``metric`` at every validation,
    and ``module.criterion_step``, the first step at which it reached ``threshold`` (None: never)."""

    def __init__(self, metric: str = "val/acc", threshold: float = 0.9) -> None:
        self.metric, self.threshold = metric, float(threshold)

    def on_validation_end(self, trainer: L.Trainer, module: Any) -> None:
        if trainer.sanity_checking or self.metric not in trainer.callback_metrics:
            return
        value = float(trainer.callback_metrics[self.metric])
        curve = module.__dict__.setdefault("criterion_curve", [])
        curve.append((int(trainer.global_step), value))
        if value >= self.threshold and module.__dict__.get("criterion_step") is None:
            module.criterion_step = int(trainer.global_step)


class StepsToCriterion(Experiment):
    """Args: claim_text; task (a classifier config); task_name; conditions (label → ``{scheme, overrides}``);
    seeds; budget (training steps, the largest budget); every (steps between readings); batch (the
    task's batch size: samples per epoch = budget × batch); metric, threshold (the criterion)."""

    def __init__(self, claim_text: str, task: str, task_name: str, conditions: dict[str, dict],
                 seeds: list[int], budget: int, every: int, batch: int, metric: str = "val/acc",
                 threshold: float = 0.9) -> None:
        self.claim_text, self.task, self.task_name = claim_text, task, task_name
        self.conditions, self.seeds = conditions, list(seeds)
        self.budget, self.every, self.batch = int(budget), int(every), int(batch)
        self.metric, self.threshold = metric, float(threshold)

    @property
    def claim(self) -> str:  # type: ignore[override]
        return self.claim_text

    def child(self, seed: int, label: str) -> Child:
        cond = self.conditions[label]
        over = _merge(cond.get("overrides") or {}, {
            "data": {"init_args": {"loader": {"samples_per_epoch": self.budget * self.batch}}},
            # every ``every`` global steps (None: not tied to an epoch's length, so a smoke run's two
            # batches simply validate never)
            "trainer": {"val_check_interval": self.every, "check_val_every_n_epoch": None, "callbacks": [{
                "class_path": f"{__name__}.CriterionSteps",
                "init_args": {"metric": self.metric, "threshold": self.threshold}}]}})
        return Child(self.task, cond.get("scheme"), seed, label, over)

    def children(self, ctx) -> list[Child]:
        return [self.child(seed, label) for seed in ctx.seeds(self.seeds) for label in self.conditions]

    def trained_steps(self, ctx) -> int:
        """The largest budget as trained (``--quick`` trains a fraction of every child's steps)."""
        return int(self.budget * QUICK_STEPS) if ctx.quick else self.budget

    def _measure(self, ctx) -> tuple[dict[str, list[float]], dict[str, list[list]]]:
        steps: dict[str, list[float]] = {c: [] for c in self.conditions}
        curves: dict[str, list[list]] = {c: [] for c in self.conditions}
        censored = self.trained_steps(ctx) + self.every
        for seed in ctx.seeds(self.seeds):
            for label in self.conditions:
                module = ctx.fit(self.child(seed, label)).module
                step = module.__dict__.get("criterion_step")
                steps[label].append(float(censored if step is None else step))
                curves[label].append(module.__dict__.get("criterion_curve", []))
        return steps, curves

    def run(self, ctx) -> ClaimResult:
        steps, curves = self._measure(ctx)
        arms = {c: Arm.from_values(v) for c, v in steps.items()}
        ref = ctx.primary.b if hasattr(ctx.primary, "b") else next(iter(self.conditions))
        stats = {(c, ref, self.budget): paired(arms[c], arms[ref]) for c in self.conditions if c != ref}
        j = judge_stats(stats, ctx.primary, self.budget, higher_is_better=False)  # fewer steps: better
        holds, rule = primary_verdict(ctx, j)
        censored = self.trained_steps(ctx) + self.every
        budget = censored - self.every
        measured = (f"steps to {self.metric} ≥ {self.threshold:g} (not reached within {budget}: "
                    f"{censored}): " + "; ".join(
                        f"{c} {fmt(est(v), 4)}, reached in {sum(x < censored for x in v)}/{len(v)} seeds"
                        for c, v in steps.items()))
        out = ClaimResult(
            setup=f"{self.task_name}; {', '.join(self.conditions)}; {len(steps[ref])} seeds, each trained "
            f"{budget} steps with {self.metric} read every {self.every}",
            measured=measured, holds=holds, rule=rule,
            details=self.tables(steps, curves) + j.table("steps"), primary=j.summary(),
            metrics={f"{c}/steps": est(v).mean for c, v in steps.items()},
        )
        out.why = verdict_reason(ctx, j, holds)
        gate = ctx.gate
        gains = {} if gate is None else {
            a: gain(arms[a], arms[gate.control], higher_is_better=False) if a in arms and gate.control in arms
            else None for a in gate.gated(ctx.primary)}
        measure_gate(out, gate, gains, j.primary_stat())
        return out

    def tables(self, steps: dict[str, list[float]], curves: dict[str, list[list]]) -> str:
        """Steps per seed, and the mean accuracy curve (every budget) per arm."""
        rows = [[c, fmt(est(v), 4), " ".join(f"{x:.0f}" for x in v)] for c, v in steps.items()]
        text = md_table(["scheme", "steps to criterion", "per seed"], rows)
        budgets = sorted({s for cs in curves.values() for curve in cs for s, _ in curve})
        head = ["scheme", *(str(b) for b in budgets)]
        mean_rows = []
        for c, cs in curves.items():
            at = [[v for curve in cs for s, v in curve if s == b] for b in budgets]
            mean_rows.append([c, *(f"{sum(a) / len(a):.2f}" if a else "—" for a in at)])
        return (text + f"\nMean {self.metric} over seeds after each budget (steps):\n\n"
                + md_table(head, mean_rows))
