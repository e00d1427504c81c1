"""Tasks: one module per task, each a :class:`~pipelines.tasks.base.TaskModule` that owns its metrics,
baselines, extrapolation adapter, predictor and data description; those built on the project's
Transformer extend :class:`~pipelines.tasks.transformer.TransformerTask`.

Defining a ``TaskModule`` subclass with a ``task_name`` registers it in :data:`TASKS`; the built-in
tasks are imported here, so :func:`task_class` knows them all. A task of your own registers as soon as
its module is imported (name it in a config's ``model.class_path`` and the CLI imports it).
"""

from pipelines.tasks.base import TASKS, TaskAdapter, TaskModule
from pipelines.tasks.dna.classify import SequenceClassifier
from pipelines.tasks.dna.lm import DNALanguageModel
from pipelines.tasks.dna.mlm import MaskedDNAModel
from pipelines.tasks.dna.segment import FrameSegmenter
from pipelines.tasks.forecast.model import Forecaster
from pipelines.tasks.transformer import TransformerTask
from posenc import PosencError

BUILTIN = (DNALanguageModel, MaskedDNAModel, FrameSegmenter, SequenceClassifier, Forecaster)


def task_class(name: str | None) -> type[TaskModule]:
    """The task class registered as ``name`` (a checkpoint's ``posenc_task``)."""
    if name not in TASKS:
        raise PosencError(f"unknown task {name!r}; known tasks: {sorted(TASKS)} (a checkpoint without "
                          "'posenc_task' was not saved by a posenc task module; a task of your own must be "
                          "imported before loading)")
    return TASKS[name]


__all__ = ["BUILTIN", "TASKS", "TaskAdapter", "TaskModule", "TransformerTask", "task_class"]
