"""Claim 1 — without a position signal, (a, b) and (b, a) are the same input.

A bidirectional classifier (mean-pooled, :class:`pipelines.SequenceClassifier`) is trained per
scheme and seed on the order task of :mod:`pipelines.studies.claims.order_data` and scored on its test
samples. Beside accuracy, the swap check: the largest change of the logits when A and B trade
places in the test windows (exactly the label flip) — 0 for an encoder with no position signal.
"""

from __future__ import annotations

from typing import Any

import torch

from pipelines.studies.bootstrap import Arm
from pipelines.studies.claims.base import ClaimResult, Experiment, est, fmt
from pipelines.studies.claims.context import Child
from pipelines.studies.claims.gates import measure_gate
from pipelines.studies.claims.judge import Primary, judge_stats, verdict_reason
from pipelines.studies.tables import md_table
from pipelines.studies.verdicts import paired


@torch.no_grad()
def swap_change(module, dm, max_batches: int | None = 4) -> float:
    """max |logits(x) − logits(x with A and B swapped)| over test batches."""
    a, b = dm.pair
    worst = 0.0
    for n, batch in enumerate(dm.test_dataloader()[0]):
        if max_batches is not None and n >= max_batches:
            break
        x = batch["tokens"]
        swapped = torch.where(x == a, b, torch.where(x == b, a, x))  # (B, T)
        worst = max(worst, float((module(x) - module(swapped)).abs().max()))
    return worst


#: overrides that train the order task's classifier with a causal mask
CAUSAL = {"model": {"class_path": "pipelines.tasks.dna.classify_causal.CausalSequenceClassifier"}}


class OrderTask(Experiment):
    """Args:
    task: the task config (classifier + :class:`OrderDataModule`).
    schemes: ``configs/posenc`` names; ``none`` is the no-position reference.
    causal: schemes also trained with the causal classifier (labels ``<scheme> (causal)``).
    seeds: training seeds.
    """

    claim = (
        "Without a position signal, (a,b) and (b,a) are the same input: a bidirectional encoder "
        "without PE is at chance on an order task, one with positions is not (source 000; ALiBi's "
        "symmetric bias is direction-blind in an encoder, and sees order under a causal mask)."
    )

    def __init__(
        self, task: str, schemes: list[str], seeds: list[int] | None = None, reference: str = "none",
        causal: list[str] | None = None,
    ) -> None:
        self.task, self.seeds, self.reference = task, seeds, reference
        self.runs = {s: (s, None) for s in schemes}  # label → (scheme, overrides)
        self.runs.update({f"{s} (causal)": (s, CAUSAL) for s in causal or []})
        self.schemes = list(self.runs)

    def judge(self, ctx, acc: dict[str, list[float]], blind: bool, length: int) -> tuple[Any, str, str]:
        """Holm over every scheme − reference; (judgement, holds, rule) read from the primary comparison
        (and the reference's blindness to the swap: an exact identity, not a statistical call)."""
        ref = Arm.from_values(acc[self.reference])
        stats = {(s, self.reference, length): paired(Arm.from_values(acc[s]), ref)
                 for s in self.schemes if s != self.reference}
        j = judge_stats(stats, ctx.primary, length, True)
        if not isinstance(ctx.primary, Primary):
            return j, "inconclusive", "no primary comparison declared"
        rule = ctx.primary.rule() + f"; and {self.reference} blind to the swap (< 1e-5), else no"
        return j, ctx.primary.verdict(j.primary_calls)[0] if blind else "no", rule

    def children(self, ctx) -> list[Child]:
        return [Child(self.task, name, seed, scheme, overrides, test=True)
                for seed in ctx.seeds(self.seeds) for scheme, (name, overrides) in self.runs.items()]

    def run(self, ctx) -> ClaimResult:
        acc: dict[str, list[float]] = {s: [] for s in self.schemes}
        swap: dict[str, float] = {}
        dm = None
        for seed in ctx.seeds(self.seeds):
            for scheme, (name, overrides) in self.runs.items():
                t = ctx.train(self.task, name, seed, scheme, overrides, test=True)
                dm = t.datamodule
                acc[scheme].append(t.module.length_results()[dm.seq_len]["acc"])
                swap[scheme] = max(swap.get(scheme, 0.0), swap_change(t.module, dm, ctx.max_batches(4)))
        e = {s: est(v) for s, v in acc.items()}
        rows = [[s, fmt(e[s]), " ".join(f"{v:.3f}" for v in acc[s]), f"{swap[s]:.2g}"] for s in self.schemes]
        blind = swap[self.reference] < 1e-5
        j, holds, rule = self.judge(ctx, acc, blind, dm.seq_len)
        measured = (
            "test accuracy "
            + "; ".join(f"{s} {fmt(e[s])}" for s in self.schemes)
            + (f"; swapping A and B changes {self.reference}'s logits by {swap[self.reference]:.1g}")
        )
        result = ClaimResult(
            setup=f"is k-mer {dm.kmers[0]} before {dm.kmers[1]}? {dm.seq_len} non-overlapping "
            f"{dm.tokenizer.k}-mer tokens of E. coli, two slots overwritten; bidirectional classifier "
            f"(labels '(causal)': causal classifier), "
            f"{len(acc[self.reference])} seeds, test {dm.sizes['test']} windows",
            measured=measured,
            holds=holds,
            rule=rule,
            details=md_table(
                ["scheme", "test accuracy", "per seed", "max |Δ logits| under the A↔B swap"], rows
            ) + j.table("acc"),
            metrics={f"{s}_acc": e[s].mean for s in self.schemes},
            primary=j.summary(),
        )
        result.why = verdict_reason(ctx, j, holds) or ("" if blind else f"{self.reference} is not blind "
                                                        "to the A↔B swap: the testbed leaks order")
        self.gate_of(ctx, result, acc, j)
        return result

    @staticmethod
    def gate_of(ctx, result: ClaimResult, acc: dict[str, list[float]], j: Any) -> None:
        """The declared gate, measured: the claimed arm's accuracy over the control's, and the
        primary's interval."""
        gate = ctx.gate
        if gate is None:
            return
        gains = {arm: paired(Arm.from_values(acc[arm]), Arm.from_values(acc[gate.control]))
                 if arm in acc and gate.control in acc else None for arm in gate.gated(ctx.primary)}
        measure_gate(result, gate, gains, j.primary_stat())
