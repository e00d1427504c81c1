"""Claim 7 — source 000's three masks: without them padding leaks into real positions, padded
positions get updated, and the loss counts predictions at padded positions.

Real E. coli windows (test region) go through a bidirectional encoder (the masked-LM task's
backbone, seeded initialisation: the leak is a property of the architecture, not of training)
alone and with ``n_pad`` PAD tokens appended, with the key-padding mask (and the output mask that
comes with it) on and off: max |output with padding − output without| over the real positions
(attention mask), and max |output| at the padded positions (output mask), per scheme. The loss
mask: the causal LM's training loss (:meth:`~pipelines.DNALanguageModel._nll`, which scores no PAD
target) of the padded windows against the unpadded ones, and the same loss with PAD targets counted.
"""

from __future__ import annotations

import numpy as np
import torch

from datamodules.dna.genome_cache import default_genome, load_genome
from pipelines.studies.claims.base import ClaimResult, Experiment
from pipelines.studies.claims.context import scheme_spec
from pipelines.studies.tables import md_table
from pipelines.tasks.dna.lm import DNALanguageModel
from pipelines.tasks.dna.mlm import MaskedDNAModel


def real_windows(n: int, length: int, seed: int) -> torch.Tensor:
    """``n`` windows (n, length) of base codes from the last tenth of the default genome."""

    codes = np.asarray(load_genome(default_genome()).codes)
    tail = codes[int(0.9 * len(codes)) :]
    starts = np.random.default_rng(seed).integers(0, len(tail) - length, n)
    return torch.as_tensor(np.stack([tail[s : s + length] for s in starts]).astype(np.int64))


def with_pad(tokens: torch.Tensor, n_pad: int, pad_id: int) -> torch.Tensor:
    """``tokens`` (B, T) with ``n_pad`` PAD tokens appended: (B, T + n_pad)."""
    return torch.cat((tokens, torch.full((tokens.shape[0], n_pad), pad_id)), dim=1)


@torch.no_grad()
def leak(model, tokens: torch.Tensor, n_pad: int, pad_id: int, masked: bool) -> tuple[float, float]:
    """(max |h(tokens + n_pad PAD)[:, :T] − h(tokens)| over real positions, max |h| over the padded
    positions), key-padding mask (and with it the output mask) on or off."""
    T = tokens.shape[1]
    padded = with_pad(tokens, n_pad, pad_id)  # (B, T + n_pad)

    def encode(x: torch.Tensor) -> torch.Tensor:
        mask = (x == pad_id) if masked else None
        mask = mask if mask is not None and mask.any() else None
        return model.backbone(model.embedding(x), torch.arange(x.shape[1]), mask)  # (B, T', D)

    out = encode(padded)  # (B, T + n_pad, D)
    return float((out[:, :T] - encode(tokens)).abs().max()), float(out[:, T:].abs().max())


@torch.no_grad()
def loss_gap(model: DNALanguageModel, tokens: torch.Tensor, n_pad: int, masked: bool) -> float:
    """|training loss per scored target of ``tokens`` + ``n_pad`` PAD − that of ``tokens``| (nats):
    the model's own loss (PAD targets not scored) or, ``masked`` False, every target counted."""
    padded = with_pad(tokens, n_pad, model.pad_id)  # (B, T + n_pad)
    total, count = model._nll(tokens)
    if masked:
        p_total, p_count = model._nll(padded)
    else:
        x, y = padded[:, :-1], padded[:, 1:]
        nll = torch.nn.functional.cross_entropy(model(x, torch.arange(x.shape[1])).transpose(1, 2), y)
        p_total, p_count = nll * y.numel(), torch.tensor(float(y.numel()))
    return abs(float(p_total / p_count) - float(total / count))


class PaddingLeak(Experiment):
    """Args:
    schemes: ``configs/posenc`` names.
    model: arguments of :class:`pipelines.MaskedDNAModel` (d_model, n_heads, n_layers).
    length: real tokens per window; n_pad: PAD tokens appended; windows: how many; seed: init/data seed.
    """

    power_exempt = "no training: an identity of the architecture at a seeded initialisation"
    claim = ("Without padding masks, padding leaks (source 000): without the attention mask into real "
             "positions, without the output mask into the padded positions' outputs, and without the loss "
             "mask into the loss.")

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
        rows, got = [], {}
        for name in self.schemes:
            torch.manual_seed(self.seed)
            model = MaskedDNAModel(vocab_size=7, pad_id=5, pe=scheme_spec(name), **self.model_args).eval()
            torch.manual_seed(self.seed)
            lm = DNALanguageModel(vocab_size=6, pad_id=5, pe=scheme_spec(name), **self.model_args).eval()
            (real_off, pad_off), (real_on, pad_on) = (leak(model, tokens, self.n_pad, 5, masked=m)
                                                      for m in (False, True))
            got[name] = {"real_off": real_off, "real_on": real_on, "pad_off": pad_off, "pad_on": pad_on,
                         "loss_off": loss_gap(lm, tokens, self.n_pad, False),
                         "loss_on": loss_gap(lm, tokens, self.n_pad, True)}
            rows.append([name, *(f"{got[name][k]:.3g}" for k in
                                 ("real_off", "real_on", "pad_off", "pad_on", "loss_off", "loss_on"))])
        off = {k: min(g[k] for g in got.values()) for k in ("real_off", "pad_off", "loss_off")}
        on = {k: max(g[k] for g in got.values()) for k in ("real_on", "pad_on", "loss_on")}
        holds = all(v > 1e-3 for v in off.values()) and all(v < 1e-5 for v in on.values())
        measured = (
            f"0 vs {self.n_pad} PAD, masks off → on: max |Δ output| at real positions "
            f"{off['real_off']:.2g}+ → {on['real_on']:.2g}; max |output| at padded positions "
            f"{off['pad_off']:.2g}+ → {on['pad_on']:.2g}; |Δ loss| (causal LM, nats/target) "
            f"{off['loss_off']:.2g}+ → {on['loss_on']:.2g}"
        )
        return ClaimResult(
            setup=f"bidirectional encoder and causal LM ({self.model_args}), {self.windows} real windows of "
            f"{self.length} bases, seeded initialisation (no training), schemes {', '.join(self.schemes)}",
            measured=measured,
            holds="yes" if holds else "no",
            rule="yes if, for every scheme, each of the three quantities exceeds 1e-3 with its mask off and "
            "stays below 1e-5 with it on",
            details=md_table(["scheme", "real positions, masks off: max |Δ|", "masks on", "padded outputs, "
                              "masks off: max |h|", "masks on", "loss, unmasked: |Δ|", "loss masked"], rows),
            metrics={f"{name}_{k}": v for name, g in got.items() for k, v in g.items()},
        )
