"""A claim judged on one declared primary comparison among trained conditions and a control, at the
task's test lengths (:class:`ControlledComparison`), and the NoPE position probe (source 002).

Item 5 of issue 26 — the claims that had no experiment — are configs of these classes on the
synthetic testbeds (``datamodules.synthetic``):

* directional rules are easier with a relative bias (source 004): the motif task whose negatives put
  B *before* A at the same spacing; a signed relative bias vs an absolute encoding vs NoPE;
* relative encodings reuse a motif at any position (source 003): the motif-spacing task on a small
  training budget, tested on longer windows where the pair sits at positions never trained;
* extrapolation to thousands of tokens (source 003): the retrieval LM tested at 16×–64× L0;
* NoPE learns position from the causal mask (source 002): :class:`NoPEPositionProbe`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from pipelines.eval.extrapolation import adapter_for, score_loader
from pipelines.eval.splits import length_loaders, with_lengths
from pipelines.studies.bootstrap import Arm
from pipelines.studies.claims.base import ClaimResult, Experiment, est, fmt
from pipelines.studies.claims.context import Child
from pipelines.studies.claims.gates import measure_gate
from pipelines.studies.claims.judge import Primary, judge_stats, verdict_reason
from pipelines.studies.claims.order import CAUSAL
from pipelines.studies.claims.sweep import Sweep
from pipelines.studies.claims.trained import primary_verdict
from pipelines.studies.tables import md_table
from pipelines.studies.verdicts import paired
from posenc import PositionalEncoding


class ControlledComparison(Sweep):
    """Args (besides :class:`Sweep`'s): ``claim_text`` (the source's claim, one sentence),
    ``control`` (the condition every other is compared with at every length), ``task_name``,
    ``probe`` (reported beside the verdict: the held-out R² of a ridge probe of the position from
    what the first attention reads, per condition; ``probe_batches`` test batches), ``params``
    (reported: each condition's count of positional-encoding parameters)."""

    def __init__(self, claim_text: str, control: str, task_name: str = "", probe: bool = False,
                 probe_batches: int = 8, params: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.claim_text, self.control, self.task_name = claim_text, control, task_name
        self.probe, self.probe_batches, self.params = probe, probe_batches, params

    @property
    def claim(self) -> str:  # type: ignore[override]
        return self.claim_text

    def run(self, ctx) -> ClaimResult:
        m, _ = self.collect(ctx)
        others = [c for c in m.values if c != self.control]
        j = m.judge([(c, self.control, n) for n in m.lengths for c in others], ctx.primary)
        holds, rule = primary_verdict(ctx, j)
        L0 = m.train_length
        measured = f"{m.metric} at L0 = {L0}: " + "; ".join(f"{c} {fmt(m.at(c, L0), 4)}" for c in m.values)
        if isinstance(ctx.primary, Primary) and ctx.primary.length:
            n = ctx.primary.length
            measured += f"; at {n}: " + "; ".join(f"{c} {fmt(m.at(c, n), 4)}" for c in m.values)
        extra = ""
        if self.params:
            measured += "; positional parameters: " + "; ".join(
                f"{c} {n:,}" for c, n in self.encoding_parameters(ctx, m.seeds[0]).items())
        if self.probe:
            r2 = self.position_probe(ctx, m.seeds)
            measured += "; position R² from the first attention's input / the first block's update: " + \
                "; ".join(f"{c} {est(v['attention_input']).mean:.2f} / {est(v['update']).mean:.2f}"
                          for c, v in r2.items())
            extra = "\nHeld-out R² of a ridge probe of the position (h and h²), reported, not judged: from " \
                "what the first attention reads (LayerNorm of embedding + encoding) and from what the " \
                "first block adds to the residual stream:\n\n" + md_table(
                    ["condition", "R², attention's input", "per seed", "R², block's update", "per seed"],
                    [[c, *(x for w in ("attention_input", "update") for x in (
                        fmt(est(v[w])), " ".join(f"{r:.3f}" for r in v[w])))] for c, v in r2.items()])
        return self.result(
            ctx,
            m,
            f"{self.task_name}: {', '.join(m.values)}; control {self.control}; {len(m.seeds)} seeds, "
            f"tested at {', '.join(str(n) for n in m.lengths)}",
            measured,
            holds,
            rule,
            extra,
            judgement=j,
        )

    def encoding_parameters(self, ctx, seed: int) -> dict[str, int]:
        """Per condition: parameters of the model's positional encodings (each counted once)."""
        out = {}
        for label in self.conditions:
            module = ctx.fit(self.child(seed, label)).module
            params = {id(p): p for e in module.modules() if isinstance(e, PositionalEncoding)
                      for p in e.parameters()}  # each once (a Compose holds its children)
            out[label] = sum(p.numel() for p in params.values())
        return out

    def position_probe(self, ctx, seeds: list[int]) -> dict[str, dict[str, list[float]]]:
        """Per condition, per seed: :func:`position_r2` of the first attention's input and of the first
        block's update (cached children)."""
        out: dict[str, dict[str, list[float]]] = {c: {"attention_input": [], "update": []}
                                                  for c in self.conditions}
        for seed in seeds:
            for label in self.conditions:
                t = ctx.fit(self.child(seed, label))
                loader = t.datamodule.test_dataloader()[0]
                for where, values in out[label].items():
                    values.append(position_r2(t.module, loader, ctx.max_batches(self.probe_batches), where))
        return out


class LongRange(ControlledComparison):
    """:class:`ControlledComparison` of children trained as usual (shared with the other claims), each
    scored afterwards at ``lengths`` (e.g. 16×–64× L0) on the datamodule rebuilt with those test
    lengths. Args (besides :class:`ControlledComparison`'s): ``lengths`` (the first = L0)."""

    def __init__(self, lengths: list[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lengths = [int(n) for n in lengths]
        self._limit: int | None = None  # test batches per length (one under --smoke)

    def run(self, ctx) -> ClaimResult:
        self._limit = ctx.max_batches(None)
        return super().run(ctx)

    def _values(self, t) -> tuple[dict[int, float], dict[str, Any]]:
        adapter = adapter_for(t.module)
        dm = with_lengths(t.datamodule, adapter, self.lengths)
        values = {}
        with torch.no_grad():
            for n, loader in length_loaders(dm, adapter, self.lengths):
                r = score_loader(t.module, adapter, "trained", n, loader, self._limit)
                values[n] = r.metric if r.metric is not None else math.nan
        return values, {
            "metric": adapter.metric,
            "higher": adapter.higher_is_better,
            "train": int(dm.seq_len),
        }


def first_block_output(module: Any, x: torch.Tensor, where: str = "update") -> torch.Tensor:
    """(B, T, D) read in the first block: ``update``, what it adds to the residual stream (before any
    LayerNorm rescales it away, the spread of a causal average, which shrinks as 1/t, is still there),
    or ``attention_input``, what its attention reads (LayerNorm of token embedding + encoding)."""
    found = []
    block = module.backbone.blocks[0]
    if where == "update":
        hook = block.register_forward_hook(lambda _m, inp, out: found.append(out - inp[0]))
    else:
        hook = block.ln1.register_forward_hook(lambda _m, _inp, out: found.append(out))
    try:
        module.backbone(module.embedding(x), torch.arange(x.shape[1]), None)
    finally:
        hook.remove()
    return found[0]


@torch.no_grad()
def position_r2(module: Any, loader: Any, max_batches: int | None, where: str = "update") -> float:
    """Held-out R² of a ridge regression of the position from :func:`first_block_output` h at each
    token and its squares h² (the first half of the windows fits it, the second half scores it);
    batches are classifier dicts (``tokens``) or LM windows (B, T + 1)."""
    feats, target = [], []
    for i, batch in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        x = batch["tokens"] if isinstance(batch, dict) else batch[:, :-1]  # (B, T)
        h = first_block_output(module, x, where)  # (B, T, D)
        h = h.flatten(0, 1).double()  # (B·T, D)
        feats.append(
            torch.cat([h, h**2], dim=1).numpy()
        )  # squares too: a causal average's spread shrinks with t
        target.append(np.tile(np.arange(x.shape[1], dtype=np.float64), x.shape[0]))
    X, y = np.concatenate(feats), np.concatenate(target)
    X = np.hstack([X, np.ones((len(X), 1))])
    half = len(X) // 2
    w = np.linalg.solve(X[:half].T @ X[:half] + 1e-3 * np.eye(X.shape[1]), X[:half].T @ y[:half])
    resid = y[half:] - X[half:] @ w
    return float(1.0 - (resid**2).sum() / ((y[half:] - y[half:].mean()) ** 2).sum())


UNTRAINED = "none (causal, untrained)"
#: the probe's arms: label → overrides (the trained two are claim 1's children; the untrained one
#: stops before its first optimiser step)
ARMS = {"none": None, "none (causal)": CAUSAL,
        UNTRAINED: {**CAUSAL, "trainer": {"max_steps": 0}}}


def what_data_show(r2: dict[str, list[float]], j: Any, L0: int) -> str:
    """Claim 11's row in words, read from the measurements: is position decodable with the causal mask,
    without it, and does training raise it (the primary)?"""
    def decodable(label: str) -> str:
        e = est(r2[label])
        return "decodable" if e.lo > 0 else "not decodable" if e.hi < 0.02 else "not shown decodable"

    mask, trained = j.calls[("none (causal)", "none", L0)], j.primary
    change = {1: "raises", -1: "lowers", 0: "does not measurably change"}[trained.sign]
    return (f"position is {decodable('none (causal)')} from a trained causal NoPE's first block and "
            f"{decodable(UNTRAINED)} from the untrained one, {decodable('none')} without the mask (trained "
            f"causal − bidirectional "
            f"{mask.text(3)}); training {change} it (trained − untrained {trained.text(3)})")


class NoPEPositionProbe(Experiment):
    """Args: task (the order task's classifier config: the NoPE children are claim 1's), seeds,
    batches (probe windows)."""

    claim = (
        "A Transformer without positional encoding learns position from the causal mask (source 002): "
        "position becomes linearly decodable from a causal NoPE model's first-block update in training "
        "(beyond what the untrained causal model gives), and not from a bidirectional one's."
    )

    def __init__(self, task: str, seeds: list[int] | None = None, batches: int | None = 8) -> None:
        self.task, self.seeds, self.batches = task, seeds, batches

    def children(self, ctx) -> list[Child]:
        return [Child(self.task, "none", seed, label, over, test=True)
                for seed in ctx.seeds(self.seeds) for label, over in ARMS.items()]

    def run(self, ctx) -> ClaimResult:
        r2: dict[str, list[float]] = {label: [] for label in ARMS}
        for child in self.children(ctx):
            t = ctx.fit(child)  # the trained ones are shared with claim 1
            loader = t.datamodule.test_dataloader()[0]
            r2[child.label].append(position_r2(t.module, loader, ctx.max_batches(self.batches)))
        L0 = int(t.datamodule.seq_len)
        arms = {k: Arm.from_values(v) for k, v in r2.items()}
        stats = {(a, b, L0): paired(arms[a], arms[b]) for a, b in
                 (("none (causal)", UNTRAINED), ("none (causal)", "none"), (UNTRAINED, "none"))}
        j = judge_stats(stats, ctx.primary, L0, True)
        holds, rule = primary_verdict(ctx, j)
        rows = [[c, fmt(est(v)), " ".join(f"{x:.3f}" for x in v)] for c, v in r2.items()]
        out = ClaimResult(
            setup=f"NoPE classifiers of claim 1's order task (L0 = {L0}): causal and bidirectional trained, "
            f"and the causal one untrained (the control: a causal average spreads as 1/t before any "
            f"training), {len(r2['none'])} seeds; ridge probe of the position from the first block's "
            "update (h and h²), fitted on half of the test windows and scored on the other half",
            measured=what_data_show(r2, j, L0) + "; " + "; ".join(
                f"{c}: position R² {fmt(est(v))}" for c, v in r2.items()),
            holds=holds, rule=rule,
            details=md_table(["model", "held-out R² of the position probe", "per seed"], rows)
            + j.table("R²"),
            metrics={"causal_r2": est(r2["none (causal)"]).mean, "bidirectional_r2": est(r2["none"]).mean,
                     "untrained_causal_r2": est(r2[UNTRAINED]).mean},
            primary=j.summary(),
        )
        out.why = verdict_reason(ctx, j, holds)
        out.headline = what_data_show(r2, j, L0)
        gate = ctx.gate
        gains = {} if gate is None else {a: paired(arms[a], arms[gate.control]) if a in arms and gate.control
                                         in arms else None for a in gate.gated(ctx.primary)}
        measure_gate(out, gate, gains, j.primary_stat())
        return out
