"""Sequence classification: a bidirectional encoder whose per-token class logits are pooled over the crop
(uniformly, or with a learned prior over its positions: :mod:`pipelines.tasks.dna.classify_readout`)."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassAUROC

from datamodules.config import as_group
from datamodules.dna.samples import SampleWindows
from datamodules.dna.tokenize import KmerTokenizer
from pipelines.tasks.base import TaskAdapter, baseline_datamodule
from pipelines.tasks.dna.classify_baselines import (
    BASELINES,
    auroc,
    fit_baselines,
    score_lengths,
    two_class_reports,
)
from pipelines.tasks.dna.classify_metrics import two_class_report
from pipelines.tasks.dna.classify_readout import (
    ConvStem,
    PositionPrior,
    Readout,
    crop_positions,
    mean_weights,
)
from pipelines.tasks.dna.per_length import PerLengthTest
from pipelines.tasks.dna.predict import predict_classify
from pipelines.tasks.options import TASK_GROUPS
from posenc import PosencError


class ClassifyAdapter(TaskAdapter):
    """Classification in the length sweep: AUROC (one-vs-rest, macro over classes; = the test pass's
    ``auroc``), computed over every test sequence at once; a pooled classifier has no per-position
    score, so the curve is empty; the trivial baseline is chance, AUROC 0.5."""

    metric = "auroc"
    higher_is_better = True
    length_unit = "tokens (centre crop)"
    position_label = "(no per-position score)"
    trivial_name = "chance"

    def score(self, module: Any, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(class probabilities (B, C), labels (B,), empty per-position sums (T,), zero counts (T,))."""
        probs = module(batch["tokens"]).float().softmax(-1)  # (B, C)
        none = torch.zeros(batch["tokens"].shape[1], dtype=torch.float64)  # (T,)
        return probs.cpu(), batch["label"].cpu(), none, none

    def combine(self, parts: list[tuple[Tensor, Tensor]]) -> float:
        from torchmetrics.functional.classification import multiclass_auroc  # heavy: torchmetrics

        probs = torch.cat([p[0] for p in parts])  # (N, C)
        labels = torch.cat([p[1] for p in parts])  # (N,)
        return float(multiclass_auroc(probs, labels, probs.shape[1], average="macro"))

    def trivial_baseline(self, dm: Any, split: str = "test") -> float:
        return 0.5


class TwoClassTest:
    """For a two-class classifier, after the test pass: the class-1 probability of every validation and
    test sequence at the first test length (the training length), and from them ``test/auprc`` and
    ``test/{mcc,sn,sp}`` at the threshold of best validation MCC (``test/threshold``, a class-1
    probability; :func:`~pipelines.tasks.dna.classify_metrics.two_class_report`). Class 1 is the positive
    class: the second class name in sorted order (``promoter`` against ``non_promoter``)."""

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        dm = getattr(self.trainer, "datamodule", None)
        if self.num_classes != 2 or self.trainer.world_size > 1 or not hasattr(dm, "sets"):
            return  # (under DDP each rank holds a shard: the thresholds are chosen by a single process)
        val, test = self._class1(dm.val_dataloader()), self._class1(dm.test_dataloader()[0])
        report = two_class_report(*val, *test)
        self.two_class = report
        if self.logger is not None:  # test/auroc is the per-length pass's own
            self.logger.log_metrics({f"test/{k}": v for k, v in report.items() if k != "auroc"})

    def _class1(self, loader: Any) -> tuple[np.ndarray, np.ndarray]:
        """Labels (N,) and class-1 probabilities (N,) of every sequence a loader serves."""
        labels, scores = [], []
        for batch in loader:
            probs = self(batch["tokens"].to(self.device)).float().softmax(-1)  # (B, 2)
            scores.append(probs[:, 1].cpu().numpy())
            labels.append(batch["label"].numpy())
        return np.concatenate(labels), np.concatenate(scores).astype(np.float64)


