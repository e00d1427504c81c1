"""Masked (BERT-style) DNA language model: bidirectional, bits per base on the masked positions."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from datamodules.dna.tokenize import IGNORE_INDEX
from pipelines.tasks.dna.lm import LMAdapter
from pipelines.tasks.dna.per_length import LN2, NatsToBits, PerLengthTest, token_positions
from pipelines.tasks.dna.predict import predict_mlm


class MLMAdapter(LMAdapter):
    """Masked DNA LM in the length sweep: bits per base on the masked tokens; the curve is bits at
    each window position; the Markov baselines of the causal LM."""

    position_label = "position in window (bits/base at masked positions)"

    def score_windows(self, module: Any, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Bits per base (B,) and masked tokens (B,) per window (float64), and per position (T,)."""
        logits = module(batch["input"])  # (B, T, V)
        target = batch["target"]  # (B, T), IGNORE_INDEX where not masked
        nll = F.cross_entropy(
            logits.transpose(1, 2).float(), target, ignore_index=IGNORE_INDEX, reduction="none"
        )  # (B, T), 0 where ignored
        keep = (target != IGNORE_INDEX).double()  # (B, T)
        bits = nll.double() * keep / LN2 / module.bases_per_token  # (B, T) bits per base
        return bits.sum(1).cpu(), keep.sum(1).cpu(), bits.sum(0).cpu(), keep.sum(0).cpu()


class MaskedDNAModel(PerLengthTest):
    """Predict the original token at masked positions (15%: 80% MASK, 10% random, 10% kept — the
    corruption is done by :class:`~datamodules.dna.genome.MaskedDNADataModule`); non-causal.

    Metrics: ``bits_per_base`` (cross-entropy on masked tokens in bits, ÷ bases per token) and
    ``masked_acc``; the test set is scored at every evaluation length on the same masked bases.

    Args:
        vocab_size: token vocabulary (linked from the datamodule).
        pad_id: padding token id (linked from the datamodule).
        bases_per_token: k of the k-mer tokens (linked), to report bits per base.
        **kwargs: backbone and optimiser arguments of :class:`~pipelines.tasks.base.TaskModule`.
    """

    causal = False
    task_name = "dna_mlm"
    adapter = MLMAdapter()
    predictor = staticmethod(predict_mlm)
    default_datamodule = "datamodules.MaskedDNADataModule"

    def __init__(self, vocab_size: int = 7, pad_id: int = 5, bases_per_token: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.embedding = self.embed_tokens(vocab_size)
        self.head = nn.Linear(self.d_model, vocab_size)
        self.pad_id, self.vocab_size, self.bases_per_token = pad_id, vocab_size, bases_per_token
        self.val_metrics = self.make_metrics()
        self._save_hparams(vocab_size=vocab_size, pad_id=pad_id, bases_per_token=bases_per_token)

    def make_metrics(self) -> MetricCollection:
        return MetricCollection(compute_groups=False, metrics={
            "bits_per_base": NatsToBits(self.bases_per_token),
            "masked_acc": MulticlassAccuracy(self.vocab_size, average="micro", ignore_index=IGNORE_INDEX),
        })

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits (B, T, V) for (corrupted) tokens (B, T) at positions 0..T-1."""
        h = self.backbone(self.embedding(tokens), token_positions(tokens), self.padding(tokens))
        return self.head(h)  # (B, T, V)

    def _scored(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Mean NLL (nats) over masked tokens, their count, logits (N, V) and targets (N,)."""
        logits = self(batch["input"]).flatten(0, 1).float()  # (B·T, V)
        target = batch["target"].flatten()  # (B·T,)
        keep = target != IGNORE_INDEX
        nll = F.cross_entropy(logits[keep], target[keep]) if keep.any() else logits.sum() * 0.0
        return nll, keep.sum(), logits, target

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss, _, _, _ = self._scored(batch)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/bits_per_base", loss / LN2 / self.bases_per_token)
        return loss

    def update_metrics(self, metrics: MetricCollection, *args: Tensor) -> None:
        loss, count, logits, target = args
        metrics["bits_per_base"].update(loss, weight=count)
        metrics["masked_acc"].update(logits, target)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.update_metrics(self.val_metrics, *self._scored(batch))

    def on_validation_epoch_end(self) -> None:
        self.log_collection("val", self.val_metrics, prog_bar=True)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.update_length(batch["input"].shape[1], lambda: self._scored(batch))
