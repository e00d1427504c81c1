"""Progress of long loops, with one switch for every command (Lightning-free; tqdm underneath, the
library Lightning's own bar draws with).

* :func:`progress` wraps an iterable: ``for x in progress(items, "encoding", total=n): …``;
* :func:`progress_bar` is a context manager for loops that count something else (bases, tokens):
  ``with progress_bar(total, "predicting", unit="tok") as bar: … bar.update(k)``;
* :func:`set_progress` is what the entry points' ``--progress true|false`` calls.

Three ways to show it, chosen once per loop:

* ``bar`` — a live tqdm bar on an interactive terminal (stderr is a TTY);
* ``lines`` — one plain line per step where output is not interactive (CI logs, files) or the loop's
  body prints its own output (``live=False``): every step when there are at most
  :data:`MAX_LINES` of them, else one line per ~1/``MAX_LINES`` of the total (every
  :data:`UNKNOWN_TOTAL_SECONDS` when the total is unknown) and one at the end;
* ``off`` — nothing, after ``set_progress(False)``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
MAX_LINES = 10  # lines per loop at most in ``lines`` mode (plus the last one)
UNKNOWN_TOTAL_SECONDS = 10.0  # ``lines`` mode without a total: one line this often
_state = {"enabled": True}


def set_progress(enabled: bool) -> None:
    """Turn every progress display of this process on or off (``--progress false``)."""
    _state["enabled"] = bool(enabled)


def progress_enabled() -> bool:
    """Whether progress is shown at all (the ``--progress`` switch)."""
    return _state["enabled"]


def interactive() -> bool:
    """Whether stderr is a terminal a live bar can redraw (not a CI log or a file)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def mode(live: bool = True) -> str:
    """``bar``, ``lines`` or ``off`` for a new loop (see the module docstring)."""
    if not progress_enabled():
        return "off"
    return "bar" if live and interactive() else "lines"


class LineProgress:
    """tqdm's ``update``/``close``/``set_postfix_str`` as plain lines on stderr (``lines`` mode).

    Each line is tqdm's own meter (``desc:  40%|████      | 4/10 [00:12<00:18, 3.0s/it]``), printed
    when the count crosses the next of at most :data:`MAX_LINES` marks and once at the end.
    """

    def __init__(self, total: int | None, desc: str, unit: str = "it", unit_scale: bool = False) -> None:
        self.total, self.desc, self.unit, self.unit_scale = total, desc, unit, unit_scale
        self.n, self.postfix, self._printed = 0, "", -1
        self._start = time.monotonic()
        self._every = 1 if not total or total <= MAX_LINES else total / MAX_LINES

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.total and self.n >= self.total:
            return  # the last line comes from close()
        if self.total:
            mark = int(self.n // self._every)
        else:  # unknown total: a line every UNKNOWN_TOTAL_SECONDS
            mark = int((time.monotonic() - self._start) // UNKNOWN_TOTAL_SECONDS)
        if mark > self._printed:
            self._printed = mark
            self._line()

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def _line(self) -> None:
        from tqdm import tqdm  # optional: tqdm progress bars

        meter = tqdm.format_meter(self.n, self.total, time.monotonic() - self._start,
                                  prefix=self.desc, unit=self.unit, unit_scale=self.unit_scale,
                                  postfix=self.postfix or None)
        print(meter, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._printed != -2:
            self._line()
            self._printed = -2

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.close()


class _Off:
    """The bar of ``off`` mode: accepts every call, shows nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


@contextmanager
def progress_bar(total: int | None, desc: str, unit: str = "it", unit_scale: bool = False,
                 live: bool = True, enabled: bool = True) -> Iterator[Any]:
    """A bar with ``update(n)`` and ``set_postfix_str(text)`` for the current mode.

    Args:
        total: steps expected (``None``: unknown).
        desc: what is being done, e.g. ``"encoding genome.fa"``.
        unit: what a step is (``"tok"``, ``"B"``, ``"run"``).
        unit_scale: show large counts as 1.2k, 3.4M.
        live: ``False`` when the loop prints its own output (a line per step even on a terminal).
        enabled: ``False``: nothing for this loop (e.g. one too short to need it).
    """
    how = mode(live) if enabled else "off"
    if how == "off":
        yield _Off()
    elif how == "lines":
        with LineProgress(total, desc, unit, unit_scale) as bar:
            yield bar
    else:
        from tqdm.auto import tqdm  # optional: tqdm progress bars

        with tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, leave=False, file=sys.stderr,
                  dynamic_ncols=True) as bar:
            yield bar


def progress(iterable: Iterable[T], desc: str, total: int | None = None, unit: str = "it",
             live: bool = True) -> Iterator[T]:
    """``iterable``, showing one step per item (``total`` defaults to ``len(iterable)`` if it has one)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with progress_bar(total, desc, unit, live=live) as bar:
        for item in iterable:
            yield item
            bar.update(1)
