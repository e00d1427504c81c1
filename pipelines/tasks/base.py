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
from collections.abc import Callable, Collection
from dataclasses import asdict
from typing import Any, ClassVar, Literal

import lightning as L
import numpy as np
import torch
from torch import Tensor

from datamodules.config import as_group
from pipelines.console.scrub import scrub_checkpoint
from pipelines.tasks.options import Optim
from posenc import PosencError

#: the spelling of the settings this code writes into checkpoints (``checkpoint["config_version"]``);
#: older checkpoints are upgraded where they are read (:mod:`pipelines.tasks.upgrade`)
CONFIG_VERSION = 6

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
    #: splits whose windows the sweep can score at every length (``pipelines.eval.splits``): "val"
    #: only where the datamodule has ``eval_dataloader("val", n)`` and the baselines below take it
    splits: tuple[str, ...] = ("test",)

    def train_length(self, dm: Any) -> int:
        """The training length, in :attr:`length_unit` (default: the datamodule's ``seq_len`` tokens)."""
        return int(dm.seq_len)

    def n_positions(self, module: Any, length: int) -> int:
        """Number of positions the model sees for a window of ``length`` (sets RoPE scale factors)."""
        return length

    def score(self, module: Any, batch: Any) -> tuple[float, float, Tensor, Tensor]:
        """(metric numerator, denominator, per-position numerator (P,), per-position count (P,));
        by default :meth:`score_windows` summed over the batch's windows."""
        per_window, counts, per_pos, pos_counts = self.score_windows(module, batch)
        return float(per_window.sum()), float(counts.sum()), per_pos, pos_counts

    #: whether :meth:`score_windows` gives per-window parts, so that the sweep can sum the metric per
    #: bootstrap block of the test region where the loader's dataset numbers its windows' blocks
    #: (``window_blocks``; :func:`pipelines.eval.extrapolation.score_loader`)
    scores_windows = False

    def score_windows(self, module: Any, batch: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per window: metric numerator (B,) and denominator (B,), float64, and per position as in
        :meth:`score`; only where :attr:`scores_windows` (a metric additive over windows)."""
        raise NotImplementedError

    def trivial_blocks(self, dm: Any, split: str = "test") -> np.ndarray | None:
        """The trivial baseline's (K, 2) (numerator, denominator) per bootstrap block of ``split``
        (numbered as the loaders' ``window_blocks``), or ``None``: the task has no blocks."""
        return None

    def finish(self, total: float, count: float) -> float:
        return total / count

    def combine(self, parts: list[tuple[Any, Any]]) -> float:
        """The metric over one test length from every batch's (numerator, denominator) of
        :meth:`score`: Σ numerators / Σ denominators via :meth:`finish`. Metrics that do not add up
        over batches (AUROC) override this and return arrays from :meth:`score`."""
        return self.finish(sum(p[0] for p in parts), sum(p[1] for p in parts))

    def baselines(self, dm: Any, split: str = "test") -> dict[str, float]:
        """Reference values of the metric on the same data of ``split`` (one of :attr:`splits`; no
        model), e.g. a Markov chain."""
        return {}

    #: what :meth:`trivial_baseline` is, in words (e.g. "order-0 Markov")
    trivial_name = ""

    def trivial_baseline(self, dm: Any, split: str = "test") -> float | None:
        """The metric of a trivial predictor on the same data of ``split`` (one of :attr:`splits`),
        the zero of *retained gain* (``pipelines.eval.statistics.retained_gain``); ``None``: the task
        defines none."""
        return None

    def finish_curve(self, total: Tensor, count: Tensor) -> np.ndarray:
        c = count.double().numpy()
        return np.where(c > 0, total.double().numpy() / np.where(c > 0, c, 1.0), np.nan)


class TaskModule(L.LightningModule):
    """Base LightningModule of every task: what a task declares about itself, its optimiser, and the
    checkpoint it writes. The network is the task's own; tasks built on the project's Transformer
    extend :class:`~pipelines.tasks.transformer.TransformerTask`.

    Hyperparameters stay primitive: each group is stored as a mapping (an encoding as its
    ``{class_path, init_args}`` spec), so checkpoints load with ``torch.load(weights_only=True)`` and
    rebuild the same model. A task lists the typed groups it takes as ``config_groups``.

    Args:
        optim: AdamW and its schedule (:class:`~pipelines.tasks.options.Optim`).

    Each group is given as its dataclass, or as a mapping over its defaults (saved hyperparameters).
    Flat keys of before the groups are translated where settings come in (configs, checkpoints), not
    here: see :mod:`pipelines.tasks.upgrade.legacy`.
    """

    task_name: ClassVar[str] = ""
    causal: ClassVar[bool] = False
    adapter: ClassVar[TaskAdapter | None] = None
    predictor: ClassVar[Callable[..., Any] | None] = None
    default_datamodule: ClassVar[str] = ""
    predict_input: ClassVar[Literal["sequences", "table"]] = "sequences"
    writes_intervals: ClassVar[bool] = False  # per-base labels that can be written as GFF/BED intervals
    batch_records: ClassVar[bool] = False  # many short records scored together (classification)
    config_groups: ClassVar[dict[str, type]] = {"optim": Optim}
    #: weight names this task's older checkpoints used → today's (``None``: dropped; a name ending in ``.``
    #: is a prefix), applied once where a checkpoint is read (:mod:`pipelines.tasks.upgrade`)
    old_weights: ClassVar[dict[str, str | None]] = {}
    #: settings this task's older checkpoints saved that it no longer takes (dropped where read)
    old_settings: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("task_name")
        if name:
            if name in TASKS and TASKS[name].__qualname__ != cls.__qualname__:
                raise PosencError(f"task name {name!r} is taken by {TASKS[name].__qualname__}")
            TASKS[name] = cls

    def __init__(self, optim: Optim = Optim()) -> None:  # noqa: B008 - frozen: a shared default is safe
        super().__init__()
        self.optim = as_group(Optim, optim, "optim")
        self._base_hparams: dict[str, Any] = {"optim": asdict(self.optim)}
        self.posenc_inference: dict[str, Any] = {}

    def _save_hparams(self, **task_hparams: Any) -> None:
        """Save all hyperparameters, the groups as mappings (call once, from the task)."""
        self.save_hyperparameters({**self._base_hparams, **task_hparams})

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Name the task and the settings' version, and scrub what the checkpoint says about the run
        (home paths, credentials): called last, for every checkpoint, weights-only ones included."""
        checkpoint["posenc_task"] = self.task_name
        checkpoint["config_version"] = CONFIG_VERSION
        scrub_checkpoint(checkpoint)

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
            [{"params": decay, "weight_decay": self.optim.weight_decay},
             {"params": rest, "weight_decay": 0.0}],
            lr=self.optim.lr,
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warm = min(self.optim.warmup_steps, total // 2)

        def schedule(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            frac = (step - warm) / max(1, total - warm)
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def log_by_length(logger: Any, results: dict[int, dict[str, float]], undefined: Collection[int],
                  axis: str = "length") -> None:
    """A test pass's metrics at every test length: ``test/<m>_by_<axis>`` (step = the length: a curve
    in the MLflow UI) and ``test/<m>_L<n>``, and the lengths whose positions the encoding does not
    define as the parameter ``extrapolation/undefined_<axis>s``."""
    for n, values in sorted(results.items()):
        logger.log_metrics({f"test/{k}_by_{axis}": v for k, v in values.items()}, step=n)
        logger.log_metrics({f"test/{k}_L{n}": v for k, v in values.items()})
    if undefined:
        logger.log_hyperparams({f"extrapolation/undefined_{axis}s": ",".join(map(str, sorted(undefined)))})


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
