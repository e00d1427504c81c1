"""What every datamodule's typed settings share: the ``loader`` group and the checks of the groups.

A datamodule takes its settings as a few small frozen dataclasses (groups), each read by jsonargparse
from its own YAML block (``data.init_args.<group>.<field>``) and checked when built, with one-line
errors naming the full key (``data.init_args.windows.lookback must be ≥ 1, got 0``). The groups a datamodule
takes are listed on its class as ``config_groups`` ({parameter: dataclass}), and so are a model's
(:mod:`pipelines.tasks.options`); :func:`build_groups` builds them from saved settings (mappings). The
flat form of the same settings (before the groups) is translated where it comes in, by
:mod:`pipelines.tasks.upgrade.legacy`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Any

from posenc import PosencError


def at_least(group: str, section: str = "data", **values: tuple[int | float | None, int | float]) -> None:
    """``name=(value, least)`` for fields of ``<section>.init_args.<group>``: one line naming the first
    below its least (``None`` values are not checked). Also the model's groups (``section="model"``)."""
    for name, (value, least) in values.items():
        if value is not None and value < least:
            raise PosencError(f"{section}.init_args.{group}.{name}: must be ≥ {least}, got {value}")


def one_of(group: str, name: str, value: Any, allowed: tuple[Any, ...]) -> None:
    """One line naming ``data.init_args.<group>.<name>`` when ``value`` is not in ``allowed``."""
    if value not in allowed:
        raise PosencError(f"data.init_args.{group}.{name}: must be one of {', '.join(map(str, allowed))}, "
                          f"got {value!r}")


def as_mapping(value: Any) -> dict[str, Any]:
    """A group (dataclass, jsonargparse ``Namespace`` or mapping) as a plain dict."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if hasattr(value, "as_dict"):  # a jsonargparse Namespace
        return dict(value.as_dict())
    return dict(value or {})


def groups_of(cls: type) -> dict[str, type]:
    """{parameter: group dataclass} of a datamodule or task class (empty for one with flat arguments)."""
    return dict(getattr(cls, "config_groups", None) or {})


def group_of(cls: type, name: str) -> str | None:
    """The group of ``cls`` with a field ``name`` (``None``: no group has one)."""
    return next((group for group, dc in groups_of(cls).items() if name in {f.name for f in fields(dc)}), None)


def as_group(dc: type, value: Any, group: str, section: str = "model") -> Any:
    """``value`` as the ``group`` dataclass: given as one, or as a mapping (saved hyperparameters) over
    the dataclass's defaults (``None``: its defaults); an unknown key is one line naming it."""
    if isinstance(value, dc):
        return value
    values = dict(value or {})
    known = {f.name for f in fields(dc)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise PosencError(f"{section}.init_args.{group}.{unknown[0]}: unknown key (known: "
                          f"{', '.join(sorted(known))})")
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


def build_groups(cls: type, settings: Mapping[str, Any], section: str = "data") -> dict[str, Any]:
    """Constructor arguments of ``cls`` from grouped settings (saved hyperparameters, a config's
    ``init_args``): every group built as its dataclass over the constructor's default, as jsonargparse
    builds it. Keys starting with ``_`` (LightningCLI's ``_class_path``) are dropped."""
    out = {k: v for k, v in settings.items() if not str(k).startswith("_")}
    for group, dc in groups_of(cls).items():
        value = out.get(group)
        if not isinstance(value, dc):
            out[group] = as_group(dc, {**group_default(cls, group), **dict(value or {})}, group, section)
    return out


@dataclass(frozen=True)
class Loader:
    """How batches are drawn (every datamodule's ``loader`` group).

    Attributes:
        batch_size: windows per batch.
        samples_per_epoch: random training windows per epoch (``None``: every window once, where
            the datamodule allows it).
        num_workers: DataLoader worker processes.
        seed: seed of the training-window sampler (and of any augmentation).
    """

    batch_size: int = 64
    samples_per_epoch: int | None = None
    num_workers: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        at_least("loader", batch_size=(self.batch_size, 1), num_workers=(self.num_workers, 0),
                 samples_per_epoch=(1 if self.samples_per_epoch is None else self.samples_per_epoch, 1))
