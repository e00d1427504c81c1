"""What every datamodule's typed settings share: the ``loader`` group and the checks of the groups.

A datamodule takes its settings as a few small frozen dataclasses (groups), each read by jsonargparse
from its own YAML block (``data.init_args.<group>.<field>``) and checked when built, with one-line
errors naming the full key (``data.init_args.windows.lookback must be ≥ 1, got 0``). The groups a datamodule
takes are listed on its class as ``config_groups`` ({parameter: dataclass}); the flat form of the
same settings (before the groups) is translated by :mod:`datamodules.legacy`.
"""

from __future__ import annotations

from dataclasses import dataclass
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
