"""Figures of the diagnostics in :mod:`posenc.diagnostics`, written as PNG files (matplotlib, Agg).

Each ``plot_*`` function takes the numbers, writes one file and returns its path, so a caller
can log the file to MLflow; :func:`write_all` writes every figure that applies to a scheme.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display (must precede pyplot)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from posenc import diagnostics as dg  # noqa: E402
from posenc.base import PositionalEncoding  # noqa: E402
from posenc.rotary import rope_inv_freq  # noqa: E402

DPI = 110


def _save(fig, path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_heatmap(features: np.ndarray, title: str, path: Path) -> Path:
    """Features (T, F) as an image: position on x, feature on y (even features first, then odd,
    so the sin and cos halves of interleaved pairs each form one smooth block)."""
    if features.shape[1] % 2 == 0:
        features = np.concatenate((features[:, 0::2], features[:, 1::2]), axis=1)  # (T, F)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    lim = float(np.abs(features).max()) or 1.0
    im = ax.imshow(features.T, aspect="auto", origin="lower", cmap="RdBu_r", vmin=-lim, vmax=lim,
                   interpolation="nearest")
    ax.set(xlabel="position", ylabel="feature (even | odd)", title=title)
    fig.colorbar(im, ax=ax, fraction=0.03)
    return _save(fig, path)


def plot_bias_matrix(bias: np.ndarray, title: str, path: Path) -> Path:
    """Bias (H, T, T) of the first and last head as images (query on y, key on x)."""
    heads = sorted({0, bias.shape[0] - 1})
    fig, axes = plt.subplots(1, len(heads), figsize=(4.2 * len(heads), 3.6), squeeze=False)
    for ax, h in zip(axes[0], heads, strict=True):
        im = ax.imshow(bias[h], origin="upper", cmap="viridis", interpolation="nearest")
        ax.set(xlabel="key position", ylabel="query position", title=f"{title}: head {h}")
        fig.colorbar(im, ax=ax, fraction=0.04)
    return _save(fig, path)


def plot_similarity(sim: np.ndarray, anchors: Sequence[int], title: str, path: Path) -> Path:
    """F(t)·F(t+Δ)/F(t)·F(t) against Δ, one curve per anchor t (overlap: depends on Δ only)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for row, t in zip(sim, anchors, strict=True):
        ax.plot(np.arange(len(row)), row, lw=1.2, label=f"t = {t}")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set(xlabel="offset Δ (positions)", ylabel="PE(t)·PE(t+Δ) / |PE(t)|²", title=title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_aliasing(dist: np.ndarray, minima: Sequence[int], title: str, path: Path) -> Path:
    """‖PE(t) − PE(t+T)‖ (relative) against the lag T, the deepest local minima marked."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(np.arange(len(dist)), dist, lw=1.2, color="C0")
    for n, i in enumerate(sorted(minima)):
        ax.plot(i, dist[i], "o", color="C3", ms=5)
        ax.annotate(f"T={i}", (i, dist[i]), textcoords="offset points", xytext=(3, -12 - 10 * (n % 2)),
                    fontsize=8, color="C3")
    ax.set(xlabel="lag T (positions)", ylabel="mean ‖PE(t) − PE(t+T)‖ / mean ‖PE(t)‖", title=title)
    ax.set_ylim(bottom=0)
    return _save(fig, path)


def plot_bands(periods: np.ndarray, pinned: np.ndarray, train_len: int, title: str, path: Path) -> Path:
    """Period of every rotary band (log scale), pinned bands in red with their value."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    idx = np.arange(len(periods))
    ax.semilogy(idx[~pinned], periods[~pinned], "o", color="C0", label="ladder band")
    if pinned.any():
        ax.semilogy(idx[pinned], periods[pinned], "s", color="C3", ms=8, label="pinned band")
        for i in idx[pinned]:
            ax.annotate(f"{periods[i]:g}", (i, periods[i]), textcoords="offset points", xytext=(6, 0),
                        fontsize=8, color="C3")
    ax.axhline(train_len, color="grey", ls="--", lw=0.8, label=f"training length {train_len}")
    ax.set(xlabel="band i (pair of features)", ylabel="period 2π/θ_i (positions)", title=title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_phase_mismatch(freqs: np.ndarray, periods: Sequence[float], n_repeats: int, max_offset: int,
                        title: str, path: Path, ladder: np.ndarray | None = None) -> Path:
    """Left: mean rotary signal vs offset. Then one panel per period P: the signal of the band
    closest to 2π/P at distances n·P (dashed: the closest band of the plain geometric ``ladder``)."""
    fig, axes = plt.subplots(1, 1 + len(periods), figsize=(4.2 * (1 + len(periods)), 3.6), squeeze=False)
    a1 = axes[0, 0]
    offsets = np.unique(np.geomspace(1, max_offset, 400).round())
    a1.semilogx(offsets, dg.mean_band_signal(freqs, offsets), lw=1.0)
    a1.set(xlabel="offset Δ (positions)", ylabel="mean_i cos(θ_i Δ)", title="aligned q = k against offset")
    a1.axhline(0, color="grey", lw=0.6)
    n = np.arange(n_repeats + 1)
    for ax, p in zip(axes[0, 1:], periods, strict=True):
        for f, style, who in ((freqs, "-o", "this scheme"), (ladder, "--x", "plain RoPE ladder")):
            if f is None or (who != "this scheme" and np.allclose(f, freqs)):
                continue
            b = int(np.argmin(np.abs(np.log(f * p / (2 * np.pi)))))  # closest band in log-frequency
            ax.plot(n * p, dg.phase_mismatch_signal(f[b : b + 1], p, n_repeats)[0], style, ms=3, lw=0.8,
                    label=f"{who}: band {b}, period {2 * np.pi / f[b]:.4g}")
        ax.set(xlabel=f"distance n·{p:g} (positions)", ylabel="cos(θ·n·P)",
               title=f"pattern with period P = {p:g}")
        ax.set_ylim(-1.1, 1.5)  # room for the legend above the pinned line
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_bias_vs_distance(bias: np.ndarray, title: str, path: Path) -> Path:
    """Bias (H, 2M+1) of the middle query against signed distance j − i, one curve per head."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    m = (bias.shape[1] - 1) // 2
    d = np.arange(-m, m + 1)
    for h, row in enumerate(bias):
        ax.plot(d, row, lw=1.1, label=f"head {h}")
    ax.set(xlabel="signed distance j − i (positions)", ylabel="logit bias", title=title)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def plot_attention_distances(hists: Mapping[str, np.ndarray], title: str, path: Path) -> Path:
    """Attention mass against |i − j| for several runs (e.g. train and test lengths), log-log."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, h in hists.items():
        d = np.arange(len(h))
        mean = float((d * h).sum())
        ax.loglog(d[1:] if len(d) > 1 else d, h[1:] if len(h) > 1 else h, lw=1.2,
                  label=f"{label} (mean distance {mean:.1f}, self {h[0]:.2f})")
    ax.set(xlabel="distance |i − j| (positions)", ylabel="share of attention mass", title=title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def attention_distance_figure(model: torch.nn.Module, inputs: Mapping[str, tuple], title: str,
                              path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Run ``model(*args)`` for each labelled input (e.g. a batch at the training length and one at
    8×), histogram its attention distances and plot them together; returns the path and histograms."""
    hists = {}
    for label, args in inputs.items():
        weights = dg.attention_weights(model, lambda a=args: model(*a))
        hists[label] = dg.attention_distance_histogram(weights)
    return plot_attention_distances(hists, title, path), hists


def write_all(pe: PositionalEncoding, out: Path, length: int = 512, train_len: int = 128,
              periods: Sequence[float] | None = None) -> list[Path]:
    """Every figure that applies to ``pe``, into ``out``; returns the paths written."""
    name, out, written = type(pe).__name__, Path(out), []
    scaling = getattr(pe, "scaling", None)
    if scaling is not None and scaling.type != "none":  # e.g. "RoPE (yarn ×8)"
        name += f" ({scaling.type} ×{scaling.factor:g})"
    if pe.max_len is not None:
        length = min(length, pe.max_len)
    pos = torch.arange(length)
    feats = dg.position_features(pe, pos)
    if feats is not None:
        f = feats.numpy()
        written.append(plot_heatmap(f, f"{name}: what each position adds", out / "heatmap.png"))
        anchors = [0, length // 4, length // 2]
        sim = dg.similarity_vs_offset(feats, anchors, length - 1 - anchors[-1])
        written.append(plot_similarity(sim, anchors, f"{name}: similarity against offset",
                                       out / "similarity.png"))
        n_anchor = max(1, length // 4)
        dist = dg.aliasing_distance(feats, length - n_anchor, n_anchor)
        written.append(plot_aliasing(dist, dg.local_minima(dist), f"{name}: aliasing distance",
                                     out / "aliasing.png"))
    if dg.rotary_part(pe) is not None:
        per, pinned = dg.band_periods(pe)
        written.append(plot_bands(per, pinned, train_len, f"{name}: rotary bands", out / "bands.png"))
        shown = list(periods or per[pinned].tolist() or [3.0, 10.5])
        rope = dg.rotary_part(pe)
        ladder = rope_inv_freq(rope.rotary_dim, rope.base).numpy()  # (n_pairs,) the unpinned RoPE bands
        written.append(plot_phase_mismatch(2 * np.pi / per, shown, 40, 100 * train_len,
                                           f"{name}: q/k phase mismatch", out / "phase_mismatch.png", ladder))
    bias = dg.bias_vs_distance(pe, min(length // 2, 4 * train_len))
    if bias is not None:
        written.append(plot_bias_vs_distance(bias, f"{name}: bias against distance", out / "bias.png"))
        if feats is None:
            with torch.no_grad():
                q = torch.zeros(1, pe.n_heads, min(length, 128), pe.head_dim)
                p = torch.arange(q.shape[2])
                b = pe.bias(q, p, p, k=q).expand(1, pe.n_heads, q.shape[2], q.shape[2])[0]
            written.append(plot_bias_matrix(b.double().numpy(), name, out / "heatmap.png"))
    return written
