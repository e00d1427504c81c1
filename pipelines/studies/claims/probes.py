"""Claims probed on one trained model per scheme (no seed sweep):

* 5 — a Gaussian locality prior yields Gaussian-shaped attention (fitted width vs the learned σ);
* 6 — a small q/k phase mismatch makes the long-range signal interfere away (keys rotated ×(1+ε));
* 10 — relative encodings are shift invariant, absolute ones are not (positions offset by 10⁴).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from pipelines.eval.extrapolation import adapter_for, backbone_set, score_loader
from pipelines.eval.splits import length_loaders
from pipelines.studies.claims.base import ClaimResult, Experiment, md_table
from pipelines.studies.claims.context import Child
from posenc import PositionalEncoding, PositionOutOfRange, RoPE, SchemeMeta
from posenc.diagnostics import attention_weights
from posenc.rotary import rope_angles, rotate_with_tables, rotation_tables

LN2 = math.log(2.0)


def test_batches(t, length: int, max_batches: int | None) -> Iterator[Tensor]:
    """The LM's test windows (B, length + 1) at ``length``, at most ``max_batches`` batches."""
    adapter = adapter_for(t.module)
    for _n, loader in length_loaders(t.datamodule, adapter, [length]):
        for i, batch in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                return
            yield batch


# ----------------------------------------------------------------------------- claim 5
def gaussian_fit(d: np.ndarray, w: np.ndarray, mu: float) -> tuple[float, float]:
    """Least-squares fit of a·exp(−(d − μ)²/(2s²)) to w(d) (μ fixed): (s, R²)."""
    from scipy.optimize import curve_fit

    def g(x, a, s):
        return a * np.exp(-((x - mu) ** 2) / (2 * s**2))

    try:
        (a, s), _ = curve_fit(g, d, w, p0=(float(w.max()), max(1.0, float(d.mean()))), maxfev=20000)
    except RuntimeError:
        return math.nan, math.nan
    resid = w - g(d, a, s)
    r2 = 1.0 - float((resid**2).sum()) / max(float(((w - w.mean()) ** 2).sum()), 1e-30)
    return abs(float(s)), r2


class GaussianAttention(Experiment):
    """Args: task (DNA LM config), scheme (a GaussianPrior), seed, batches (test batches averaged)."""

    claim = "A Gaussian locality prior yields Gaussian-shaped attention whose width follows the learned σ."

    def __init__(self, task: str, scheme: dict | str, seed: int = 0, batches: int = 4) -> None:
        self.task, self.scheme, self.seed, self.batches = task, scheme, seed, batches

    def run(self, ctx) -> ClaimResult:
        t = ctx.train(self.task, self.scheme, self.seed, "gaussian_prior")
        model, T = t.module, int(t.datamodule.seq_len)
        pe = model.pe
        sigma, mu = pe.sigma.detach().double().numpy(), pe.mu.detach().double().numpy()
        x = torch.cat([b[:, :-1] for b in test_batches(t, T, ctx.max_batches(self.batches))])  # (B, T)
        weights = attention_weights(model, lambda: model(x))  # layers × (B, H, T, T)
        half = T // 2
        d = np.arange(half + 1, dtype=np.float64)
        rows, r2s, ratios = [], [], []
        for layer, w in enumerate(weights):
            q = torch.arange(half, T)  # queries that see every distance 0..half
            for h in range(w.shape[1]):
                curve = np.array([float(w[:, h, q, q - k].mean()) for k in range(half + 1)])  # (half + 1,)
                s, r2 = gaussian_fit(d, curve, float(mu[h]))
                r2s.append(r2)
                if sigma[h] < half:
                    ratios.append(s / sigma[h])
                rows.append([layer, h, f"{sigma[h]:.2f}", f"{s:.2f}", f"{r2:.3f}", f"{curve[0]:.3f}"])
        r2_med = float(np.nanmedian(r2s))
        ratio_med = float(np.nanmedian(ratios)) if ratios else math.nan
        shaped = r2_med >= 0.9
        width = math.isfinite(ratio_med) and 0.5 <= ratio_med <= 2.0
        holds = "yes" if shaped and width else "partly" if shaped or width else "no"
        return ClaimResult(
            setup=f"causal DNA LM with a learned-σ Gaussian prior (seed {self.seed}); mean attention weight "
            f"against distance 0..{half} for queries at positions ≥ {half}, one Gaussian fit per "
                f"layer and head",
            measured=f"median R² {r2_med:.3f} over {len(r2s)} heads; median fitted width / learned σ "
            f"{ratio_med:.2f} over the {len(ratios)} heads with σ < {half} (learned σ "
            f"{', '.join(f'{s:.1f}' for s in sigma)})",
            holds=holds,
            rule="yes if the median R² ≥ 0.9 and the median ratio of fitted width to learned σ is "
                "in [0.5, 2] "
            f"(heads with σ < {half}); partly if only one",
            details=md_table(["layer", "head", "learned σ", "fitted width", "R²", "weight at d = 0"], rows),
            metrics={"median_r2": r2_med, "median_width_ratio": ratio_med},
        )


