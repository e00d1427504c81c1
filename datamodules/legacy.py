"""Flat settings (before the typed groups) translated to the groups, where they enter.

A datamodule or a model (task) with typed settings lists them on its class as ``config_groups``
({parameter: group dataclass}, see :mod:`datamodules.config` and :mod:`pipelines.tasks.options`).
Each field kept its flat name, so the one mapping table, flat key → ``group.field``, is read off the
dataclasses (:func:`legacy_keys`): for :class:`~datamodules.timeseries.datamodule.TimeSeriesDataModule`,
``lookback`` → ``windows.lookback``, ``path`` → ``source.path``, ``seed`` → ``loader.seed``; for a
task, ``d_model`` → ``net.d_model``, ``lr`` → ``optim.lr``… It is applied where settings come in:

* the command line and its config files (:func:`translate_args`: ``--data.init_args.lookback=48``,
  ``--model.init_args.d_model=64`` and a YAML whose ``data.init_args`` / ``model.init_args`` is
  flat), before jsonargparse parses them;
* saved datamodule hyperparameters (checkpoints before the groups are flat) and code that builds a
  datamodule from a dict (:func:`nest`); a model folds flat keys into its groups itself, when built
  (:func:`fold`: checkpoints and registered models from before load unchanged);
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
    """The mapping table of ``cls``: flat key → ``group.field`` (a name the class's own constructor
    takes as an argument stays its own: DLinear's ``revin``, PatchTST's ``linear_path``)."""
    own = set(inspect.signature(cls.__init__).parameters)
    return {f.name: f"{group}.{f.name}" for group, dc in groups_of(cls).items() for f in fields(dc)
            if f.name not in own}


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


def build_group(dc: type, values: Mapping[str, Any], group: str, section: str = "data") -> Any:
    """The ``group`` dataclass from a mapping; an unknown key is one line naming it."""
    known = {f.name for f in fields(dc)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise PosencError(f"{section}.init_args.{group}.{unknown[0]}: unknown key (known: "
                          f"{', '.join(sorted(known))})")
    return dc(**values)


def fold(groups: Mapping[str, type], settings: Mapping[str, Any], section: str = "model") -> dict[str, Any]:
    """Constructor arguments with the flat keys of ``groups``' fields folded into their group, each
    group built as its dataclass (given as one, as a mapping such as saved hyperparameters, or
    ``None``: its defaults); a flat key wins over its group's field. Other keys are returned as they
    are (for the next constructor up). How a model takes the flat settings of before."""
    table = {f.name: group for group, dc in groups.items() for f in fields(dc)}
    out = {k: v for k, v in settings.items() if k not in table}
    for group, dc in groups.items():
        value, flat = out.get(group), {k: v for k, v in settings.items() if table.get(k) == group}
        if not isinstance(value, dc) or flat:
            base = _as_mapping(value) if value is not None else {}
            out[group] = build_group(dc, {**base, **flat}, group, section)
    return out


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
def _section_key(section: str) -> re.Pattern:
    """``--<section>.init_args.K[=V]`` or ``--<section>.K[=V]``: K and ``=V``."""
    return re.compile(rf"--{section}\.(?:init_args\.)?([A-Za-z_]\w*)(=.*)?", re.S)


# libyaml's safe loader where PyYAML has it (jsonargparse reads configs with it too): the pure-Python one
# made reading a run's configs here a tenth of an in-process CLI run's parse (also pipelines.cli's dump)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_config(value: str) -> tuple[Any, bool]:
    """A ``--config`` value's YAML document and whether it came from a file."""
    path = Path(value)
    try:
        is_file = path.is_file()
    except OSError:  # a YAML string too long or odd for a file name
        is_file = False
    try:
        return yaml.load(path.read_text() if is_file else value, Loader=SAFE_LOADER), is_file
    except (OSError, yaml.YAMLError):
        return None, is_file


def _class_in(doc: Any, section: str) -> str | None:
    part = doc.get(section) if isinstance(doc, dict) else None
    return part.get("class_path") if isinstance(part, dict) else (part if isinstance(part, str) else None)


