"""Checkpoints of older code, upgraded once where they are read (:func:`upgrade_checkpoint`).

Every checkpoint a task writes carries ``config_version`` (:data:`~pipelines.tasks.base.CONFIG_VERSION`,
stamped by :meth:`~pipelines.tasks.base.TaskModule.on_save_checkpoint`); one without it is version 1,
anything written before the stamp. Reading a checkpoint
(:func:`pipelines.inference.loading.read_checkpoint`, used by ``load_model``, evaluation and the CLI's
``--ckpt_path``) runs each step from its version up, so the rest of the code sees the current spelling
only:

* 1 → 2: flat hyperparameters of before the typed groups moved into them (``d_model`` →
  ``net.d_model``, the datamodule's ``lookback`` → ``windows.lookback``;
  :mod:`~pipelines.tasks.upgrade.legacy`), and class paths of modules that moved replaced by their new
  homes, before any is checked or imported.
* 2 → 3: PatchTST's linear path of before, an ``nn.Linear`` (``lookback_linear.weight`` (H, L),
  ``.bias`` (H,)), as the forecasters' one :class:`~pipelines.tasks.forecast.blend.LinearPath`
  (``linear.coef`` (L, H), ``linear.intercept`` (H,); its penalty unknown: NaN, i.e. fitted).
* 3 → 4: weights under the names of before, renamed or dropped as each task declares
  (``TaskModule.old_weights``): a forecaster's query token and output layer of before
  :class:`~pipelines.tasks.forecast.layers.ForecastTokens`, DLinear's unused weights of the zero-block
  Transformer it was once built on.
* 4 → 5: a rotary encoding's flat scaling arguments (``scaling: yarn``, ``scale_factor``, ``train_len``,
  β, ``truncate``) as one ``scaling`` mapping (:class:`~posenc.rope_scaling.RopeScaling`;
  :mod:`pipelines.tasks.upgrade.legacy_rope`), Compose's children included.
* 5 → 6: the settings of classes that took typed groups since (the synthetic, order and LTSF
  datamodules; PatchTST's ``linear_path``, now ``output.linear_path`` as every forecaster's) moved into
  them, as in 1 → 2 (the same translation: every flat key its group's field), and the settings a task
  no longer takes dropped (``TaskModule.old_settings``: DLinear's of the Transformer it was built on).

A checkpoint of a newer version than this code is refused (one line).
"""

from __future__ import annotations

from typing import Any

import torch

from datamodules.config import groups_of
from pipelines.tasks.base import CONFIG_VERSION, TASKS
from pipelines.tasks.upgrade.legacy import data_class, move_class_paths, moved, regroup
from pipelines.tasks.upgrade.legacy_rope import upgrade_rope_specs
from posenc import PosencError

VERSION_KEY = "config_version"
#: checkpoint entries with settings (the model's, the datamodule's, the inference description)
SETTINGS = ("hyper_parameters", "datamodule_hyper_parameters", "posenc_inference")


def _grouped(ckpt: dict[str, Any]) -> dict[str, Any]:
    """Version 1 → 2: moved class paths replaced, flat keys moved into their groups."""
    out = {**ckpt, **{k: move_class_paths(ckpt[k]) for k in SETTINGS if isinstance(ckpt.get(k), dict)}}
    task = TASKS.get(str(out.get("posenc_task")))
    if task is not None and isinstance(out.get("hyper_parameters"), dict):
        out["hyper_parameters"] = regroup(task, out["hyper_parameters"])
    data = out.get("datamodule_hyper_parameters")
    dm = data_class(moved(data.get("_class_path"))) if isinstance(data, dict) else None
    if dm is not None:
        out["datamodule_hyper_parameters"] = regroup(dm, data)
    return out


def _one_linear_path(ckpt: dict[str, Any]) -> dict[str, Any]:
    """Version 2 → 3: PatchTST's ``lookback_linear`` as the buffers of its :class:`LinearPath`."""
    state = ckpt.get("state_dict")
    if not isinstance(state, dict) or "lookback_linear.weight" not in state:
        return ckpt
    state = dict(state)
    weight, bias = state.pop("lookback_linear.weight"), state.pop("lookback_linear.bias")  # (H, L), (H,)
    state.update({"linear.coef": weight.T.contiguous(), "linear.intercept": bias,  # (L, H), (H,)
                  "linear.alpha": torch.tensor(float("nan")), "linear.blend": torch.ones(()),
                  "linear.val_mse": torch.full((3,), float("nan"))})
    return {**ckpt, "state_dict": state}


