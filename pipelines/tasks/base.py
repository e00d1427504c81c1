"""What every task shares, and what each task declares about itself.

A task is one module under ``pipelines/tasks/``: a :class:`TaskModule` subclass that owns its
extension points, declared on the class so nothing else in the project names tasks:

* ``task_name``: its key in checkpoints (``posenc_task``) and in :data:`TASKS`, the registry that
  loading a checkpoint consults. Defining a subclass with a ``task_name`` registers it.
* ``adapter``: how the length-extrapolation sweep scores it (a :class:`TaskAdapter`), or ``None``.
* ``predictor``: the function behind ``model.predict(data)`` (records/table in, DataFrame out).
* ``default_datamodule``: the datamodule class path used when a checkpoint is evaluated without a config.
* :meth:`TaskModule.describe_data` / :meth:`TaskModule.input_example`: what inference needs besides
  the weights (saved in every checkpoint) and the input example of the MLflow signature.
* ``predict_input`` / ``writes_intervals`` / ``batch_records``: how ``pipelines.inference.predict``
  reads inputs and writes outputs for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, ClassVar, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import MLFlowLogger
from torch import Tensor

from datamodules.scrub import scrub_checkpoint
from pipelines.tasks.options import AttentionOptions
from posenc import PosencError, PositionalEncoding, build_encoding
from posenc.nn import Transformer
from posenc.nn.attention import check_window
from posenc.registry import EncodingFactory

#: ``{task_name: TaskModule subclass}``; filled as task classes are defined (``pipelines.tasks.task_class``
#: looks tasks up after importing the built-in ones).
TASKS: dict[str, type[TaskModule]] = {}


class TaskAdapter:
    """How the length-extrapolation sweep scores one task (``TaskModule.adapter``): which datamodule
    option sets the test lengths, how a batch is scored, how many positions the model sees."""

    metric = "loss"
    higher_is_better = False
    length_key = "eval_lengths"  # datamodule argument listing the test lengths
    length_unit = "tokens"
    position_label = "position in window"

    def train_length(self, dm: Any) -> int:
        raise NotImplementedError

    def n_positions(self, module: Any, length: int) -> int:
        """Number of positions the model sees for a window of ``length`` (sets RoPE scale factors)."""
        return length

    def score(self, module: Any, batch: Any) -> tuple[float, float, Tensor, Tensor]:
        """(metric numerator, denominator, per-position numerator (P,), per-position count (P,))."""
        raise NotImplementedError

    def finish(self, total: float, count: float) -> float:
        return total / count

    def combine(self, parts: list[tuple[Any, Any]]) -> float:
        """The metric over one test length from every batch's (numerator, denominator) of
        :meth:`score`: Σ numerators / Σ denominators via :meth:`finish`. Metrics that do not add up
        over batches (AUROC) override this and return arrays from :meth:`score`."""
        return self.finish(sum(p[0] for p in parts), sum(p[1] for p in parts))

    def baselines(self, dm: Any) -> dict[str, float]:
        """Reference values of the metric on the same test data (no model), e.g. a Markov chain."""
        return {}

    #: what :meth:`trivial_baseline` is, in words (e.g. "order-0 Markov")
    trivial_name = ""

    def trivial_baseline(self, dm: Any) -> float | None:
        """The metric of a trivial predictor on the same test data, the zero of *retained gain*
        (``pipelines.eval.statistics.retained_gain``); ``None``: the task defines none."""
        return None

    def finish_curve(self, total: Tensor, count: Tensor) -> np.ndarray:
        c = count.double().numpy()
        return np.where(c > 0, total.double().numpy() / np.where(c > 0, c, 1.0), np.nan)


class TaskModule(L.LightningModule):
    """Base LightningModule: builds the Transformer with its positional encoding.

    Hyperparameters stay primitive: the encoding is stored as its ``{class_path, init_args}``
    spec, so checkpoints load with ``torch.load(weights_only=True)`` and rebuild the same scheme.

    Args:
        d_model: model width.
        n_heads: attention heads.
        n_layers: Transformer blocks.
        pe: the positional encoding, given as a class (YAML ``class_path``/``init_args`` without
            d_model/n_heads, which come from this model); ``None`` means no encoding.
        d_ff: MLP width (default 4·d_model).
        dropout: dropout rate (attention, MLP and the embedding sum).
        embedding_dropout: dropout on the embedding + encoding sum alone (default: ``dropout``).
        scale_embedding: multiply token embeddings by √d_model before the encoding.
        lr: peak AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: linear warm-up steps before cosine decay.
        log_scale_len: L0 (the training length) of the log-length attention temperature: a query
            attending n > L0 keys has its logits multiplied by log n / log L0
            (:mod:`posenc.nn.temperature`); ``None``: off.
        attention: how the attention runs (kernels, ``compile``; :class:`AttentionOptions`); saved
            as a mapping, and a checkpoint from before it existed loads with the defaults.
        attention_window: local attention window w of every layer: query i attends only keys with
            |i − j| < w (LM-Infinite's local branch, :mod:`posenc.nn.attention`); with w = the training
            length, training is unchanged and longer inputs never show a distance training did not.
            ``None``: every key.
    """

    task_name: ClassVar[str] = ""
    causal: ClassVar[bool] = False
    adapter: ClassVar[TaskAdapter | None] = None
    predictor: ClassVar[Callable[..., Any] | None] = None
    default_datamodule: ClassVar[str] = ""
    predict_input: ClassVar[Literal["sequences", "table"]] = "sequences"
    writes_intervals: ClassVar[bool] = False  # per-base labels that can be written as GFF/BED intervals
    batch_records: ClassVar[bool] = False  # many short records scored together (classification)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("task_name")
        if name:
            if name in TASKS and TASKS[name].__qualname__ != cls.__qualname__:
                raise PosencError(f"task name {name!r} is taken by {TASKS[name].__qualname__}")
            TASKS[name] = cls

    def __init__(
        self,
        d_model: int = 128,
        n_heads: int = 8,
        n_layers: int = 4,
        pe: EncodingFactory | None = None,
        d_ff: int | None = None,
        dropout: float = 0.0,
        scale_embedding: bool = False,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 100,
        log_scale_len: int | None = None,
        attention: AttentionOptions = AttentionOptions(),  # noqa: B008 - frozen: a shared default is safe
        embedding_dropout: float | None = None,
        attention_window: int | None = None,
    ) -> None:
        super().__init__()
        attention = AttentionOptions.of(attention)
        self._base_hparams = {
            "d_model": d_model, "n_heads": n_heads, "n_layers": n_layers, "d_ff": d_ff,
            "dropout": dropout, "scale_embedding": scale_embedding, "lr": lr,
            "weight_decay": weight_decay, "warmup_steps": warmup_steps, "log_scale_len": log_scale_len,
            "attention": asdict(attention),
        }
        if embedding_dropout is not None:  # only when set: checkpoints without it load as before
            self._base_hparams["embedding_dropout"] = embedding_dropout
        if attention_window is not None:  # likewise
            self._base_hparams["attention_window"] = check_window(attention_window, "model.attention_window")
        encoding = build_encoding(pe, d_model, n_heads)
        self.backbone = Transformer(d_model, n_heads, n_layers, encoding, d_ff, dropout, causal=self.causal,
                                    scale_embedding=scale_embedding, log_scale_len=log_scale_len,
                                    embedding_dropout=embedding_dropout, window=attention_window,
                                    **asdict(attention))
        self.posenc_inference: dict[str, Any] = {}

    def _save_hparams(self, **task_hparams: Any) -> None:
        """Save all hyperparameters, the encoding as its primitive spec (call once, from the task)."""
        hp = {**self._base_hparams, **task_hparams, "pe": self.pe.spec()}
        self.save_hyperparameters(hp)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Name the task, and scrub what the checkpoint says about the run (home paths, credentials):
        called last, for every checkpoint, weights-only ones included."""
        checkpoint["posenc_task"] = self.task_name
        scrub_checkpoint(checkpoint)

    @property
    def pe(self) -> PositionalEncoding:
        return self.backbone.pe

    @property
    def d_model(self) -> int:
        """The model width D (of the backbone, its embeddings and its outputs)."""
        return int(self._base_hparams["d_model"])

    # ------------------------------------------------------------------ inference hooks
    def describe_data(self, dm: Any) -> dict[str, Any]:
        """A primitive (``weights_only``-loadable) description of the training data that inference
        needs (tokenizer, class names, columns and scalers); stored in every checkpoint."""
        return {}

    def input_example(self, dm: Any) -> Any:
        """A small input for the MLflow model signature (what ``predict`` takes)."""
        raise NotImplementedError(f"{type(self).__name__} gives no input example")

    def predict(self, data: Any, **kwargs: Any) -> Any:
        """The task's predictions on new data as a DataFrame (its ``predictor``), in eval mode."""
        if type(self).predictor is None:
            raise PosencError(f"task {self.task_name!r} has no predictor")
        was_training = self.training
        self.eval()
        try:
            return type(self).predictor(self, data, **kwargs)
        finally:
            self.train(was_training)

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self):
        decay = [p for n, p in self.named_parameters() if p.dim() >= 2 and "pe." not in n]
        rest = [p for n, p in self.named_parameters() if not (p.dim() >= 2 and "pe." not in n)]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay},
             {"params": rest, "weight_decay": 0.0}],
            lr=self.hparams.lr,
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warm = min(self.hparams.warmup_steps, total // 2)

        def schedule(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            frac = (step - warm) / max(1, total - warm)
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def mlflow_loggers(trainer: Any) -> list[MLFlowLogger]:
    """The trainer's MLflow loggers (where a run's tags and artifacts go), on every rank."""
    return [lg for lg in trainer.loggers if isinstance(lg, MLFlowLogger)]


def baseline_datamodule(trainer: Any, needs: str) -> Any | None:
    """The datamodule a baseline callback fits and scores after testing, or ``None`` to skip: only on
    rank 0 (DDP: a baseline is computed and logged once) and only a datamodule with attribute ``needs``
    (the baseline's data: ``sets``, ``region_codes``, ``windows``)."""
    dm = trainer.datamodule
    if not getattr(trainer, "is_global_zero", True) or dm is None or not hasattr(dm, needs):
        return None
    return dm


def check_task(checkpoint: dict[str, Any], expected: str, source: str) -> None:
    """Raise a clear error when a checkpoint was trained for another task."""
    got = checkpoint.get("posenc_task")
    if got != expected:
        raise PosencError(f"{source}: checkpoint is for task {got!r}, expected {expected!r}")


def positions(length: int, device: torch.device) -> Tensor:
    """Integer positions 0..length-1 (T,), passed explicitly to the model."""
    return torch.arange(length, device=device)


__all__ = ["TASKS", "TaskAdapter", "TaskModule", "check_task", "positions"]
