"""Flat datamodule settings (before the typed groups) translated to the groups, where they enter.

A datamodule with typed settings lists them on its class as ``config_groups`` ({parameter: group
dataclass}, see :mod:`datamodules.config`). Each field kept its flat name, so the one mapping
table, flat key → ``group.field``, is read off the dataclasses (:func:`legacy_keys`): for
:class:`~datamodules.timeseries.datamodule.TimeSeriesDataModule`, ``lookback`` → ``windows.lookback``,
``path`` → ``source.path``, ``seed`` → ``loader.seed``… It is applied where settings come in:

* the command line and its config files (:func:`translate_args`: ``--data.init_args.lookback=48`` and
  a YAML whose ``data.init_args`` is flat), before jsonargparse parses them;
* saved datamodule hyperparameters (checkpoints before the groups are flat) and code that builds a
  datamodule from a dict (:func:`nest`);
* readers of saved hyperparameters that want one flat view, old or new (:func:`flatten`).

A flat key given beside its group wins over the group's field (it is the later, narrower setting).
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Mapping
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from posenc import PosencError


def groups_of(cls: type) -> dict[str, type]:
    """{parameter: group dataclass} of a datamodule class (empty for one with flat arguments)."""
    return dict(getattr(cls, "config_groups", None) or {})


def legacy_keys(cls: type) -> dict[str, str]:
    """The mapping table of ``cls``: flat key → ``group.field``."""
    return {f.name: f"{group}.{f.name}" for group, dc in groups_of(cls).items() for f in fields(dc)}


def _as_mapping(value: Any) -> dict[str, Any]:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if hasattr(value, "as_dict"):  # a jsonargparse Namespace
        return dict(value.as_dict())
    return dict(value)


def regroup(cls: type, settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` (flat, grouped or both) with every flat key moved into its group's mapping."""
    groups, table = groups_of(cls), legacy_keys(cls)
    out: dict[str, Any] = {}
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if key in groups:
            if value is not None:
                out[key] = {**out.get(key, {}), **_as_mapping(value)}
        elif key in table:
            flat[key] = value
        else:
            out[key] = value
    for key, value in flat.items():
        group = table[key].split(".")[0]
        out[group] = {**out.get(group, {}), key: value}
    return out


