"""Claim 7 — without a key-padding mask, padding leaks into the outputs at real positions.

Real E. coli windows (test region) go through a bidirectional encoder (the masked-LM task's
backbone, seeded initialisation: the leak is a property of the architecture, not of training)
alone and with ``n_pad`` PAD tokens appended, with the key-padding mask on and off. The number is
max |output with padding − output without| over the real positions, per scheme.
"""

from __future__ import annotations

import numpy as np
import torch

from datamodules.dna.genome_cache import default_genome, load_genome
from pipelines.studies.claims.base import ClaimResult, Experiment
from pipelines.studies.claims.context import scheme_spec
from pipelines.studies.tables import md_table
from pipelines.tasks.mlm import MaskedDNAModel


def real_windows(n: int, length: int, seed: int) -> torch.Tensor:
    """``n`` windows (n, length) of base codes from the last tenth of the default genome."""

    codes = np.asarray(load_genome(default_genome()).codes)
    tail = codes[int(0.9 * len(codes)) :]
    starts = np.random.default_rng(seed).integers(0, len(tail) - length, n)
    return torch.as_tensor(np.stack([tail[s : s + length] for s in starts]).astype(np.int64))


@torch.no_grad()
def leak(model, tokens: torch.Tensor, n_pad: int, pad_id: int, masked: bool) -> float:
    """max |h(tokens + n_pad PAD)[:, :T] − h(tokens)| over real positions, mask on or off."""
    T = tokens.shape[1]
    padded = torch.cat((tokens, torch.full((tokens.shape[0], n_pad), pad_id)), dim=1)  # (B, T + n_pad)

    def encode(x: torch.Tensor) -> torch.Tensor:
        mask = (x == pad_id) if masked else None
        mask = mask if mask is not None and mask.any() else None
        return model.backbone(model.embedding(x), torch.arange(x.shape[1]), mask)  # (B, T', D)

    return float((encode(padded)[:, :T] - encode(tokens)).abs().max())


class PaddingLeak(Experiment):
    """Args:
    schemes: ``configs/posenc`` names.
    model: arguments of :class:`pipelines.MaskedDNAModel` (d_model, n_heads, n_layers).
    length: real tokens per window; n_pad: PAD tokens appended; windows: how many; seed: init/data seed.
    """

    power_exempt = "no training: an identity of the architecture at a seeded initialisation"
    claim = "Without padding masks, padding leaks into real positions."

    def __init__(
        self,
        schemes: list[str],
        model: dict,
        length: int = 64,
        n_pad: int = 50,
        windows: int = 8,
        seed: int = 0,
    ) -> None:
        self.schemes, self.model_args, self.length, self.n_pad = schemes, model, length, n_pad
        self.windows, self.seed = windows, seed

    def run(self, ctx) -> ClaimResult:

        tokens = real_windows(self.windows, self.length, self.seed)
        rows, off, on = [], {}, {}
        for name in self.schemes:
            torch.manual_seed(self.seed)
            model = MaskedDNAModel(vocab_size=7, pad_id=5, pe=scheme_spec(name), **self.model_args).eval()
            off[name] = leak(model, tokens, self.n_pad, 5, masked=False)
            on[name] = leak(model, tokens, self.n_pad, 5, masked=True)
            rows.append([name, f"{off[name]:.3g}", f"{on[name]:.3g}"])
        holds = all(v > 1e-3 for v in off.values()) and all(v < 1e-5 for v in on.values())
        measured = (
            f"max |Δ output| at real positions, 0 vs {self.n_pad} PAD: masks off "
            f"{min(off.values()):.2g}–{max(off.values()):.2g}, masks on {max(on.values()):.2g} at most"
        )
        return ClaimResult(
            setup=f"bidirectional encoder ({self.model_args}), {self.windows} real windows of "
                f"{self.length} bases, "
            f"seeded initialisation (no training), schemes {', '.join(self.schemes)}",
            measured=measured,
            holds="yes" if holds else "no",
            rule="yes if every scheme leaks (> 1e-3) with masks off and none does (< 1e-5) with masks on",
            details=md_table(["scheme", "masks off: max |Δ|", "masks on: max |Δ|"], rows),
            metrics={**{f"{k}_off": v for k, v in off.items()}, **{f"{k}_on": v for k, v in on.items()}},
        )
