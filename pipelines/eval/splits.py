"""Which windows a length sweep scores: the test split (default) or the validation split.

The project's rule is that a result is *chosen on validation and read once on test*. The sweep of
:mod:`pipelines.eval.extrapolation` scores every length over the same bases of one split: with
``split="test"`` the datamodule's test loaders (one per length), with ``split="val"`` its
``eval_dataloader("val", n)`` — windows of n tokens tiling the evaluated span of the validation
split, aligned to the longest length like the test loaders, so every length covers the same
validation bases. A task scores validation windows only where its adapter says so
(:attr:`~pipelines.tasks.base.TaskAdapter.splits`: its trivial baseline and reference baselines can
be computed on that split too) and its datamodule has ``eval_dataloader``; otherwise the sweep
refuses with one line rather than falling back to test.
"""

from __future__ import annotations

from typing import Any

from datamodules.config import build_groups, group_of
from pipelines.tasks.base import TaskAdapter
from posenc import PosencError

SPLITS = ("test", "val")
#: the split in words, as tables and titles name it
SPLIT_WORDS = {"test": "test", "val": "validation"}


def init_args(hparams: Any) -> dict[str, Any]:
    """Saved datamodule hyperparameters as constructor arguments (without LightningCLI's ``_class_path``)."""
    return {k: v for k, v in dict(hparams or {}).items() if not k.startswith("_")}


def with_lengths(dm: Any, adapter: TaskAdapter, lengths: list[int]) -> Any:
    """``dm``, or a copy rebuilt from its hyperparameters with ``lengths`` as its test lengths when
    they differ (the datamodules make every test length cover the same test data, and align their
    ``eval_dataloader`` windows to the longest of them)."""
    if list(getattr(dm, adapter.length_key)) == lengths:
        return dm
    cls, settings, key = type(dm), init_args(dm.hparams), adapter.length_key
    group = group_of(cls, key)  # windows.eval_lengths; a datamodule without groups takes it itself
    if group is None:
        return cls(**{**settings, key: lengths})
    return cls(**build_groups(cls, {**settings, group: {**settings[group], key: lengths}}))


def length_loaders(dm: Any, adapter: TaskAdapter, lengths: list[int]) -> list[tuple[int, Any]]:
    """(length, test loader) pairs over the same test data."""
    return [
        (n, loader)
        for n, loader in zip(getattr(dm, adapter.length_key), dm.test_dataloader(), strict=True)
        if n in lengths
    ]


def check_split(task: str, adapter: TaskAdapter, dm: Any, split: str) -> None:
    """:class:`PosencError` (one line) unless the sweep of ``task`` can score ``split`` on ``dm``."""
    if split not in SPLITS:
        raise PosencError(f"evaluate --split: choose from {', '.join(SPLITS)}, got {split!r}")
    if split == "test":
        return
    if split not in adapter.splits or not hasattr(dm, "eval_dataloader"):
        raise PosencError(f"evaluate --split {split}: task {task!r} ({type(dm).__name__}) has no per-length "
                          f"{SPLIT_WORDS[split]} windows for the length sweep; use --split test")


def split_loaders(dm: Any, adapter: TaskAdapter, lengths: list[int], split: str) -> list[tuple[int, Any]]:
    """(length, loader) pairs over the same bases of ``split`` (``dm`` already has ``lengths`` as its
    test lengths, :func:`with_lengths`); a validation split too short for the longest window is a
    one-line :class:`PosencError` naming the option."""
    if split == "test":
        return length_loaders(dm, adapter, lengths)
    try:
        return [(n, dm.eval_dataloader(split, n)) for n in lengths]
    except PosencError as exc:
        raise PosencError(f"evaluate --split {split}: every length is scored on blocks of the longest "
                          f"({max(lengths)} tokens) and the {SPLIT_WORDS[split]} split has none that fit "
                          f"({exc}); use shorter --factors or --lengths") from None
