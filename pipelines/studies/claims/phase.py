"""Claim 6 as source 003 states it: RoPE works because queries and keys are rotated *by the same rule*;
a small mismatch in how the position-dependent phase is applied to the query and to the key makes the
attention signal interfere away over long distances.

The primary breaks that symmetry: keys rotated at θ·(1+ε), queries as trained at θ. The q·k phase
of query i and key j is then θ·(i − j) − ε·θ·j: off by an error that grows with the key's position
along the sequence. One trained RoPE model (the retrieval testbed, copy from ``near`` back) is scored
at L0 with every ε on two groups of targets: the first ``span`` that have something to copy (keys
near the start) and the last ``span`` (keys far along). What each group loses is read as the share
of its own gain over the trivial reference: (bits_ε − bits_0) / (trivial − bits_0); the claim
predicts the far targets lose more at the same ε.

The neighbour, reported beside it: positions scaled by 1 + ε for queries and keys alike, i.e. the
phase off by ε·θ·(i − j) — a symmetric error that grows with the relative distance — on two models
with the signal near (copy from ``near`` back) and far (from ``far`` back).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from pipelines.studies.bootstrap import Arm
from pipelines.studies.claims.base import ClaimResult, Experiment, est, fmt
from pipelines.studies.claims.context import Child
from pipelines.studies.claims.gates import measure_gate
from pipelines.studies.claims.judge import power_over, three_way
from pipelines.studies.tables import md_table
from pipelines.studies.verdicts import holm_calls, paired
from posenc import PositionalEncoding

LN2 = math.log(2.0)


@contextmanager
def keys_rotated_at(model: Any, scale: float) -> Iterator[None]:
    """Within the block, every encoding of ``model`` rotates keys at positions × ``scale`` and queries
    at their own positions (an instance attribute shadows the class's ``rotate``; removed on exit)."""
    encodings = {id(m): m for m in model.modules() if isinstance(m, PositionalEncoding)}.values()
    for pe in encodings:
        plain = type(pe).rotate.__get__(pe)
        pe.rotate = lambda q, k, q_pos, k_pos, plain=plain: plain(q, k, q_pos, k_pos * scale)
    try:
        yield
    finally:
        for pe in encodings:
            del pe.rotate


@torch.no_grad()
def bits_by_position(model: Any, batches: list[torch.Tensor], scale: float = 1.0) -> np.ndarray:
    """Bits/token of ``batches`` (B, T + 1) per target position (T,), positions 0..T−1 × ``scale``
    (float64) for queries and keys alike."""
    total, count = None, 0
    for batch in batches:
        x, y = batch[:, :-1], batch[:, 1:]
        pos = torch.arange(x.shape[1], dtype=torch.float64) * scale
        logits = model(x, pos)  # (B, T, V)
        nll = F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none").sum(0)  # (T,)
        total = nll if total is None else total + nll
        count += y.shape[0]
    return (total / count / LN2).double().numpy()


def bits_scaled(model: Any, batches: list[torch.Tensor], scale: float) -> float:
    """Bits/token of ``batches`` (B, T + 1) with positions 0..T−1 multiplied by ``scale`` (float64)."""
    return float(bits_by_position(model, batches, scale).mean())


def share_lost(bits: np.ndarray, bits0: np.ndarray, trivial: float) -> float:
    """(bits − bits₀) / (trivial − bits₀) of the mean over a group of targets (NaN without a gain)."""
    gain = trivial - float(bits0.mean())
    return (float(bits.mean()) - float(bits0.mean())) / gain if gain > 0 else math.nan


class RelativePhaseMismatch(Experiment):
    """Args:
    task: the retrieval LM config; scheme: RoPE; near, far: copy distances of the two models (the
    primary scores the ``near`` one); eps: mismatches (the first must be 0); primary_eps: the ε the
    verdict reads; seeds; min_effect (the share of the gain within which far − near is "no
    difference"); batches; span: targets in each of the primary's near and far groups.
    """

    claim = (
        "RoPE needs queries and keys rotated by the same rule: a small mismatch in how the phase is "
        "applied to them makes the attention signal destructively interfere over long distances "
        "(source 003) — with keys rotated at θ·(1+ε) and queries at θ, targets whose keys lie far along "
        "the sequence lose more of their gain than targets near its start."
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
        span: int = 8,
    ) -> None:
        if not eps or eps[0] != 0 or primary_eps not in eps:
            raise ValueError("eps must start at 0 and contain primary_eps")
        self.task, self.scheme, self.near, self.far, self.eps = task, scheme, near, far, list(eps)
        self.primary_eps, self.seeds, self.batches, self.span = primary_eps, list(seeds), batches, int(span)
        self.min_effect = float(min_effect)  # share of the gain: within ± it, far and near lose alike

    def child(self, seed: int, distance: int) -> Child:
        """The RoPE LM copying from ``distance`` back."""
        over = {"data": {"init_args": {"process": {"distance": distance}}}}
        return Child(self.task, self.scheme, seed, f"rope copy {distance} back", over, test=True)

    def children(self, ctx) -> list[Child]:
        return [self.child(seed, d) for seed in ctx.seeds(self.seeds) for d in (self.near, self.far)]

    def _trained(self, ctx, distance: int, seed: int) -> tuple[Any, list[torch.Tensor], float]:
        t = ctx.fit(self.child(seed, distance))
        n = ctx.max_batches(self.batches)
        batches = [b for i, b in enumerate(t.datamodule.test_dataloader()[0]) if n is None or i < n]
        return t.module, batches, t.datamodule.reference(int(t.datamodule.seq_len))["trivial"]

    def _asymmetric(self, model: Any, batches: list[torch.Tensor], trivial: float,
                    plain: np.ndarray) -> dict[str, float]:
        """Share lost by the first and the last ``span`` targets with something to copy, per ε (keys
        at θ·(1+ε); ε = 0 is ``plain``, the model's own bits per position), and their bits at ε = 0."""
        bits = {0.0: plain}
        for e in self.eps[1:]:
            with keys_rotated_at(model, 1.0 + e):
                bits[e] = bits_by_position(model, batches)  # (T,)
        T = len(bits[0.0])
        groups = {"near": slice(self.near - 1, self.near - 1 + self.span), "far": slice(T - self.span, T)}
        out = {f"{g}@{e:g}": share_lost(bits[e][s], bits[0.0][s], trivial)
               for g, s in groups.items() for e in self.eps}
        out |= {f"{g}_bits0": float(bits[0.0][s].mean()) for g, s in groups.items()}
        return out

    def _measure(self, ctx) -> tuple[dict[str, list[float]], float]:
        """Per seed: the asymmetric shares (``near@ε``, ``far@ε``), the symmetric ones (``sym near@ε``,
        ``sym far@ε``: the two models) and each model's bits at ε = 0."""
        got: dict[str, list[float]] = {}
        trivial = math.nan
        for seed in ctx.seeds(self.seeds):
            for side, d in (("near", self.near), ("far", self.far)):
                model, batches, trivial = self._trained(ctx, d, seed)
                bits = {e: bits_by_position(model, batches, 1.0 + e) for e in self.eps}  # (T,) each
                row = {f"sym {side}@{e:g}": share_lost(bits[e], bits[0.0], trivial) for e in self.eps}
                row[f"{side} model bits0"] = float(bits[0.0].mean())
                if side == "near":
                    row |= self._asymmetric(model, batches, trivial, bits[0.0])
                for k, v in row.items():
                    got.setdefault(k, []).append(v)
        return got, trivial

    def run(self, ctx) -> ClaimResult:
        got, trivial = self._measure(ctx)
        pairs = {f"{kind} ε = {e:g}": (f"{p}far@{e:g}", f"{p}near@{e:g}")
                 for kind, p in (("keys at θ(1+ε)", ""), ("both at θ(1+ε), neighbour", "sym "))
                 for e in self.eps[1:]}
        stats = {k: paired(Arm.from_values(got[a]), Arm.from_values(got[b])) for k, (a, b) in pairs.items()}
        calls = holm_calls(stats, higher_is_better=True)  # far − near > 0: far loses more
        key = f"keys at θ(1+ε) ε = {self.primary_eps:g}"
        rows = [[k, fmt(est(got[b])), fmt(est(got[a])), calls[k].text(3),
                 {1: "far loses more", -1: "near loses more", 0: "not called"}[calls[k].sign]]
                for k, (a, b) in pairs.items()]
        holds, why = three_way(calls[key], "better", self.min_effect)
        power, _ = power_over(got["near model bits0"], trivial, higher_is_better=False)
        pe, n = self.primary_eps, len(got["near@0"])
        out = ClaimResult(
            setup=f"RoPE LM on the retrieval testbed (copy from {self.near} back, L0 = 32), {n} seeds; "
            f"scored at L0 with keys rotated at θ·(1+ε), queries at θ; share of the gain lost by the first "
            f"{self.span} targets (keys near the start) and the last {self.span} (keys far along). "
            f"Neighbour: queries and keys both at θ·(1+ε), a copy-from-{self.near} and a "
            f"copy-from-{self.far} model",
            measured=f"share of the gain over trivial lost at ε = {pe:g}, keys at θ(1+ε): near targets "
            f"{fmt(est(got[f'near@{pe:g}']))}, far targets {fmt(est(got[f'far@{pe:g}']))}; neighbour "
            f"(both rotated): copy-{self.near} model {fmt(est(got[f'sym near@{pe:g}']))}, copy-{self.far} "
            f"model {fmt(est(got[f'sym far@{pe:g}']))}",
            holds=holds,
            rule=f"yes if, at ε = {pe:g} with keys at θ(1+ε) (declared primary), far − near share lost is "
            f"called > 0 after Holm over all {len(calls)} comparisons (paired over seeds); no if called "
            f"< 0 or its interval lies within ±{self.min_effect:g}; inconclusive otherwise; the other ε "
            "and the symmetric neighbour are reported",
            details=md_table(["mismatch", "near: share of gain lost", "far: share of gain lost",
                              "far − near", "call"], rows)
            + f"\nBits/token at ε = 0: near targets {fmt(est(got['near_bits0']))}, far targets "
            f"{fmt(est(got['far_bits0']))}; copy-{self.near} model {fmt(est(got['near model bits0']))}, "
            f"copy-{self.far} model {fmt(est(got['far model bits0']))}; trivial {trivial:.3f}.\n",
            metrics={"power_near_model": power,
                     **{f"eps{e:g}_far_minus_near": est(got[f"far@{e:g}"]).mean - est(got[f"near@{e:g}"]).mean
                        for e in self.eps[1:]}},
        )
        out.why = why
        measure_gate(out, ctx.gate, {}, calls[key].stat)  # control: none (gate.why)
        out.primary = f"far − near targets, keys at θ(1+ε), ε = {pe:g}: {calls[key].text(3)} " \
                      f"(Holm over {len(calls)})"
        return out