def section_class(args: list[str], section: str = "data", resolve: Any = None) -> type | None:
    """The class the arguments name last for ``section`` (a config's ``<section>.class_path``,
    ``--<section>=…`` or ``--<section>.class_path=…``), resolved by ``resolve`` (class path → class or
    ``None``; default: this project's datamodules), when it has typed groups; ``None`` otherwise."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            found = _class_in(_load_config(args[i + 1])[0], section) or found
        elif arg.startswith("--config="):
            found = _class_in(_load_config(arg.split("=", 1)[1])[0], section) or found
        elif arg.startswith((f"--{section}=", f"--{section}.class_path=")):
            found = arg.split("=", 1)[1]
    cls = (resolve or _project_class)(found)
    return cls if cls is not None and groups_of(cls) else None


def data_class(args: list[str]) -> type | None:
    """The datamodule class the arguments name last, when it is one of this project's with typed
    groups (:func:`section_class`)."""
    return section_class(args, "data")


def project_class(class_path: Any, package: str) -> type | None:
    """The class of a ``<package>.…`` class path (only this project's classes have groups; other
    paths, and ones that do not import, are left to jsonargparse, which names them)."""
    module, _, name = str(class_path or "").rpartition(".")
    if module != package and not module.startswith(f"{package}."):
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _project_class(class_path: Any) -> type | None:
    return project_class(class_path, "datamodules")


def translate_config(doc: Any, cls: type, section: str = "data") -> Any:
    """A config document with its flat ``<section>.init_args`` keys moved into their groups."""
    part = doc.get(section) if isinstance(doc, dict) else None
    init = part.get("init_args") if isinstance(part, dict) else None
    if not isinstance(init, dict) or not set(init) & set(legacy_keys(cls)):
        return doc
    return {**doc, section: {**part, "init_args": regroup(cls, init)}}


def _config_value(value: str, cls: type, section: str) -> str:
    doc, _ = _load_config(value)
    new = translate_config(doc, cls, section)
    return value if new is doc else yaml.safe_dump(new, sort_keys=False)


def translate_args(args: list[str], section: str = "data", resolve: Any = None) -> list[str]:
    """Command-line arguments with flat ``section`` settings in their groups: ``--data.init_args.K=V``
    (or ``--data.K=V``) → ``--data.init_args.<group>.K=V``, and a ``--config`` whose ``data.init_args``
    is flat replaced by the same document grouped (as a YAML string). Unchanged when the class (found
    by :func:`section_class` with ``resolve``) has no groups. ``section="model"`` does the same for
    the model's settings."""
    cls = section_class(args, section, resolve)
    if cls is None:
        return list(args)
    table, key, out = legacy_keys(cls), _section_key(section), []
    for i, arg in enumerate(args):
        if i > 0 and args[i - 1] == "--config":
            out.append(_config_value(arg, cls, section))
        elif arg.startswith("--config="):
            out.append("--config=" + _config_value(arg.split("=", 1)[1], cls, section))
        elif (m := key.fullmatch(arg)) and m.group(1) in table:
            out.append(f"--{section}.init_args.{table[m.group(1)]}{m.group(2) or ''}")
        else:
            out.append(arg)
    return _null_fields(out, set(groups_of(cls)), section)


def _null_fields(args: list[str], groups: set[str], section: str) -> list[str]:
    """``--data.init_args.<group>.<field>=null`` as ``--data.init_args.<group>={"<field>": null}``:
    jsonargparse reads a dotted ``null`` for a dataclass field as the string ``'None'`` (a cache folder
    named None), the mapping form as null; other fields of the group are kept either way."""
    group_field = re.compile(rf"--{section}\.(?:init_args\.)?([A-Za-z_]\w*)\.([A-Za-z_]\w*)(?:=(.*))?", re.S)
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        m = group_field.fullmatch(arg)
        value = m.group(3) if m else None
        if m and value is None and i + 1 < len(args) and args[i + 1] == "null":
            value, skip = "null", True
        if m and m.group(1) in groups and value is not None and value.strip() == "null":
            out.append(f'--{section}.init_args.{m.group(1)}={{"{m.group(2)}": null}}')
        else:
            out.append(arg)
            skip = False
    return out
