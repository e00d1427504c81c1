"""Per-base gene / codon-frame segmentation of a genome (7 classes), a bidirectional tagger."""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from datamodules.dna.annotation import LABEL_NAMES, N_LABELS, call_genes, frame_labels, genes_to_cds
from pipelines.tasks.base import TaskAdapter
from pipelines.tasks.dna.per_length import PerLengthTest, token_positions
from pipelines.tasks.dna.predict import predict_segment


class SegmentAdapter(TaskAdapter):
    """Segmentation in the length sweep: per-base accuracy (higher is better; = the test pass's
    ``acc``); the curve is the accuracy at each window position; the trivial baseline always calls
    the most frequent label of the train region."""

    metric = "acc"
    higher_is_better = True
    length_unit = "bases of context"
    position_label = "position in window (accuracy)"
    trivial_name = "majority class"  # the train region's most frequent label

    def score(self, module: Any, batch: dict[str, Tensor]) -> tuple[float, float, Tensor, Tensor]:
        tokens, labels = batch["tokens"], batch["labels"]  # (B, T) each
        pred = module(tokens).argmax(-1)  # (B, T)
        keep = (tokens != module.pad_id).double()  # (B, T)
        per_pos = ((pred == labels).double() * keep).sum(0)  # (T,) correct calls
        return float(per_pos.sum()), float(keep.sum()), per_pos.cpu(), keep.sum(0).cpu()

    def trivial_baseline(self, dm: Any, split: str = "test") -> float:
        train = np.concatenate([np.asarray(dm.labels[a:b]) for a, b in dm.regions["train"]])
        majority = int(np.bincount(train).argmax())
        hits = total = 0
        for batch in dm.test_dataloader()[0]:  # every test length tiles the same bases
            keep = batch["tokens"] != dm.pad_id  # (B, T)
            hits += int(((batch["labels"] == majority) & keep).sum())
            total += int(keep.sum())
        return hits / max(total, 1)


