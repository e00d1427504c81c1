"""Settings of older code, translated once where they come in: flat keys → typed groups, and class
paths of modules that moved → their new homes. Nothing past the ingress reads the old spellings.

A datamodule or a model (task) with typed settings lists them on its class as ``config_groups``
({parameter: group dataclass}, see :mod:`datamodules.config` and :mod:`pipelines.tasks.options`).
Each field kept its flat name, so the one mapping table, flat key → ``group.field``, is read off the
dataclasses (:func:`legacy_keys`): for :class:`~datamodules.timeseries.datamodule.TimeSeriesDataModule`,
``lookback`` → ``windows.lookback``, ``path`` → ``source.path``, ``seed`` → ``loader.seed``; for a
task, ``d_model`` → ``net.d_model``, ``lr`` → ``optim.lr``… Moved modules are listed in :data:`MOVED`.
Both are applied at the two ingresses:

* the command line and its config files (:func:`translate_args`: ``--data.init_args.lookback=48``,
  ``--model.init_args.d_model=64``, a YAML whose ``data.init_args`` / ``model.init_args`` is flat, a
  ``class_path`` of a moved module), before jsonargparse parses them or imports anything;
* checkpoints, through the versioned upgrade of :mod:`pipelines.tasks.upgrade` (:func:`regroup`,
  :func:`move_class_paths`), before a class path in them is checked or imported.

A flat key given beside its group wins over the group's field (it is the later, narrower setting).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from datamodules.config import as_mapping, groups_of
from pipelines.tasks.upgrade.legacy_rope import rope_overrides, upgrade_rope_specs
from posenc.registry import trusted_class

#: (old module, new module) of the modules that moved; a class path under an old one is read as the new
MOVED: tuple[tuple[str, str], ...] = (
    ("pipelines.eval.claims", "pipelines.studies.claims"),
    ("pipelines.tracking.registry", "pipelines.inference.registry"),
    ("pipelines.tracking.pyfunc", "pipelines.inference.pyfunc"),
    *((f"pipelines.eval.{name}", f"pipelines.studies.{name}") for name in (
        "compare", "compare_report", "compare_runs", "compare_stats", "ltsf", "ltsf_fit", "ltsf_models",
        "ltsf_report", "ltsf_stats", "ltsf_trees", "ts_defaults", "val_choice", "forecast_seeds", "figures",
        "diagnose")),
    ("pipelines.eval.whole_window", "pipelines.tracking.whole_window"),
    ("pipelines.eval.compare_child", "pipelines.eval.sweep_child"),
    ("pipelines.bench", "pipelines.studies.bench"),
    # issue 55: families as folders. A module that became a package keeps its name, so only the classes
    # it defined move (by whole class path); its siblings move by module.
    ("pipelines.tasks.forecast.Forecaster", "pipelines.tasks.forecast.model.Forecaster"),
    ("pipelines.tasks.forecast.ForecastAdapter", "pipelines.tasks.forecast.module.ForecastAdapter"),
    ("pipelines.tasks.forecast.model.ForecastAdapter", "pipelines.tasks.forecast.module.ForecastAdapter"),
    *((f"pipelines.tasks.forecast_{name}", f"pipelines.tasks.forecast.{name}") for name in (
        "baselines", "blend", "layers", "linear", "metrics", "patchtst", "predict")),
    ("pipelines.tasks.dna.DNATask", "pipelines.tasks.dna.base.DNATask"),
    ("pipelines.tasks.dna_predict", "pipelines.tasks.dna.predict"),
    *((f"pipelines.tasks.{name}", f"pipelines.tasks.dna.{name}") for name in (
        "lm", "mlm", "markov", "segment", "classify", "classify_baselines", "classify_causal", "per_length")),
    *((f"pipelines.studies.ltsf_{name}", f"pipelines.studies.ltsf.{name}") for name in (
        "ensemble", "fit", "models", "report", "stats", "trees")),
    *((f"pipelines.studies.compare_{name}", f"pipelines.studies.compare.{name}") for name in (
        "report", "runs", "stats")),
    ("pipelines.ckpt_config", "pipelines.cli.ckpt_config"),
    ("pipelines.config_errors", "pipelines.cli.config_errors"),
    # issue 55: infrastructure on its own floor
    ("datamodules.scrub", "pipelines.console.scrub"),
    ("datamodules.legacy", "pipelines.tasks.upgrade.legacy"),
    ("pipelines.tracking.whole_window", "pipelines.tasks.dna.whole_window"),
)
#: classes folded into another: old class path → (the class it reads as, init args the new one does not take).
#: ``DLinearBaselines`` trained a DLinear inside a callback; DLinear is now a run of its own
#: (configs/ltsf/dlinear.yaml), so a config naming it keeps the callback's other baselines.
FOLDED: dict[str, tuple[str, tuple[str, ...]]] = {
    "pipelines.tasks.forecast_linear.DLinearBaselines": (
        "pipelines.tasks.forecast.baselines.ForecastBaselines", ("epochs", "lr")),
}
_DOTTED = re.compile(r"[A-Za-z_][\w.]*")


def moved(class_path: Any) -> Any:
    """``class_path`` with a moved module's prefix replaced by its new home (by whole dotted components:
    ``pipelines.benchmark`` is not under ``pipelines.bench``), again until nothing moves (a module that moved
    twice); anything else as it is. Nothing is imported."""
    if not isinstance(class_path, str) or not _DOTTED.fullmatch(class_path):
        return class_path
    if class_path in FOLDED:
        return FOLDED[class_path][0]
    for _ in MOVED:  # moved twice: pipelines.eval.ltsf_fit → studies.ltsf_fit → studies.ltsf.fit
        for old, new in MOVED:
            if class_path == old or class_path.startswith(old + "."):
                class_path = new + class_path[len(old):]
                break
        else:
            return class_path
    return class_path


def move_class_paths(value: Any) -> Any:
    """``value`` (a config document, saved hyperparameters) with every dotted string of a moved module
    (``class_path`` values, a callback list's names) replaced by :func:`moved`; a folded class's
    ``init_args`` lose the arguments its new class does not take (:data:`FOLDED`)."""
    if isinstance(value, Mapping):
        class_path, init = value.get("class_path"), value.get("init_args")
        dropped = FOLDED[class_path][1] if isinstance(class_path, str) and class_path in FOLDED else ()
        if dropped and isinstance(init, Mapping):
            value = {**value, "init_args": {k: v for k, v in init.items() if k not in dropped}}
        return {k: move_class_paths(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(move_class_paths(v) for v in value)
    return moved(value)


def legacy_keys(cls: type) -> dict[str, str]:
    """The mapping table of ``cls``: flat key → ``group.field`` (a name the class's own constructor
    takes as an argument stays its own: DLinear's ``revin``, PatchTST's ``linear_path``)."""
    own = set(inspect.signature(cls.__init__).parameters)
    return {f.name: f"{group}.{f.name}" for group, dc in groups_of(cls).items() for f in fields(dc)
            if f.name not in own}


def regroup(cls: type, settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` (flat, grouped or both) with every flat key moved into its group's mapping."""
    groups, table = groups_of(cls), legacy_keys(cls)
    out: dict[str, Any] = {}
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if key in groups:
            if value is not None:
                out[key] = {**out.get(key, {}), **as_mapping(value)}
        elif key in table:
            flat[key] = value
        else:
            out[key] = value
    for key, value in flat.items():
        group = table[key].split(".")[0]
        out[group] = {**out.get(group, {}), key: value}
    return out


# ----------------------------------------------------------------------------- the command line
def _section_key(section: str) -> re.Pattern:
    """``--<section>.init_args.K[=V]`` or ``--<section>.K[=V]``: K and ``=V``."""
    return re.compile(rf"--{section}\.(?:init_args\.)?([A-Za-z_]\w*)(=.*)?", re.S)


# libyaml's safe loader where PyYAML has it (jsonargparse reads configs with it too): the pure-Python one
# made reading a run's configs here a tenth of an in-process CLI run's parse (also pipelines.cli's dump)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_config(value: str) -> Any:
    """A ``--config`` value's YAML document (of a file or the value itself; ``None``: unreadable)."""
    path = Path(value)
    try:
        is_file = path.is_file()
    except OSError:  # a YAML string too long or odd for a file name
        is_file = False
    try:
        return yaml.load(path.read_text() if is_file else value, Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError):
        return None


def _rewrite_config(value: str, change: Callable[[Any], Any]) -> str:
    """A ``--config`` value with ``change`` applied to its document: the same value when nothing
    changed, else the changed document as a YAML string."""
    doc = _load_config(value)
    new = change(doc)
    return value if new == doc else yaml.safe_dump(new, sort_keys=False)


def _class_in(doc: Any, section: str) -> str | None:
    part = doc.get(section) if isinstance(doc, dict) else None
    return part.get("class_path") if isinstance(part, dict) else (part if isinstance(part, str) else None)


def named_class_path(args: list[str], section: str = "data") -> str | None:
    """The class path the arguments name last for ``section``: a config's ``<section>.class_path``,
    ``--<section>=…`` or ``--<section>.class_path=…`` (nothing is imported)."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            found = _class_in(_load_config(args[i + 1]), section) or found
        elif arg.startswith("--config="):
            found = _class_in(_load_config(arg.split("=", 1)[1]), section) or found
        elif arg.startswith((f"--{section}=", f"--{section}.class_path=")):
            found = arg.split("=", 1)[1]
    return found if isinstance(found, str) else None


def section_class(args: list[str], section: str = "data", resolve: Any = None) -> type | None:
    """The class the arguments name last for ``section`` (:func:`named_class_path`), resolved by
    ``resolve`` (class path → class or ``None``; default: this project's datamodules), when it has
    typed groups; ``None`` otherwise."""
    found = named_class_path(args, section)
    cls = resolve(found) if resolve else data_class(found)
    return cls if cls is not None and groups_of(cls) else None


def data_class(class_path: Any) -> type | None:
    """The datamodule class of a class path of this project: under ``datamodules``, or beside the study
    that uses it (the claims' order task); ``None`` for anything else (:func:`project_class`)."""
    return project_class(class_path, "datamodules") or project_class(class_path, "pipelines")


def project_class(class_path: Any, package: str) -> type | None:
    """The class of a ``<package>.…`` class path (only this project's classes have groups; other
    paths, untrusted ones and ones that do not import are left to jsonargparse, which names them)."""
    module = str(class_path or "").rpartition(".")[0]
    if module != package and not module.startswith(f"{package}."):
        return None
    return trusted_class(class_path)  # trusted first, never from the working folder


def translate_config(doc: Any, cls: type, section: str = "data") -> Any:
    """A config document with its flat ``<section>.init_args`` keys moved into their groups."""
    part = doc.get(section) if isinstance(doc, dict) else None
    init = part.get("init_args") if isinstance(part, dict) else None
    if not isinstance(init, dict) or not set(init) & set(legacy_keys(cls)):
        return doc
    return {**doc, section: {**part, "init_args": regroup(cls, init)}}


def translate_cli(args: list[str], resolve_model: Any = None) -> list[str]:
    """Command-line arguments with every old spelling replaced, before they are parsed: moved class
    paths (:func:`move_args`), flat datamodule and model settings (:func:`translate_args`;
    ``resolve_model``: class path → task class or ``None``), then rotary schemes' flat scaling
    arguments (:func:`rope_args`)."""
    return rope_args(translate_args(translate_args(move_args(args)), "model", resolve_model))


def rope_args(args: list[str]) -> list[str]:
    """``args`` with every ``--config`` document's rotary specs and the flat rotary overrides in
    today's spelling (:mod:`pipelines.tasks.upgrade.legacy_rope`)."""
    out, docs = [], []
    for i, arg in enumerate(args):
        flag = arg.startswith("--config=")
        if not flag and not (i > 0 and args[i - 1] == "--config"):
            out.append(arg)
            continue
        value = _rewrite_config(arg.split("=", 1)[1] if flag else arg, upgrade_rope_specs)
        docs.append(_load_config(value))
        out.append("--config=" + value if flag else value)
    return rope_overrides(out, docs)


def move_args(args: list[str]) -> list[str]:
    """``args`` with the class paths of moved modules (:data:`MOVED`) replaced: a value
    (``--model=…``, ``--trainer.callbacks+=…``) and every ``class_path`` of a ``--config``."""
    out = []
    for i, arg in enumerate(args):
        if i > 0 and args[i - 1] == "--config":
            out.append(_rewrite_config(arg, move_class_paths))
        elif arg.startswith("--config="):
            out.append("--config=" + _rewrite_config(arg.split("=", 1)[1], move_class_paths))
        elif arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
            out.append(f"{key}={moved(value)}")
        else:
            out.append(moved(arg))
    return out


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
    grouped = functools.partial(translate_config, cls=cls, section=section)
    for i, arg in enumerate(args):
        if i > 0 and args[i - 1] == "--config":
            out.append(_rewrite_config(arg, grouped))
        elif arg.startswith("--config="):
            out.append("--config=" + _rewrite_config(arg.split("=", 1)[1], grouped))
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