def build_group(dc: type, values: Mapping[str, Any], group: str) -> Any:
    """The ``group`` dataclass from a mapping; an unknown key is one line naming it."""
    known = {f.name for f in fields(dc)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise PosencError(f"data.{group}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    return dc(**values)


def group_default(cls: type, group: str) -> dict[str, Any]:
    """The constructor's default of ``group`` as a mapping (a datamodule may default a group to other
    values than its dataclass's: the genome's loader draws 8192 windows per epoch)."""
    for klass in cls.__mro__:
        param = inspect.signature(klass.__init__).parameters.get(group)
        if param is not None:
            default = param.default
            return asdict(default) if is_dataclass(default) and not isinstance(default, type) else {}
    return {}


def nest(cls: type, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor arguments of ``cls`` from flat and/or grouped settings (saved hyperparameters, a
    config's ``init_args``): every group built as its dataclass over the constructor's default, as
    jsonargparse builds it. Keys starting with ``_`` (LightningCLI's ``_class_path``) are dropped."""
    settings = {k: v for k, v in settings.items() if not str(k).startswith("_")}
    groups = groups_of(cls)
    if not groups:
        return settings
    out = regroup(cls, settings)
    for group, dc in groups.items():
        value = out.get(group)
        if not isinstance(value, dc):
            out[group] = build_group(dc, {**group_default(cls, group), **(value or {})}, group)
    return out


def flatten(hparams: Any, cls: type | None = None) -> dict[str, Any]:
    """One flat view of saved or parsed datamodule settings, old (flat) or new (grouped): each group's
    fields lifted to the top level. ``cls``: the datamodule class (default: the one saved hyperparameters
    name in ``_class_path``)."""
    hparams = _as_mapping(hparams or {})
    if cls is None:
        cls = _project_class(hparams.get("_class_path"))
    groups = groups_of(cls) if cls is not None else {}
    out: dict[str, Any] = {}
    for key, value in hparams.items():
        if key in groups and value is not None:
            out.update(_as_mapping(value))
        else:
            out[key] = value
    return out


# ----------------------------------------------------------------------------- the command line
_DATA_KEY = re.compile(r"--data\.(?:init_args\.)?([A-Za-z_]\w*)(=.*)?", re.S)


def _load_config(value: str) -> tuple[Any, bool]:
    """A ``--config`` value's YAML document and whether it came from a file."""
    path = Path(value)
    try:
        is_file = path.is_file()
    except OSError:  # a YAML string too long or odd for a file name
        is_file = False
    try:
        return yaml.safe_load(path.read_text() if is_file else value), is_file
    except (OSError, yaml.YAMLError):
        return None, is_file


def _class_in(doc: Any) -> str | None:
    data = doc.get("data") if isinstance(doc, dict) else None
    return data.get("class_path") if isinstance(data, dict) else (data if isinstance(data, str) else None)


def data_class(args: list[str]) -> type | None:
    """The datamodule class the arguments name last (a config's ``data.class_path``, ``--data=…`` or
    ``--data.class_path=…``), when it is one of this project's with typed groups; ``None`` otherwise."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            found = _class_in(_load_config(args[i + 1])[0]) or found
        elif arg.startswith("--config="):
            found = _class_in(_load_config(arg.split("=", 1)[1])[0]) or found
        elif arg.startswith(("--data=", "--data.class_path=")):
            found = arg.split("=", 1)[1]
    cls = _project_class(found)
    return cls if cls is not None and groups_of(cls) else None


def _project_class(class_path: Any) -> type | None:
    """The class of a ``datamodules.…`` class path (only this project's datamodules have groups; other
    paths, and ones that do not import, are left to jsonargparse, which names them)."""
    module, _, name = str(class_path or "").rpartition(".")
    if module != "datamodules" and not module.startswith("datamodules."):
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def translate_config(doc: Any, cls: type) -> Any:
    """A config document with its flat ``data.init_args`` keys moved into their groups."""
    data = doc.get("data") if isinstance(doc, dict) else None
    init = data.get("init_args") if isinstance(data, dict) else None
    if not isinstance(init, dict) or not set(init) & set(legacy_keys(cls)):
        return doc
    return {**doc, "data": {**data, "init_args": regroup(cls, init)}}


def _config_value(value: str, cls: type) -> str:
    doc, _ = _load_config(value)
    new = translate_config(doc, cls)
    return value if new is doc else yaml.safe_dump(new, sort_keys=False)


def translate_args(args: list[str]) -> list[str]:
    """Command-line arguments with flat datamodule settings in their groups: ``--data.init_args.K=V``
    (or ``--data.K=V``) → ``--data.init_args.<group>.K=V``, and a ``--config`` whose ``data.init_args``
    is flat replaced by the same document grouped (as a YAML string). Unchanged when the datamodule
    has no groups."""
    cls = data_class(args)
    if cls is None:
        return list(args)
    table, out = legacy_keys(cls), []
    for i, arg in enumerate(args):
        if i > 0 and args[i - 1] == "--config":
            out.append(_config_value(arg, cls))
        elif arg.startswith("--config="):
            out.append("--config=" + _config_value(arg.split("=", 1)[1], cls))
        elif (m := _DATA_KEY.fullmatch(arg)) and m.group(1) in table:
            out.append(f"--data.init_args.{table[m.group(1)]}{m.group(2) or ''}")
        else:
            out.append(arg)
    return _null_fields(out, set(groups_of(cls)))


_GROUP_FIELD = re.compile(r"--data\.(?:init_args\.)?([A-Za-z_]\w*)\.([A-Za-z_]\w*)(?:=(.*))?", re.S)


def _null_fields(args: list[str], groups: set[str]) -> list[str]:
    """``--data.init_args.<group>.<field>=null`` as ``--data.init_args.<group>={"<field>": null}``:
    jsonargparse reads a dotted ``null`` for a dataclass field as the string ``'None'`` (a cache folder
    named None), the mapping form as null; other fields of the group are kept either way."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        m = _GROUP_FIELD.fullmatch(arg)
        value = m.group(3) if m else None
        if m and value is None and i + 1 < len(args) and args[i + 1] == "null":
            value, skip = "null", True
        if m and m.group(1) in groups and value is not None and value.strip() == "null":
            out.append(f'--data.init_args.{m.group(1)}={{"{m.group(2)}": null}}')
        else:
            out.append(arg)
            skip = False
    return out