# ----------------------------------------------------------------------------- claim 6
class MismatchedKeys(PositionalEncoding):
    """A trained RoPE's rotation, but keys rotated at frequencies ×(1 + ε): the experiment's probe of
    a q/k phase mismatch (queries as trained). Not a scheme of the catalogue."""

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("rotate",))

    def __init__(self, d_model: int, n_heads: int, *, rope: RoPE | None = None, eps: float = 0.0) -> None:
        super().__init__(d_model, n_heads)
        self.rope, self.eps = rope, float(eps)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        q, _ = self.rope.rotate(q, q, q_pos, q_pos)  # (B, H, T, Dh)
        freqs = self.rope.scaled_frequencies().to(k.device) * (1.0 + self.eps)  # (Dh/2,) float64
        tables = rotation_tables(rope_angles(k_pos, freqs), self.rope.layout)
        return q, rotate_with_tables(k, *tables, self.rope.layout)  # (B, H, T, Dh)


class PhaseMismatch(Experiment):
    """Args: task, scheme (RoPE), seed, eps (mismatches), length (test length), buckets (position edges)."""

    claim = (
        "A small q/k phase mismatch makes the long-range signal interfere away: keys rotated at "
        "frequencies ×(1+ε) hurt far positions more than near ones."
    )

    def __init__(
        self,
        task: str,
        scheme: str | dict,
        eps: list[float],
        length: int,
        buckets: list[int],
        seed: int = 0,
        batches: int | None = None,
    ) -> None:
        self.task, self.scheme, self.eps, self.length = task, scheme, list(eps), length
        self.buckets, self.seed, self.batches = list(buckets), seed, batches

    def run(self, ctx) -> ClaimResult:
        t = ctx.train(self.task, self.scheme, self.seed, "rope")
        model, rope = t.module, t.module.pe
        adapter = adapter_for(model)
        ((_, loader),) = length_loaders(t.datamodule, adapter, [self.length])
        edges = self.buckets
        table, signal = {}, {}
        freqs = rope.scaled_frequencies().double().numpy()
        for eps in self.eps:
            probe = MismatchedKeys(rope.d_model, rope.n_heads, rope=rope, eps=eps)
            with backbone_set(model, "pe", probe), torch.inference_mode():
                res = score_loader(
                    model, adapter, f"eps={eps}", self.length, loader, ctx.max_batches(self.batches)
                )
            curve = res.curve  # (T,) bits per position
            table[eps] = [float(np.nanmean(curve[a:b])) for a, b in zip(edges, edges[1:], strict=False)]
            n = np.array(edges[1:], dtype=np.float64) - 1  # the farthest key position of each bucket
            signal[eps] = np.cos(np.remainder(np.outer(n, freqs) * eps, 2 * math.pi)).mean(axis=1)
        names = [f"{a}–{b - 1}" for a, b in zip(edges, edges[1:], strict=False)]
        rows = [
            [f"{e:g}", *[f"{v:.4f}" for v in table[e]], *[f"{s:.3f}" for s in signal[e]]] for e in self.eps
        ]
        base = table[self.eps[0]]
        hurt = {e: [v - b for v, b in zip(table[e], base, strict=False)] for e in self.eps}
        top = self.eps[-1]
        far_more = hurt[top][-1] > hurt[top][0]
        monotone = all(
            hurt[a][-1] <= hurt[b][-1] + 1e-4 for a, b in zip(self.eps, self.eps[1:], strict=False)
        )
        holds = "yes" if far_more and monotone else "partly" if far_more or monotone else "no"
        measured = f"bits/base increase over ε = 0 in positions {names[0]} / {names[-1]}: " + "; ".join(
            f"ε={e:g}: {hurt[e][0]:+.4f} / {hurt[e][-1]:+.4f}" for e in self.eps[1:]
        )
        return ClaimResult(
            setup=f"trained RoPE DNA LM (seed {self.seed}, L0 = {t.datamodule.seq_len}) scored at "
                f"{self.length} bases "
            "with keys rotated at θ·(1+ε), queries as trained; bits/base per bucket of window position",
            measured=measured,
            holds=holds,
            rule="yes if at the largest ε the damage in the farthest bucket exceeds that in the "
                "nearest one and "
            "the farthest bucket's damage grows with ε; partly if only one",
            details=md_table(
                [
                    "ε",
                    *[f"bits/base, positions {n}" for n in names],
                    *[f"analytic q·k signal at key {b - 1}" for b in edges[1:]],
                ],
                rows,
            )
            + "\nAnalytic signal: mean over the RoPE bands of cos(ε·θ_i·n), what is left of an aligned q·k "
            "when the key at position n is rotated ε·θ_i·n too far (1 = intact).\n",
            metrics={f"eps{e:g}_far_increase": hurt[e][-1] for e in self.eps},
        )


