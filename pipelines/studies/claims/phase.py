"""Claim 6 as source 003 states it: a small mismatch in how RoPE's position-dependent phase is applied
makes the attention signal interfere away *over long distances*.

The mismatch is a function of the relative distance: queries and keys are rotated at θ·(1+ε), so the
q·k phase at distance i − j is off by ε·θ·(i − j) — zero for a token and its neighbour, growing with
the distance (the former probe rotated keys only, an error growing with the key's absolute position).
Positions scaled by 1 + ε do exactly this for RoPE. Two RoPE models are trained on the retrieval
testbed with the signal near (copy from ``near`` back) and far (copy from ``far`` back); each is scored
at L0 with every ε, and what is lost is read as the share of its gain over the trivial reference:
(bits_ε − bits_0) / (trivial − bits_0). The claim predicts the far model loses more at the same ε.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from pipelines.eval.bootstrap import Arm
from pipelines.eval.verdicts import holm_calls, paired
from pipelines.studies.claims.base import ClaimResult, Experiment, est, fmt
from pipelines.studies.claims.context import Child
from pipelines.studies.claims.judge import measure_gate, power_over, three_way
from pipelines.studies.tables import md_table

LN2 = math.log(2.0)


@torch.no_grad()
def bits_scaled(model: Any, batches: list[torch.Tensor], scale: float) -> float:
    """Bits/token of ``batches`` (B, T + 1) with positions 0..T−1 multiplied by ``scale`` (float64)."""
    total = count = 0.0
    for batch in batches:
        x, y = batch[:, :-1], batch[:, 1:]
        pos = torch.arange(x.shape[1], dtype=torch.float64) * scale
        logits = model(x, pos)  # (B, T, V)
        total += float(F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="sum"))
        count += y.numel()
    return total / count / LN2


class RelativePhaseMismatch(Experiment):
    """Args:
    task: the retrieval LM config; scheme: RoPE; near, far: copy distances of the two models
    (``None``: the task's own distance, so the child is shared with the other experiments);
    eps: mismatches (the first must be 0); primary_eps: the ε the verdict reads; seeds; min_effect
    (the share of the gain within which far − near is "no difference"); batches.
    """

    claim = (
        "A small q/k phase mismatch makes the attention signal destructively interfere over long "
        "distances (source 003): with the phase off by ε·θ·(i − j), a model whose signal is far loses "
        "more of its gain than one whose signal is near."
    )

    def __init__(
        self,
        task: str,
        scheme: str | dict,
        near: int,
        far: int,
        eps: list[float],
        primary_eps: float,
        seeds: list[int],
        min_effect: float,
        batches: int | None = 8,
    ) -> None:
        if not eps or eps[0] != 0 or primary_eps not in eps:
            raise ValueError("eps must start at 0 and contain primary_eps")
        self.task, self.scheme, self.near, self.far, self.eps = task, scheme, near, far, list(eps)
        self.primary_eps, self.seeds, self.batches = primary_eps, list(seeds), batches
        self.min_effect = float(min_effect)  # share of the gain: within ± it, far and near lose alike

    def child(self, seed: int, distance: int | None) -> Child:
        """The RoPE LM copying from ``distance`` back (None: the task's own distance)."""
        label = "rope" if distance is None else f"rope copy {distance} back"
        over = None if distance is None else {"data": {"init_args": {"distance": distance}}}
        return Child(self.task, self.scheme, seed, label, over, test=True)

    def children(self, ctx) -> list[Child]:
        return [self.child(seed, d) for seed in ctx.seeds(self.seeds) for d in (self.near, self.far)]

    def _lost(self, ctx, distance: int | None, seed: int) -> tuple[dict[float, float], float, float]:
        t = ctx.fit(self.child(seed, distance))
        loader = t.datamodule.test_dataloader()[0]
        n = ctx.max_batches(self.batches)
        batches = [b for i, b in enumerate(loader) if n is None or i < n]
        trivial = t.datamodule.reference(int(t.datamodule.seq_len))["trivial"]
        bits = {e: bits_scaled(t.module, batches, 1.0 + e) for e in self.eps}
        gain = trivial - bits[0.0]
        lost = {e: (bits[e] - bits[0.0]) / gain if gain > 0 else math.nan for e in self.eps}
        return lost, bits[0.0], trivial

    def run(self, ctx) -> ClaimResult:
        seeds = ctx.seeds(self.seeds)
        lost = {"near": {e: [] for e in self.eps}, "far": {e: [] for e in self.eps}}
        at0 = {"near": [], "far": []}
        trivial = math.nan
        for seed in seeds:
            for side, d in (("near", self.near), ("far", self.far)):
                got, b0, trivial = self._lost(ctx, d, seed)
                at0[side].append(b0)
                for e in self.eps:
                    lost[side][e].append(got[e])
        stats = {
            e: paired(Arm.from_values(lost["far"][e]), Arm.from_values(lost["near"][e])) for e in self.eps[1:]
        }
        calls = holm_calls(stats, higher_is_better=True)  # far − near > 0: far loses more
        rows = [
            [
                f"{e:g}",
                fmt(est(lost["near"][e])),
                fmt(est(lost["far"][e])),
                c.text(3),
                {1: "far loses more", -1: "near loses more", 0: "not called"}[c.sign],
            ]
            for e, c in calls.items()
        ]
        power, g = power_over(at0["far"], trivial, higher_is_better=False)
        holds, why = three_way(calls[self.primary_eps], "better", self.min_effect)
        pe, far = self.primary_eps, self.far or "the task's distance"
        out = ClaimResult(
            setup=f"RoPE LMs on the retrieval testbed (copy from {self.near} and from {far} back, "
            f"L0 = 32), {len(seeds)} seeds; scored at L0 with positions ×(1+ε): phase off by ε·θ·(i − j)",
            measured=f"share of the gain over trivial lost at ε = {pe:g}: near {fmt(est(lost['near'][pe]))}, "
            f"far {fmt(est(lost['far'][pe]))}",
            holds=holds,
            rule=f"yes if, at ε = {pe:g} (declared primary), far − near share lost is called > 0 after Holm "
            f"over the {len(calls)} ε (paired over seeds); no if called < 0 or its interval lies within "
            f"±{self.min_effect:g}; inconclusive otherwise; the other ε are reported",
            details=md_table(
                ["ε", "near: share of gain lost", "far: share of gain lost", "far − near", "call"], rows
            )
            + f"\nBits/token at ε = 0: near {fmt(est(at0['near']))}, far {fmt(est(at0['far']))}; trivial "
            f"{trivial:.3f}.\n",
            metrics={
                "power_far": power,
                **{
                    f"eps{e:g}_far_minus_near": est(lost["far"][e]).mean - est(lost["near"][e]).mean
                    for e in self.eps[1:]
                },
            },
        )
        out.why = why
        measure_gate(out, ctx.gate, None, calls[self.primary_eps].stat)  # control: none (gate.why)
        out.primary = f"far − near at ε = {pe:g}: {calls[pe].text(3)} (Holm over {len(calls)})"
        return out