class FrameSegmenter(PerLengthTest):
    """Label every base: 0 non-coding, 1/2/3 codon frame 0/1/2 on the + strand, 4/5/6 codon frame
    0/1/2 on the − strand (frame = the base's offset in its codon, counted from the CDS start on the
    CDS's strand; see ``datamodules.dna.annotation``).

    With the default data (pyrodigal gene calls on E. coli) the labels are gene *predictions*, not a
    curated annotation. Codon frame repeats every 3 bases, so an encoding that can represent period
    3 (``posenc.PeriodicRoPE`` pinned to 3) should help. Metrics on val/test and per test length:
    ``acc`` (per-base accuracy), ``f1_macro`` and ``f1_<class>`` per class, plus ``coding_acc``
    (coding vs. non-coding, whatever the frame).

    Args:
        vocab_size: token vocabulary (linked from the datamodule).
        pad_id: padding token id (linked from the datamodule).
        num_classes: label classes (7).
        **kwargs: backbone and optimiser arguments of :class:`~pipelines.tasks.base.TaskModule`.
    """

    causal = False
    task_name = "dna_segment"
    adapter = SegmentAdapter()
    predictor = staticmethod(predict_segment)
    default_datamodule = "datamodules.SegmentationDataModule"
    writes_intervals = True
    class_names = LABEL_NAMES

    def __init__(
        self, vocab_size: int = 7, pad_id: int = 5, num_classes: int = N_LABELS, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.per_class_head(vocab_size, pad_id, num_classes)
        if num_classes != len(LABEL_NAMES):
            self.class_names = [str(i) for i in range(num_classes)]
        self.val_metrics = self.make_metrics()

    def make_metrics(self) -> MetricCollection:
        n = self.num_classes
        return MetricCollection(compute_groups=False, metrics={
            "acc": MulticlassAccuracy(n, average="micro"),
            "f1_macro": MulticlassF1Score(n, average="macro"),
            "f1": MulticlassF1Score(n, average=None),
            "coding_acc": MulticlassAccuracy(2, average="micro"),
        })

    def update_metrics(self, metrics: MetricCollection, *args: Tensor) -> None:
        pred, target = args
        for key in ("acc", "f1_macro", "f1"):
            metrics[key].update(pred, target)
        metrics["coding_acc"].update((pred > 0).long(), (target > 0).long())

    def forward(self, tokens: Tensor) -> Tensor:
        """Class logits (B, T, C) for tokens (B, T) at positions 0..T-1."""
        h = self.backbone(self.embedding(tokens), token_positions(tokens), self.padding(tokens))
        return self.head(h)  # (B, T, C)

    def _step(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Mean per-base loss, predictions (B·T,) and targets (B·T,)."""
        logits = self(batch["tokens"]).flatten(0, 1).float()  # (B·T, C)
        target = batch["labels"].flatten()  # (B·T,)
        return F.cross_entropy(logits, target), logits.argmax(-1), target

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss, pred, target = self._step(batch)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/acc", (pred == target).float().mean())
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss, pred, target = self._step(batch)
        self.val_means.add("val/loss", loss * target.numel(), target.numel())  # logged at epoch end
        self.update_metrics(self.val_metrics, pred, target)

    def on_validation_epoch_end(self) -> None:
        self.log_collection("val", self.val_metrics)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.update_length(batch["tokens"].shape[1], lambda: self._step(batch)[1:])


def label_scores(pred: np.ndarray, target: np.ndarray, n_classes: int) -> dict[str, float]:
    """Per-base accuracy, macro F1 (classes present in either array) and coding-vs-non-coding
    accuracy of predicted labels against target labels."""
    pred, target = np.asarray(pred, np.int64), np.asarray(target, np.int64)
    f1 = []
    for c in range(n_classes):
        tp = float(((pred == c) & (target == c)).sum())
        denom = float((pred == c).sum() + (target == c).sum())
        if denom > 0:
            f1.append(2 * tp / denom)
    return {"acc": float((pred == target).mean()), "f1_macro": float(np.mean(f1)) if f1 else float("nan"),
            "coding_acc": float(((pred > 0) == (target > 0)).mean())}


class SegmentBaselines(L.Callback):
    """After testing, log references on the test span the model was scored on:

    * ``baseline/majority_<metric>``: every base labelled with the most frequent class of the train
      region (the trivial baseline);
    * ``baseline/pyrodigal_<metric>``, only when the labels come from an annotation file: the frame
      labels of pyrodigal's gene calls on the genome (what a practitioner would run instead). With
      the default labels (pyrodigal's own calls) the model's metrics already *are* its agreement
      with pyrodigal, which would score 1 against itself, so nothing is logged.

    Metrics: ``acc``, ``f1_macro`` (over the classes present), ``coding_acc``.
    """

    def __init__(self) -> None:
        self.results: dict[str, float] = {}

    def compute(self, dm: Any) -> dict[str, float]:
        labels = np.asarray(dm.labels)
        spans = dm.region_spans("test", dm.eval_span)
        target = np.concatenate([labels[a:b] for a, b in spans])
        train = np.concatenate([labels[a:b] for a, b in dm.region_spans("train")])
        majority = int(np.bincount(train, minlength=dm.num_classes).argmax())
        out = {f"baseline/majority_{k}": v
               for k, v in label_scores(np.full_like(target, majority), target, dm.num_classes).items()}
        if getattr(dm, "annotation", None) is not None:

            called = frame_labels(dm.genome, genes_to_cds(call_genes(dm.genome)))
            pred = np.concatenate([called[a:b] for a, b in spans])
            scores = label_scores(pred, target, dm.num_classes)
            out.update({f"baseline/pyrodigal_{k}": v for k, v in scores.items()})
        return out

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        if dm is None or not hasattr(dm, "labels") or not hasattr(dm, "region_spans"):
            return
        self.results = self.compute(dm)
        for logger in trainer.loggers:
            logger.log_metrics(self.results)
