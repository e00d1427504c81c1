"""Sequence classification: a bidirectional encoder, mean-pooled over the non-padding tokens."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassAUROC

from pipelines.dna_eval import PerLengthTest, token_positions


class SequenceClassifier(PerLengthTest):
    """One class per sequence. Metrics on val/test and per test length: ``acc`` and ``auroc``
    (one-vs-rest, macro over classes; for two classes this is the usual ROC AUC).

    Args:
        vocab_size: token vocabulary (linked from the datamodule).
        pad_id: padding token id (linked).
        num_classes: number of classes (linked from ``data.num_classes``).
        **kwargs: backbone and optimiser arguments of :class:`~pipelines.task.TaskModule`.
    """

    causal = False
    task_name = "dna_classify"

    def __init__(self, vocab_size: int = 7, pad_id: int = 5, num_classes: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if num_classes < 2:
            from posenc import PosencError

            raise PosencError(f"model.num_classes must be at least 2, got {num_classes}")
        d_model = self.backbone.ln_f.normalized_shape[0]
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.head = nn.Linear(d_model, num_classes)
        self.pad_id, self.num_classes = pad_id, num_classes
        self.val_metrics = self.make_metrics()
        self._save_hparams(vocab_size=vocab_size, pad_id=pad_id, num_classes=num_classes)

    def make_metrics(self) -> MetricCollection:
        n = self.num_classes
        return MetricCollection(compute_groups=False, metrics={
            "acc": MulticlassAccuracy(n, average="micro"),
            "auroc": MulticlassAUROC(n, average="macro"),
        })

    def forward(self, tokens: Tensor) -> Tensor:
        """Class logits (B, C) for tokens (B, T): mean of the encoder outputs over non-PAD tokens."""
        pad = tokens == self.pad_id
        mask = pad if pad.any() else None
        h = self.backbone(self.embedding(tokens), token_positions(tokens), mask)  # (B, T, D)
        keep = (~pad).float().unsqueeze(-1)  # (B, T, 1)
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)  # (B, D)
        return self.head(pooled)

    def _step(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        logits = self(batch["tokens"]).float()  # (B, C)
        return F.cross_entropy(logits, batch["label"]), logits.softmax(-1), batch["label"]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss, probs, target = self._step(batch)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/acc", (probs.argmax(-1) == target).float().mean())
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss, probs, target = self._step(batch)
        self.log("val/loss", loss, batch_size=len(target))
        self.val_metrics.update(probs, target)

    def on_validation_epoch_end(self) -> None:
        self.log_collection("val", self.val_metrics, prog_bar=True)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.update_length(batch["tokens"].shape[1], lambda: self._step(batch)[1:])