# ----------------------------------------------------------------------------- claim 10
@torch.no_grad()
def bits_with_offset(model: Any, batches: list[Tensor], offset: int) -> float:
    """Bits/base of the windows with positions offset..offset+T−1 (NaN when undefined there)."""
    total = count = 0.0
    for batch in batches:
        x, y = batch[:, :-1], batch[:, 1:]
        pos = torch.arange(x.shape[1], dtype=torch.float64 if offset > 2**24 else torch.long) + offset
        try:
            logits = model(x, pos)  # (B, T, V)
        except PositionOutOfRange:
            return math.nan
        total += float(F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="sum"))
        count += y.numel()
    return total / count / LN2


class ShiftInvariance(Experiment):
    """Args: task, schemes (``{label: scheme}``), relative (labels expected invariant), offset, "
        "seed, batches."""

    power_exempt = "an exact identity (relative schemes: 0 change, not an estimate)"
    claim = (
        "Relative encodings are shift invariant while absolute ones are not: the same windows at "
        "positions offset by 10⁴ score the same bits/base (within 1e-4) for RoPE/ALiBi only."
    )

    def __init__(
        self,
        task: str,
        schemes: dict[str, Any],
        relative: list[str],
        offset: int = 10_000,
        seed: int = 0,
        batches: int | None = None,
        tolerance: float = 1e-4,
    ) -> None:
        self.task, self.schemes, self.relative, self.offset = task, schemes, list(relative), offset
        self.seed, self.batches, self.tolerance = seed, batches, tolerance

    def children(self, ctx) -> list[Child]:
        return [Child(self.task, scheme, self.seed, label) for label, scheme in self.schemes.items()]

    def run(self, ctx) -> ClaimResult:
        rows, deltas = [], {}
        for label, scheme in self.schemes.items():
            t = ctx.train(self.task, scheme, self.seed, label)
            batches = list(test_batches(t, int(t.datamodule.seq_len), ctx.max_batches(self.batches)))
            at0, shifted = (
                bits_with_offset(t.module, batches, 0),
                bits_with_offset(t.module, batches, self.offset),
            )
            deltas[label] = abs(shifted - at0) if math.isfinite(shifted) else math.inf
            rows.append(
                [
                    label,
                    f"{at0:.5f}",
                    "undefined" if not math.isfinite(shifted) else f"{shifted:.5f}",
                    "undefined" if not math.isfinite(shifted) else f"{deltas[label]:.2g}",
                ]
            )
        invariant = all(deltas[r] < self.tolerance for r in self.relative)
        others = [k for k in deltas if k not in self.relative]
        change = all(deltas[k] >= self.tolerance for k in others)
        holds = "yes" if invariant and change else "partly" if invariant or change else "no"
        measured = f"|Δ bits/base| at offset {self.offset:,}: " + "; ".join(
            f"{k} {'undefined' if math.isinf(v) else f'{v:.2g}'}" for k, v in deltas.items()
        )
        return ClaimResult(
            setup=f"trained DNA LMs (seed {self.seed}), the same test windows at positions 0..L0−1 and "
            f"{self.offset}..{self.offset}+L0−1",
            measured=measured,
            holds=holds,
            rule=f"yes if {', '.join(self.relative)} change by < {self.tolerance:g} and every other "
                f"scheme by more "
            "(or is undefined there); partly if only one side holds",
            details=md_table(["scheme", "bits/base at 0", f"at +{self.offset:,}", "|Δ|"], rows),
            metrics={f"{k}_abs_delta": (v if math.isfinite(v) else -1.0) for k, v in deltas.items()},
        )
