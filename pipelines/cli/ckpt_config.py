"""A checkpoint's saved hyperparameters as the model section of a config, for ``--ckpt_path``.

``python -m pipelines.train test|validate|predict|fit --config C --ckpt_path P``: Lightning's CLI
parses ``P``'s ``hyper_parameters`` over the parsed config as the ``model`` section, so that the
checkpoint, not the config, decides what model its weights are loaded into. It expects them either
flat for a fixed model class, or with the ``_class_path`` that its own instantiator saves. This
project's tasks save them as their typed groups (``net``, ``optim``, …) and the encoding as its
``{class_path, init_args}`` spec, with no ``_class_path``, and are configured in subclass mode:
parsed as they are, jsonargparse tries them against ``LightningModule`` and refuses every key.
:func:`checkpoint_model` gives them as ``{class_path, init_args}`` of the task class instead.

What the checkpoint decides and what the config (and command line) still decides:

* **the task class**: the config's ``model.class_path``; the checkpoint's ``posenc_task`` must be the
  same task, else one line naming both. (Lightning lets a saved ``_class_path`` replace the config's
  class; here the config's callbacks and data are made for its task, so another task is refused.)
* **the architecture**: every hyperparameter the checkpoint saved overrides the config's model section,
  the command line's ``--model.*`` included (Lightning's order). A group the checkpoint gives is taken
  whole: a field it lacks (saved before the field existed, or a flat checkpoint of before the groups)
  is the class default, which is what that model was built with. A top-level key it lacks stays as
  configured;
* **not from the checkpoint**: ``attention`` (how, not what, the model computes, see
  :mod:`pipelines.tasks.options`: a test on a GPU may turn ``compile`` on) and Lightning's private
  keys (``_instantiator``). The values the datamodule links to the model (``vocab_size``,
  ``lookback``, …) are parsed but the link sets them from the data when the model is built: data
  that does not fit the checkpoint fails when its weights load (:func:`weights_mismatch`);
* data, trainer, logger and everything else: the config.
"""

from __future__ import annotations

import re
from typing import Any

from datamodules.config import group_default, groups_of
from pipelines.safety import check_plain_names
from pipelines.tasks.base import TASKS
from pipelines.tasks.resources import check_checkpoint
from posenc import PosencError

#: groups taken from the config even when the checkpoint saved them (see the module docstring)
CONFIG_GROUPS = ("attention",)


def class_path_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def task_for(ckpt: dict[str, Any], configured: type | None, class_path: str, source: str) -> type | None:
    """The task class the checkpoint's hyperparameters are parsed for: ``configured``, the task the
    config's ``model.class_path`` (``class_path``) names, when the checkpoint's ``posenc_task`` is the
    same task or missing; ``None`` when neither is a task (left to Lightning).

    Raises:
        PosencError: the checkpoint's task is not the config's model (one line naming both).
    """
    saved = ckpt.get("posenc_task")
    if configured is None and not saved:
        return None
    if configured is not None and saved in (None, "", configured.task_name):
        return configured
    theirs = TASKS.get(saved)
    named = f"{class_path_of(theirs)} ({saved!r})" if theirs else repr(saved)
    mine = f"{class_path_of(configured)} ({configured.task_name!r})" if configured else class_path
    raise PosencError(f"{source}: the checkpoint is a {named} model, the config's model is {mine}; "
                      "set model.class_path to the checkpoint's class")


def checkpoint_init_args(cls: type, hparams: dict[str, Any]) -> dict[str, Any]:
    """The (upgraded, grouped: :mod:`pipelines.tasks.upgrade`) checkpoint's hyperparameters as ``cls``'s
    ``init_args``: each given group completed with the class defaults; ``attention`` and ``_``-keys
    dropped."""
    out = {k: v for k, v in hparams.items() if not str(k).startswith("_") and k not in CONFIG_GROUPS}
    for group in groups_of(cls):
        if group in CONFIG_GROUPS:
            out.pop(group, None)
        elif isinstance(out.get(group), dict):
            out[group] = {**group_default(cls, group), **out[group]}
    return out


def checkpoint_model(ckpt: dict[str, Any], configured: type | None, class_path: str,
                     source: str) -> dict[str, Any] | None:
    """The model section (``{class_path, init_args}``) that ``ckpt``'s hyperparameters give; ``None``
    when neither the config's model nor the checkpoint is a task (left to Lightning). A model whose
    weights alone cannot fit in memory is refused before it is built (as ``load_model`` does).

    Raises:
        PosencError: another task than the config's, or a model too large for this machine.
    """
    cls = task_for(ckpt, configured, class_path, source)
    hparams = dict(ckpt.get("hyper_parameters") or {})
    if cls is None or not hparams:
        return None
    check_plain_names(cls, hparams, source)
    check_checkpoint(hparams, source)
    return {"class_path": class_path_of(cls), "init_args": checkpoint_init_args(cls, hparams)}


_SIZE = re.compile(r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\((\[[^\]]*\])\) from "
                   r"checkpoint, the shape in current model is torch\.Size\((\[[^\]]*\])\)")


def weights_mismatch(exc: BaseException, ckpt_path: Any) -> str | None:
    """One line for weights that do not fit the model built (Lightning's ``load_state_dict`` error),
    e.g. a datamodule whose linked ``lookback`` differs from the checkpoint's; ``None`` otherwise."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or "Error(s) in loading state_dict" not in text:
        return None
    found = _SIZE.search(text)
    what = (f"{found.group(1)} is {found.group(2)} in the checkpoint, {found.group(3)} in the model"
            if found else text.splitlines()[-1].strip()[:200])
    return (f"ckpt_path {ckpt_path}: the weights do not fit the model this config builds ({what}); "
            "the data's linked settings (vocab, lookback, horizon, …) must be the checkpoint's")
