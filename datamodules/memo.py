"""A per-process memo of dataset items that are a pure function of their key.

The claim experiments train many models on the same synthetic samples: every condition of a seed draws
the same windows (one RNG per index), and drawing one can cost more than the model's step on it (a
rejection loop per window). :func:`memo_item` draws each item once per process and hands back the same
tensors afterwards; the samples, and so every number trained on them, are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

MAX_ITEMS = 250_000  # about 100 MB of 32-token windows; the memo starts over beyond it
_ITEMS: dict[Hashable, object] = {}


def memo_item(key: Hashable, make: Callable[[], T]) -> T:
    """The item of ``key``: ``make()`` the first time in this process, the same object afterwards.
    ``key`` must name everything the item depends on (seed, split, index, the generator's settings)."""
    if key not in _ITEMS:
        if len(_ITEMS) >= MAX_ITEMS:
            _ITEMS.clear()
        _ITEMS[key] = make()
    return _ITEMS[key]  # type: ignore[return-value]
