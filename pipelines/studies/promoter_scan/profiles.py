"""Where in a promoter crop a classifier's evidence sits: saliency profiles against the known boxes.

The saliency of a crop's base is gradient x input at the token embedding (Simonyan et al. 2014, "Deep
Inside Convolutional Networks"; Shrikumar et al. 2016 for gradient x input): the derivative of the crop's
two-class logit (promoter minus non-promoter) with respect to the embedding of each token, dotted with
that embedding. Averaged in absolute value over the test promoters and normalised to sum 1, it is a
profile over the crop's positions; a model that reads the −35 and −10 boxes at their fixed offsets from the
TSS puts its mass there. ``box_share``: the share of the profile within ±3 bases of a box centre, against
7/width for a flat profile (``enrichment`` = the ratio).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from datamodules.dna.samples import SampleSet, SampleWindows
from datamodules.dna.tokenize import KmerTokenizer
from pipelines.tasks.dna.scan_reads import POSITIVE

HALF_BOX = 3  # bases either side of a box centre (the boxes are hexamers)


def saliency(model: Any, tokens: torch.Tensor, batch_size: int = 64) -> np.ndarray:
    """Mean absolute gradient x input (width,) of the crops ``tokens`` (N, width) for the two-class logit."""
    grabbed: list[torch.Tensor] = []

    def keep(_module: Any, _inputs: Any, output: torch.Tensor) -> torch.Tensor:
        output.retain_grad()
        grabbed.append(output)
        return output

    hook = model.embedding.register_forward_hook(keep)
    total = torch.zeros(tokens.shape[1], dtype=torch.float64)
    try:
        with torch.enable_grad():
            for part in tokens.split(batch_size):
                grabbed.clear()
                logits = model(part).double()  # (B, C)
                rest = torch.cat([logits[:, :POSITIVE], logits[:, POSITIVE + 1 :]], 1).logsumexp(1)
                (logits[:, POSITIVE] - rest).sum().backward()
                x = grabbed[0]  # (B, T, D)
                total += (x.grad * x).sum(-1).abs().double().sum(0).detach()  # (T,)
    finally:
        hook.remove()
        model.zero_grad(set_to_none=True)
    return (total / total.sum()).numpy()


def promoter_crops(samples: SampleSet, width: int) -> torch.Tensor:
    """The promoter-class records of ``samples`` as single-base tokens (N, width)."""
    view = SampleWindows(samples, width, KmerTokenizer(1))
    return torch.stack([view[i]["tokens"] for i in np.flatnonzero(samples.labels == POSITIVE).tolist()])


def label_of(source: str, model: Any) -> str:
    """A short name for a model: its encoding's class (and ``+``-joined parts of a composition)."""
    pe = getattr(model, "pe", None)
    spec = pe.spec() if pe is not None and hasattr(pe, "spec") else {}
    name = str(spec.get("class_path", "none")).rsplit(".", 1)[-1]
    parts = (spec.get("init_args") or {}).get("schemes") or []
    if parts:
        name = "+".join(str(p.get("class_path", "?")).rsplit(".", 1)[-1] for p in parts)
    return f"{name} ({Path(str(source)).stem[:12]})"


def saliency_profiles(models: list[tuple[str, Any]], test: SampleSet, width: int,
                      boxes: list[int]) -> list[dict[str, Any]]:
    """Per model: its label, profile (width,), and per box its share, enrichment and the profile's peak
    within ±3 bases of it."""
    tokens = promoter_crops(test, width)
    out = []
    for source, model in models:
        model.eval()
        prof = saliency(model, tokens)
        row: dict[str, Any] = {"label": label_of(source, model), "profile": prof, "boxes": {}}
        for b in boxes:
            lo, hi = max(0, b - HALF_BOX), min(width, b + HALF_BOX + 1)
            share = float(prof[lo:hi].sum())
            row["boxes"][b] = {"share": share, "enrichment": share / ((hi - lo) / width)}
        row["peak"] = int(np.argmax(prof))
        out.append(row)
    return out


def profile_figure(profiles: list[dict[str, Any]], boxes: list[int], tss_index: int, path: Path) -> None:
    """Each model's profile against the box centres (shaded ±3) and the TSS, by offset from the TSS."""
    import matplotlib  # heavy: matplotlib, only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: matplotlib

    fig, ax = plt.subplots(figsize=(8, 3.6))
    for row in profiles:
        x = np.arange(len(row["profile"])) - tss_index
        ax.plot(x, row["profile"], label=row["label"], lw=1.2)
    for b in boxes:
        ax.axvspan(b - HALF_BOX - tss_index, b + HALF_BOX - tss_index, color="0.85", zorder=0)
        ax.text(b - tss_index, ax.get_ylim()[1] * 0.95, f"{b - tss_index:+d}", ha="center", fontsize=8)
    ax.axvline(0, color="0.4", ls=":", lw=1)
    ax.set_xlabel("offset from the TSS (bases)")
    ax.set_ylabel("share of |gradient x input|")
    ax.set_title("Where the promoter evidence sits in a crop (test promoters of the fold)")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
