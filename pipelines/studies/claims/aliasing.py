"""Claim 8 — aliasing: how close an encoding comes to repeating itself within 10^5 positions.

For each scheme the features F(t) are what :func:`posenc.diagnostics.position_features` reads from
the scheme itself (the sinusoidal table; for rotary schemes the rotated all-ones query of one head
of width d), in float64 positions. The number is min over lags 1 ≤ T ≤ ``max_lag`` of
mean_t ‖F(t) − F(t + T)‖ / mean_t ‖F(t)‖ over anchors t = 0..``n_anchor``−1: 0 means positions T
apart are indistinguishable.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pipelines.studies.claims.base import ClaimResult, Experiment
from pipelines.studies.tables import md_table
from posenc import build_encoding
from posenc.diagnostics import position_features


def lag_ratio(features: torch.Tensor, max_lag: int, n_anchor: int) -> np.ndarray:
    """mean_t ‖F(t) − F(t + T)‖ / mean_t ‖F(t)‖ for T = 1..max_lag (index T − 1), t < n_anchor."""
    scale = float(features[:n_anchor].norm(dim=-1).mean())
    total = torch.zeros(max_lag, dtype=torch.float64)
    for t in range(n_anchor):
        total += (features[t + 1 : t + 1 + max_lag] - features[t]).norm(dim=-1)  # (max_lag,)
    return (total / n_anchor / scale).numpy()


def scheme_features(spec: dict, d: int, n_positions: int) -> torch.Tensor:
    """The scheme's features at float64 positions 0..n_positions−1 (one head of width d)."""
    pe = build_encoding(spec, d, 1)
    pos = torch.arange(n_positions, dtype=torch.float64)
    with torch.no_grad():
        return position_features(pe, pos).double()  # (N, F)


class Aliasing(Experiment):
    """Args:
    schemes: ``{label: encoding spec}`` to measure.
    dims: widths d (one head of width d for rotary schemes).
    max_lag: largest lag T (10^5 in the claim).
    min_lag: smallest lag counted as "far".
    n_anchor: anchors t averaged over.
    """

    power_exempt = "no training: features read from each scheme"
    claim = (
        "Aliasing: a sinusoidal encoding with a smaller base or fewer dimensions comes closer to "
        "repeating (‖PE(t) − PE(t+T)‖ small for some T ≤ 10⁵)."
    )

    def __init__(
        self,
        schemes: dict[str, dict],
        dims: list[int],
        max_lag: int = 100_000,
        min_lag: int = 64,
        n_anchor: int = 8,
    ) -> None:
        self.schemes, self.dims, self.max_lag, self.n_anchor = schemes, list(dims), max_lag, n_anchor
        self.min_lag = min_lag

    def run(self, ctx) -> ClaimResult:
        max_lag = 2000 if ctx.smoke else self.max_lag
        found: dict[tuple[str, int], tuple[float, int]] = {}
        curves, adjacent = {}, {}
        for label, spec in self.schemes.items():
            for d in self.dims:
                ratio = lag_ratio(
                    scheme_features(spec, d, max_lag + self.n_anchor + 1), max_lag, self.n_anchor
                )
                i = self.min_lag - 1 + int(np.argmin(ratio[self.min_lag - 1 :]))
                found[(label, d)] = (float(ratio[i]), i + 1)
                adjacent[(label, d)] = float(ratio[0])
                curves[f"{label}, d={d}"] = ratio
        rows = [
            [label, d, f"{found[(label, d)][0]:.4f}", found[(label, d)][1], f"{adjacent[(label, d)]:.4f}"]
            for label in self.schemes
            for d in self.dims
        ]
        verdict, rule = self.verdict(found)
        figure = self.figure(curves, ctx.out / "aliasing.png")
        measured = "min far-lag ratio " + "; ".join(
            f"{label}: " + ", ".join(f"d={d} {found[(label, d)][0]:.2f}" for d in self.dims)
            for label in self.schemes
        )
        near = [v for v in adjacent.values()]
        measured += (
            f" (adjacent positions, T = 1: {min(near):.2f}–{max(near):.2f}; "
            f"lowest far-lag ratio overall {min(v[0] for v in found.values()):.2f})"
        )
        metrics = {f"{label}_d{d}_min_ratio": v[0] for (label, d), v in found.items()}
        return ClaimResult(
            setup=f"min over {self.min_lag} ≤ T ≤ {max_lag:,} of mean_t ‖F(t) − F(t+T)‖ / mean_t "
                f"‖F(t)‖, t = 0..{self.n_anchor - 1}, "
            "float64 positions, features read from each scheme (no training)",
            measured=measured,
            holds=verdict,
            rule=rule,
            details=md_table(
                [
                    "scheme",
                    "d",
                    f"min ratio, {self.min_lag} ≤ T ≤ {max_lag:,}",
                    "at lag T",
                    "ratio at T = 1 (adjacent)",
                ],
                rows,
            ),
            figures=[figure],
            metrics=metrics,
        )

    def verdict(self, found: dict[tuple[str, int], tuple[float, int]]) -> tuple[str, str]:
        """Monotone in the base (per d) and in d (per base) over the ``sinusoidal base=…`` rows."""
        sins = sorted(
            {lab for lab, _ in found if lab.startswith("sinusoidal")}, key=lambda s: float(s.split("=")[-1])
        )
        base_ok = all(
            found[(a, d)][0] <= found[(b, d)][0]
            for d in self.dims
            for a, b in zip(sins, sins[1:], strict=False)
        )
        dims = sorted(self.dims)
        dim_ok = all(
            found[(s, a)][0] <= found[(s, b)][0] for s in sins for a, b in zip(dims, dims[1:], strict=False)
        )
        rule = (
            "yes if, among the sinusoidal rows, the minimum ratio grows with the base at every d and with d "
            "at every base; partly if only one of the two orderings holds"
        )
        return ("yes" if base_ok and dim_ok else "partly" if base_ok or dim_ok else "no"), rule

    @staticmethod
    def figure(curves: dict[str, np.ndarray], path) -> str:
        import matplotlib  # optional: matplotlib, figures only

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # optional: matplotlib, figures only

        fig, ax = plt.subplots(figsize=(7, 3.6))
        for label, ratio in curves.items():
            n = len(ratio)
            edges = np.unique(np.round(np.logspace(0, math.log10(n), 300)).astype(int))  # log bins of lags
            lows = [
                ratio[a - 1 : b].min() for a, b in zip(edges[:-1], edges[1:], strict=False)
            ]  # running minimum per bin
            ax.plot(edges[:-1], lows, label=label, lw=1)
        ax.set(
            xscale="log",
            xlabel="lag T (positions)",
            ylabel="min ‖F(t)−F(t+T)‖/‖F(t)‖ in bin",
            title="Aliasing: how close each encoding comes to repeating",
        )
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        fig.savefig(path, dpi=80)
        plt.close(fig)
        return str(path)