class SequenceClassifier(TwoClassTest, PerLengthTest):
    """One class per sequence. Metrics on val/test and per test length: ``acc`` and ``auroc``
    (one-vs-rest, macro over classes; for two classes this is the usual ROC AUC); for two classes also
    ``test/{auprc,mcc,sn,sp,threshold}`` (:class:`TwoClassTest`).

    Every token gets class logits (a linear head on the encoder output); a crop's logits are their
    weighted sum (:class:`~pipelines.tasks.classify_readout.Readout`: uniform, or a learned prior over
    the training crop's positions), so a whole window read once scores every base the way the classifier
    scores a crop (:meth:`token_logits`).

    Args:
        vocab_size: token vocabulary (linked from the datamodule).
        pad_id: padding token id (linked).
        num_classes: number of classes (linked from ``data.num_classes``).
        seq_len: the training crop length in tokens (linked from ``data.init_args.windows.seq_len``);
            needed by ``readout.pool: tokens`` and ``readout.positions: centre``.
        readout: stem, positions, pooling and label smoothing
            (:class:`~pipelines.tasks.classify_readout.Readout`).
        **kwargs: backbone and optimiser arguments of :class:`~pipelines.tasks.base.TaskModule`.
    """

    causal = False
    task_name = "dna_classify"
    adapter = ClassifyAdapter()
    predictor = staticmethod(predict_classify)
    default_datamodule = "datamodules.ClassificationDataModule"
    batch_records = True
    config_groups: ClassVar[dict[str, type]] = {**TASK_GROUPS, "readout": Readout}

    def __init__(self, vocab_size: int = 7, pad_id: int = 5, num_classes: int = 2, seq_len: int | None = None,
                 readout: Readout = Readout(), **kwargs: Any) -> None:  # noqa: B008 - frozen dataclass
        readout = as_group(Readout, readout, "readout")
        super().__init__(**kwargs)
        if num_classes < 2:
            raise PosencError(f"model.num_classes must be at least 2, got {num_classes}")
        if readout.pool == "tokens" and seq_len is None:
            raise PosencError("model.init_args.readout.pool: 'tokens' needs model.init_args.seq_len (linked "
                              "from data.init_args.windows.seq_len)")
        self.readout, self.seq_len = readout, seq_len
        self.stem = ConvStem(self.d_model, readout.stem) if readout.stem else None
        self.prior = PositionPrior(seq_len) if readout.pool == "tokens" else None
        self.per_class_head(vocab_size, pad_id, num_classes, seq_len=seq_len, readout=asdict(readout))
        self.val_metrics = self.make_metrics()

    def make_metrics(self) -> MetricCollection:
        n = self.num_classes
        return MetricCollection(compute_groups=False, metrics={
            "acc": MulticlassAccuracy(n, average="micro"),
            "auroc": MulticlassAUROC(n, average="macro"),
        })

    def describe_data(self, dm: Any) -> dict[str, Any]:
        """The DNA description plus the class names of the labels."""
        out = super().describe_data(dm)
        if out and hasattr(dm, "class_names"):
            out["class_names"] = [str(c) for c in dm.class_names]
        return out

    def positions(self, tokens: Tensor) -> Tensor:
        """The positions (T,) or (B, T) a crop's tokens (B, T) are read at (``readout.positions``)."""
        return crop_positions(tokens, self.pad_id, self.readout.positions, self.seq_len)

    def class_logits(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """Per-token class logits (B, T, C) of tokens (B, T) at ``positions`` (T,) or (B, T); zero-state
        padding tokens get the head's bias (they are never pooled)."""
        keep = tokens != self.pad_id  # (B, T)
        x = self.embedding(tokens)  # (B, T, D)
        if self.stem is not None:
            x = self.stem(x, keep)
        return self.head(self.backbone(x, positions, self.padding(tokens)))  # (B, T, C)

    def pool_weights(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """The pooling weights (B, T) of a crop's tokens: uniform or the learned position prior."""
        keep = tokens != self.pad_id  # (B, T)
        return mean_weights(keep) if self.prior is None else self.prior(positions, keep)

    def forward(self, tokens: Tensor) -> Tensor:
        """Class logits (B, C) of crops (B, T): the pooled per-token class logits."""
        pos = self.positions(tokens)
        z = self.class_logits(tokens, pos)  # (B, T, C)
        w = self.pool_weights(tokens, pos).to(z.dtype)  # (B, T)
        return torch.einsum("bt,btc->bc", w, z)

    def token_logits(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """The two-class logit (class 1 minus class 0; class names sorted, so for ``{promoter,
        non_promoter}`` the promoter logit) of every token (B, T), read in one pass over
        tokens (B, T) of any length at explicit ``positions`` (T,) or (B, T). A crop's logit (the
        difference of :meth:`forward`'s two logits) is the sum of these weighted by
        :meth:`pool_weights`.

        Raises:
            PosencError: the model has more than two classes (no single per-token logit).
        """
        if self.num_classes != 2:
            raise PosencError(f"token_logits needs a two-class model, this one has {self.num_classes}")
        z = self.class_logits(tokens, positions)  # (B, T, 2)
        return z[..., 1] - z[..., 0]

    def _step(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        logits = self(batch["tokens"]).float()  # (B, C)
        loss = F.cross_entropy(logits, batch["label"], label_smoothing=self.readout.label_smoothing)
        return loss, logits.softmax(-1), batch["label"]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss, probs, target = self._step(batch)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/acc", (probs.argmax(-1) == target).float().mean())
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss, probs, target = self._step(batch)
        self.val_means.add("val/loss", loss * len(target), len(target))  # logged at epoch end
        self.val_metrics.update(probs, target)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:  # its few batches may hold one class (AUROC undefined) and
            self.val_metrics.reset()  # Lightning keeps nothing logged during the sanity check anyway
            return
        self.log_collection("val", self.val_metrics, prog_bar=True)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.update_length(batch["tokens"].shape[1], lambda: self._step(batch)[1:])


class KmerBaseline(L.Callback):
    """After testing, log a position-free reference: a logistic regression on the k-mer counts of
    each sequence (cropped to the training length, like the model's input), fitted on train and
    scored on test: ``baseline/kmer<k>_acc`` and ``baseline/kmer<k>_auroc`` (macro one-vs-rest).
    What the Transformer gains over it is what order and position add beyond composition.

    Args:
        k: k-mer length of the counts (4^k features).
    """

    def __init__(self, k: int = 4) -> None:
        self.k = k
        self.results: dict[str, float] = {}

    def features(self, samples, dm) -> tuple[np.ndarray, np.ndarray]:
        """k-mer frequencies (N, 4^k) of the centre crops, and the labels (N,)."""
        bases = dm.tokenizer.n_bases(dm.seq_len)
        crops = SampleWindows(samples, bases, KmerTokenizer(1))  # base codes, PAD past the end
        counter = KmerTokenizer(self.k, 1)
        rows = []
        for i in range(len(crops)):
            ids = counter.encode(crops[i]["tokens"].numpy())
            rows.append(np.bincount(ids[ids < counter.n_kmers], minlength=counter.n_kmers))
        x = np.asarray(rows, dtype=np.float64)  # (N, 4^k)
        return x / np.maximum(x.sum(1, keepdims=True), 1.0), np.asarray(samples.labels)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = baseline_datamodule(trainer, "sets")
        if dm is None:
            return
        from sklearn.linear_model import LogisticRegression  # optional: sklearn baselines

        x_train, y_train = self.features(dm.sets["train"], dm)
        x_test, y_test = self.features(dm.sets["test"], dm)
        clf = LogisticRegression(max_iter=2000).fit(x_train, y_train)
        probs = np.zeros((len(y_test), dm.num_classes))  # (N, C): a class absent from train scores 0
        probs[:, clf.classes_] = clf.predict_proba(x_test)
        acc = float((probs.argmax(1) == y_test).mean())
        self.results = {f"baseline/kmer{self.k}_acc": acc,
                        f"baseline/kmer{self.k}_auroc": auroc(y_test, probs)}
        for logger in trainer.loggers:
            logger.log_metrics(self.results)


class ClassifyBaselines(L.Callback):
    """After testing, fit the baselines a practitioner would pick on the classifier's own crops and split
    (:mod:`pipelines.tasks.dna.classify_baselines`: by default one-hot logistic regression, position weight
    matrix, the Genomic Benchmarks CNN; also base composition, k-mer logistic regression and a
    CNNProm-like CNN), each at the training length on train with its setting chosen on validation, and
    score them on the test sequences at every test length, a longer crop read as the maximum over its
    training-length windows. Logged: ``baseline/<name>_auroc_L<n>``, ``baseline/<name>_val_auroc``, what
    validation chose (``baseline/onehot_lr_C``, ``baseline/pwm_alpha``, ``baseline/cnn_epoch``, …); for
    two classes also ``baseline/<name>_{auroc,auprc,mcc,sn,sp,threshold}`` at the training length, the
    threshold the one of best validation MCC; a table of the model's and the baselines' AUROC per
    length on stderr.

    Args:
        cnn_epochs: most CNN training epochs (early stop after 3 without a better validation AUROC).
        stride: bases between the windows a longer crop is read as.
        seed: CNN initialisation and shuffling seed (``None``: the datamodule's ``seed``).
        baselines: which to fit (names of :data:`~pipelines.tasks.dna.classify_baselines.BASELINES`).
        k: k-mer length of ``kmer_lr``.
    """

    def __init__(self, cnn_epochs: int = 10, stride: int = 1, seed: int | None = None,
                 baselines: list[str] | None = None, k: int = 4) -> None:
        if cnn_epochs < 1 or stride < 1 or k < 1:
            raise PosencError(f"ClassifyBaselines: cnn_epochs={cnn_epochs}, stride={stride} and k={k} "
                              "must be ≥ 1")
        names = list(baselines) if baselines is not None else ["onehot_lr", "pwm", "cnn"]
        unknown = [n for n in names if n not in BASELINES]
        if unknown or not names:
            raise PosencError(f"ClassifyBaselines: unknown baselines {unknown or names}; "
                              f"known: {' '.join(BASELINES)}")
        self.cnn_epochs, self.stride, self.seed, self.names, self.k = cnn_epochs, stride, seed, names, k
        self.results: dict[str, float] = {}
        self.by_length: dict[str, dict[int, float]] = {}
        self.train_length = 0  # tokens (the datamodule's seq_len), set by compute
        self.untested: list[int] = []  # test lengths the datamodule left out (records shorter)

    def compute(self, dm: Any) -> dict[str, float]:
        """Fit on ``dm.sets["train"]``/``["val"]``, score ``dm.sets["test"]`` at every ``dm.eval_lengths``."""

        self.train_length, width = int(dm.seq_len), dm.tokenizer.n_bases(dm.seq_len)
        self.untested = list(getattr(dm, "untested_lengths", []))
        seed = self.seed if self.seed is not None else int(getattr(dm, "seed", 0))
        fitted = fit_baselines(dm.sets, width, dm.num_classes, self.cnn_epochs, seed, self.names, self.k)
        lengths = {n: dm.tokenizer.n_bases(n) for n in dm.eval_lengths}
        self.by_length = score_lengths(fitted, dm.sets["test"], lengths, width, self.stride)
        out = {}
        for name, scorer in fitted.items():
            out |= {f"baseline/{name}_auroc_L{n}": v for n, v in self.by_length[name].items()}
            out[f"baseline/{name}_{BASELINES[name]}"] = float(scorer.chosen)
            out[f"baseline/{name}_val_auroc"] = scorer.val_curve[scorer.chosen]
        if dm.num_classes == 2:
            for name, report in two_class_reports(fitted, dm.sets, width).items():
                out |= {f"baseline/{name}_{k}": v for k, v in report.items()}
        return out

    def table(self, model: dict[int, dict[str, float]]) -> str:
        """The model's (``model``: its per-length results) and the baselines' test AUROC per length."""
        names = list(self.by_length)
        lines = [f"test AUROC by length (baselines: max over their {self.train_length}-token windows; read"
                 " as the centre crop, each keeps its 1× value)",
                 f"  {'length':>8} {'model':>8}" + "".join(f" {n:>10}" for n in names)]
        for n in sorted(self.by_length[names[0]]):
            own = model.get(n, {}).get("auroc", float("nan"))
            lines.append(f"  {n:>8} {own:>8.4f}" + "".join(f" {self.by_length[k][n]:>10.4f}" for k in names))
        if self.untested:
            lines.append(f"  not tested at {', '.join(map(str, self.untested))} tokens: every test record "
                         "fits whole in the longest length above (a longer crop only adds padding)")
        return "\n".join(lines)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = baseline_datamodule(trainer, "sets")
        if dm is None:
            return
        self.results = self.compute(dm)
        for logger in trainer.loggers:
            logger.log_metrics(self.results)
        lengths = pl_module.length_results() if hasattr(pl_module, "length_results") else {}
        print(self.table(lengths), file=sys.stderr)
