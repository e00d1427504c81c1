"""Whether a dotted config key a page shows is one the CLI takes today, by its current name.

A key resolves against the constructor signatures of its section's classes, as jsonargparse reads them:
``data.…`` against every datamodule, ``model.…`` against every task (``**kwargs`` followed to the
parent), ``trainer.…`` against Lightning's Trainer, ``register.…`` against RegisterModel; a typed group
(``windows``, ``net``…) must name one of its dataclass fields, and ``model.init_args.pe.init_args.X`` a
parameter of some encoding. A shorthand that starts at a group (``net.attention_window``) resolves in
the section that has the group. A *flat* spelling of a grouped setting (``data.path`` for
``data.init_args.source.path``) is stale even though the CLI still translates it: pages show the name
a config is written with today.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import pkgutil
from typing import Any

PASS_THROUGH = {"callbacks", "logger", "plugins", "strategy", "profiler"}  # class lists: any depth


def _subclasses(base: type) -> set[type]:
    out: set[type] = set()
    for sub in base.__subclasses__():
        out |= {sub} | _subclasses(sub)
    return out


@functools.cache
def section_classes() -> dict[str, tuple[type, ...]]:
    """The classes each config section may name: every datamodule, every task, the Trainer."""
    import lightning as L

    import datamodules
    import pipelines.tasks
    from pipelines.inference.registry import RegisterModel
    from pipelines.tasks.base import TaskModule

    for package in (datamodules, pipelines.tasks):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)
    return {"data": tuple(_subclasses(L.LightningDataModule)), "model": tuple(_subclasses(TaskModule)),
            "trainer": (L.Trainer,), "register": (RegisterModel,)}


def parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword parameters ``cls(...)`` takes, through ``**kwargs`` passed to its parents."""
    out: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = inspect.signature(klass.__init__).parameters
        out.update({n: p for n, p in params.items() if n != "self" and n not in out
                    and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)})
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break
    return out


def groups(cls: type) -> dict[str, type]:
    """{parameter: dataclass} of a class's typed setting groups."""
    found = dict(getattr(cls, "config_groups", None) or {})
    for name, param in parameters(cls).items():
        if dataclasses.is_dataclass(param.annotation) and isinstance(param.annotation, type):
            found.setdefault(name, param.annotation)
    return found


def group_names() -> set[str]:
    return {g for section in ("data", "model") for cls in section_classes()[section] for g in groups(cls)}


@functools.cache
def encoding_parameters() -> frozenset[str]:
    from posenc import all_schemes

    return frozenset(n for cls in all_schemes() for n in parameters(cls))


def flat_spellings(cls: type) -> dict[str, str]:
    """Flat key → ``group.field`` of ``cls`` (a field name the class itself takes is its own)."""
    own = parameters(cls)
    return {f.name: f"{g}.{f.name}" for g, dc in groups(cls).items() for f in dataclasses.fields(dc)
            if f.name not in own}


def _walk(cls: type, parts: list[str]) -> str | None:
    """``None`` when ``parts`` (the key below the section) name a setting of ``cls``, else why not."""
    params, typed = parameters(cls), groups(cls)
    head, rest = parts[0], parts[1:]
    if head == "class_path" and not rest:
        return None
    if head not in params:
        return f"{cls.__name__} takes no {head!r}"
    if head in typed and rest:
        fields = {f.name for f in dataclasses.fields(typed[head])}
        return None if rest[0] in fields else f"{cls.__name__}.{head} has no field {rest[0]!r}"
    if head == "pe" and rest:
        if rest[0] == "class_path" or rest == ["init_args"]:
            return None
        if rest[0] == "init_args" and rest[1] in encoding_parameters():
            return None
        return f"no encoding takes {'.'.join(rest)!r}"
    return None


def key_problem(key: str, layered: dict[str, str] | None = None) -> str | None:
    """Why ``key`` is not a setting the CLI takes by that name today; ``None`` when it is. ``layered``:
    ``{section: class_path}`` of the config files the key is given beside (then only that class counts)."""
    parts = key.removeprefix("--").split(".")
    classes = {**section_classes(), **{s: (_import(c),) for s, c in (layered or {}).items()}}
    if parts[0] in classes:
        section, below = parts[0], parts[1:]
    else:  # a shorthand from a group: net.attention_window
        section = next((s for s in ("model", "data") if any(parts[0] in groups(c) for c in classes[s])), None)
        if section is None:
            return f"{parts[0]!r} is no config section or group"
        below = parts
    if section == "trainer":
        if not below or below[0] in parameters(classes["trainer"][0]):
            return None
        return f"Trainer takes no {below[0]!r}"
    if below[:1] == ["init_args"]:
        below = below[1:]
    if not below:
        return None
    stale = _stale(section, below[0], classes[section])
    if stale:
        return stale
    reasons = [_walk(cls, below) for cls in classes[section]]
    if any(reason is None for reason in reasons):
        return None
    return f"no {section} class takes it ({sorted(set(reasons))[0]})"


def _stale(section: str, name: str, classes: tuple[type, ...]) -> str | None:
    for cls in classes:
        grouped = flat_spellings(cls).get(name)
        if grouped:
            return f"flat spelling: {section}.init_args.{grouped} ({cls.__name__})"
    return None


def _import(class_path: str) -> type:
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def describe(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