def _state_names(ckpt: dict[str, Any]) -> dict[str, Any]:
    """Version 3 → 4: weights under today's names, as the task declares them (``old_weights``)."""
    old = getattr(TASKS.get(str(ckpt.get("posenc_task"))), "old_weights", {})
    state = ckpt.get("state_dict")
    if not old or not isinstance(state, dict):
        return ckpt
    renamed = {_renamed(key, old): value for key, value in state.items()}
    return {**ckpt, "state_dict": {k: v for k, v in renamed.items() if k is not None}}


def _renamed(key: str, old: dict[str, str | None]) -> str | None:
    """``key``'s name today (``None``: dropped) under ``old`` (a name ending in ``.`` is a prefix)."""
    for name, new in old.items():
        if key == name or (name.endswith(".") and key.startswith(name)):
            return None if new is None else new + key[len(name):]
    return key


def _rope_scaling(ckpt: dict[str, Any]) -> dict[str, Any]:
    """Version 4 → 5: rotary encodings' flat scaling arguments as today's ``scaling`` value."""
    hp = ckpt.get("hyper_parameters")
    return {**ckpt, "hyper_parameters": upgrade_rope_specs(hp)} if isinstance(hp, dict) else ckpt


def _regrouped(ckpt: dict[str, Any]) -> dict[str, Any]:
    """Version 5 → 6: the settings regrouped as in 1 → 2 (classes that took groups since, PatchTST's
    ``linear_path`` now ``output.linear_path``), and the settings the task no longer takes dropped
    (``TaskModule.old_settings``: DLinear's of the Transformer it was once built on)."""
    out = _grouped(ckpt)
    old = set(getattr(TASKS.get(str(out.get("posenc_task"))), "old_settings", ()))
    hp = out.get("hyper_parameters")
    if old and isinstance(hp, dict):
        out["hyper_parameters"] = {k: v for k, v in hp.items() if k not in old}
    return out


#: version → the step that upgrades a checkpoint of that version to the next
STEPS = {1: _grouped, 2: _one_linear_path, 3: _state_names, 4: _rope_scaling, 5: _regrouped}


def upgrade_checkpoint(ckpt: dict[str, Any], source: str) -> dict[str, Any]:
    """``ckpt`` in the current spelling, stamped ``CONFIG_VERSION``.

    Raises:
        PosencError: a checkpoint of a newer (or unreadable) version, named with ``source``.
    """
    version = ckpt.get(VERSION_KEY, 1)
    if not isinstance(version, int) or not 1 <= version <= CONFIG_VERSION:
        raise PosencError(f"{source}: checkpoint config_version {version!r}; this code reads 1 to "
                          f"{CONFIG_VERSION} (a newer posenc wrote it)")
    check_groups(ckpt, source)
    for step in range(version, CONFIG_VERSION):
        ckpt = STEPS[step](ckpt)
    return {**ckpt, VERSION_KEY: CONFIG_VERSION}


def check_groups(ckpt: dict[str, Any], source: str) -> None:
    """The settings entries are mappings, and so is each settings group of the checkpoint's task
    (``net``, ``optim``…): a crafted or damaged file with ``net: "evil"`` is one line, not a traceback
    from whatever reads it first.

    Raises:
        PosencError: ``source`` and the entry or group.
    """
    for key in SETTINGS:
        if ckpt.get(key) is not None and not isinstance(ckpt[key], dict):
            raise PosencError(f"{source}: checkpoint entry {key!r} is a {type(ckpt[key]).__name__}, not a "
                              "mapping: not a checkpoint this code wrote")
    task = TASKS.get(str(ckpt.get("posenc_task")))
    hparams = ckpt.get("hyper_parameters") or {}
    for group in groups_of(task) if task is not None else {}:
        value = hparams.get(group)
        if value is not None and not isinstance(value, dict):
            raise PosencError(f"{source}: hyper_parameters.{group} is a {type(value).__name__} "
                              f"({str(value)[:40]!r}), not a mapping of settings: not a checkpoint this "
                              "code wrote")


__all__ = ["STEPS", "VERSION_KEY", "check_groups", "upgrade_checkpoint"]
