"""A task defined outside ``pipelines/``: is the next base G or C? The README's "Adding a task"
recipe, followed literally: one module (this one) and one config (``next_gc.yaml`` beside it)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from datamodules.dna.records import as_records
from pipelines.tasks.base import TaskAdapter
from pipelines.tasks.dna.base import DNATask
from pipelines.tasks.dna.predict import dna_settings
from pipelines.tasks.windows import run_windows

C_CODE, G_CODE, N_CODE = 1, 2, 4  # datamodules.dna.fasta: A 0, C 1, G 2, T 3, N 4


def gc_targets(next_tokens: Tensor) -> tuple[Tensor, Tensor]:
    """(1.0 where the next base is G or C, 1.0 where it is a base at all), both (B, T)."""
    return ((next_tokens == C_CODE) | (next_tokens == G_CODE)).float(), (next_tokens < N_CODE).float()


class NextGCAdapter(TaskAdapter):
    """Length sweep: cross-entropy (bits) of the G/C call for the next base, per window position."""

    metric = "gc_bits"
    length_unit = "tokens of context"

    def train_length(self, dm: Any) -> int:
        return int(dm.seq_len)

    def score(self, module: Any, batch: Tensor) -> tuple[float, float, Tensor, Tensor]:
        target, keep = gc_targets(batch[:, 1:])  # (B, T)
        nats = F.binary_cross_entropy_with_logits(module(batch[:, :-1]), target, reduction="none")  # (B, T)
        bits = nats / math.log(2)
        per_pos = (bits * keep).sum(0)  # (T,)
        return float(per_pos.sum()), float(keep.sum()), per_pos.cpu(), keep.sum(0).cpu()


def predict_next_gc(model: Any, data: Any, *, window: int | None = None, overlap: int | None = None,
                    batch_size: int = 32, progress: Any = None) -> pd.DataFrame:
    """One row per record: the mean predicted probability that the next base is G or C."""
    tok, window, overlap = dna_settings(model, window, overlap)
    rows = []
    for rid, codes in as_records(data):
        ids = tok.encode(codes)
        probs = run_windows(ids, lambda b: torch.sigmoid(model(b))[..., None], window, overlap, True,
                            batch_size, model.device, progress)  # (n, 1)
        rows.append({"record": rid, "p_gc": float(np.mean(probs[:-1, 0]))})
    return pd.DataFrame(rows)


class NextGC(DNATask):
    """Causal toy task: from the bases so far, the probability that the next one is G or C."""

    causal = True
    task_name = "toy_next_gc"
    adapter = NextGCAdapter()
    predictor = staticmethod(predict_next_gc)
    default_datamodule = "datamodules.DNADataModule"

    def __init__(self, vocab_size: int = 6, pad_id: int = 5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.embedding = self.embed_tokens(vocab_size)
        self.head = nn.Linear(self.d_model, 1)
        self.pad_id = pad_id
        self._save_hparams(vocab_size=vocab_size, pad_id=pad_id)

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits (B, T) of "the base after position t is G or C" for tokens (B, T)."""
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        return self.head(self.backbone(self.embedding(tokens), pos, self.padding(tokens)))[..., 0]

    def _loss(self, window: Tensor) -> Tensor:
        target, keep = gc_targets(window[:, 1:])
        bce = F.binary_cross_entropy_with_logits(self(window[:, :-1]), target, reduction="none")
        return (bce * keep).sum() / keep.sum().clamp(min=1)

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        loss = self._loss(batch)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: Tensor, batch_idx: int) -> None:
        self.log("val/loss", self._loss(batch))

    def test_step(self, batch: Tensor, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log(f"test/loss_L{batch.shape[1] - 1}", self._loss(batch), add_dataloader_idx=False)
