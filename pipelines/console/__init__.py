"""What a person sees: a quiet, informative console for every command (``--verbose`` shows everything).

Where a line's cause is ours it is fixed where it arises: resume checkpoints are saved with an
explicit ``weights_only``, the MLflow pyfunc's ``predict`` has type hints, its signature is built
from explicit column types (no integer-column hint), models are registered through the MLflow
client (no "Successfully registered" prints). What remains comes from libraries and says nothing a
user can act on; :func:`quiet` drops exactly those lines, each matched by its message *and* the
module or logger that emits it (never a whole category or library):

* :data:`WARNINGS` — Python warnings, by message, category and the module they are attributed to;
* :data:`LOG_LINES` — log records, by logger name and message.

Progress (bars on a terminal, one line per step in CI logs) is :mod:`datamodules.progress`; the
entry points' ``--progress false`` turns it off, and :class:`LineProgressBar` is Lightning's
progress as plain lines where output is not interactive.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar

from datamodules.progress import LineProgress, set_progress
from pipelines.console.scrub import scrub_text
from posenc import PosencError

#: (message regex, category, module regex): library warnings with nothing to act on.
WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    # Lightning 2.6 builds torch's deprecated LeafSpec; fixed upstream, nothing to do on our side.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning,
     r"lightning\.pytorch\.utilities\._pytree"),
    # ``make compare`` runs each training through the CLI in-process (args given while sys.argv
    # holds compare's own): intended, and said once per training with the whole argument list.
    (r"LightningCLI's args parameter is intended to run from within Python", UserWarning,
     r"lightning\.pytorch\.cli"),
)

#: logger name → message regexes: library log lines with nothing to act on.
LOG_LINES: dict[str, tuple[str, ...]] = {
    "lightning.pytorch.utilities.rank_zero": (
        r"💡 Tip:",  # advertises another logging service
        r"^[TH]PU available: False",  # accelerators this machine does not have
        r"^Loading `train_dataloader` to estimate number of stepping batches",
    ),
    "lightning.pytorch.loggers.mlflow": (r"^Experiment with name .* not found\. Creating it\.$",),
    "mlflow.store.db.utils": (r"^Creating initial MLflow database tables", r"^Updating database tables"),
    "mlflow.pyfunc": (r"^Validating input example against model signature",),
}

# MLflow's own bar while it re-reads an artifact it has just written (model registration).
QUIET_ENV = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}


class DropLines(logging.Filter):
    """Drop the records whose message matches one of ``patterns``."""

    def __init__(self, patterns: Sequence[str]) -> None:
        super().__init__()
        self.patterns = [re.compile(p) for p in patterns]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(p.search(text) for p in self.patterns)


_installed: list[Any] = []  # what quiet() added: warning filter entries and (logger, filter) pairs
_state: dict[str, bool | None] = {"verbose": None}


def quiet() -> None:
    """Install the filters of :data:`WARNINGS` and :data:`LOG_LINES` (once; :func:`loud` removes them)."""
    if _installed:
        return
    for message, category, module in WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
        _installed.append(warnings.filters[0])
    for name, patterns in LOG_LINES.items():
        logger, drop = logging.getLogger(name), DropLines(patterns)
        logger.addFilter(drop)
        _installed.append((logger, drop))
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)


def loud() -> None:
    """Remove what :func:`quiet` installed (``--verbose``)."""
    while _installed:
        entry = _installed.pop()
        if isinstance(entry, tuple) and len(entry) == 2:
            entry[0].removeFilter(entry[1])
        elif entry in warnings.filters:
            warnings.filters.remove(entry)
            getattr(warnings, "_filters_mutated", lambda: None)()


def configure(verbose: bool | None = None, progress: bool | None = None) -> None:
    """The console of one command: library chatter filtered unless ``verbose``; progress on or off.

    ``None`` keeps what an outer command of the same process chose (``make compare`` trains its
    runs in-process); a process where no command chose is quiet, with progress.
    """
    if verbose is not None:
        _state["verbose"] = bool(verbose)
    if _state["verbose"]:
        loud()
    else:
        quiet()
    scrub_library_lines()
    if progress is not None:
        set_progress(progress)


def print_error(message: object) -> None:
    """A command's last line, ``error: <message>`` on stderr, scrubbed: consoles end up in CI logs,
    ``nohup.out`` and scheduler logs, so no credential (a tracking URI's password) or secret value
    reaches one (:func:`pipelines.console.scrub.scrub_text`, the scrubber of everything a run records)."""
    print(f"error: {scrub_text(str(message))}", file=sys.stderr)


class ScrubLines(logging.Filter):
    """Rewrite a library's log line through :func:`~pipelines.console.scrub.scrub_text` (MLflow's and
    Lightning's lines may quote the tracking URI, password included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        clean = scrub_text(text)
        if clean != text:
            record.msg, record.args = clean, None
        return True


def scrub_library_lines(names: Sequence[str] = ("mlflow", "lightning.pytorch", "")) -> None:
    """:class:`ScrubLines` on every handler of these loggers (``""``: the root), once each."""
    for name in names:
        for handler in logging.getLogger(name or None).handlers:
            if not any(isinstance(f, ScrubLines) for f in handler.filters):
                handler.addFilter(ScrubLines())


@contextmanager
def user_errors_exit() -> Iterator[None]:
    """A command's body: a user mistake (:class:`posenc.PosencError`) ends as one ``error: …`` line on
    stderr (:func:`print_error`) and exit status 2, no traceback."""
    try:
        yield
    except PosencError as exc:
        print_error(exc)
        raise SystemExit(2) from None


def parse_bool(text: str) -> bool:
    """``true``/``false`` (also yes/no, 1/0, on/off) for ``--progress false``."""
    value = str(text).strip().lower()
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_console_args(parser: argparse.ArgumentParser) -> None:
    """``--progress true|false`` and ``--verbose`` for an argparse command."""
    parser.add_argument("--progress", type=parse_bool, nargs="?", const=True, default=True, metavar="BOOL",
                        help="progress bars (one line per step when output is not a terminal); "
                             "false: none")
    parser.add_argument("--verbose", action="store_true",
                        help="show every library warning and log line (default: only what you can act on)")


def spell_out_verbose(argv: Sequence[str]) -> list[str]:
    """``argv`` with a bare ``--verbose`` spelled ``--verbose=true`` (jsonargparse's bools need a value)."""
    out = list(argv)
    for i, arg in enumerate(out):
        nxt = out[i + 1] if i + 1 < len(out) else "--"
        if arg == "--verbose" and (nxt.startswith("--") or nxt in ("fit", "validate", "test", "predict")):
            out[i] = "--verbose=true"
    return out


class LineProgressBar(ProgressBar):
    """Lightning's progress as plain lines, for output that is not a terminal (CI logs, files).

    A training epoch prints a line per ~10% of its batches with the loss and a last one with the
    validation metrics; a test pass prints the same over all its batches. Sanity checks and the
    validation passes inside an epoch print nothing of their own.
    """

    def __init__(self) -> None:
        super().__init__()
        self._enabled = True
        self._bar: LineProgress | None = None

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def _postfix(self, trainer: Any, pl_module: Any) -> str:
        items = self.get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in items.items())

    def _start(self, total: float, desc: str) -> None:
        finite = int(total) if total not in (None, float("inf")) else None
        self._bar = LineProgress(finite, desc, unit="batch") if self._enabled else None

    def _step(self, trainer: Any, pl_module: Any) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(trainer, pl_module))
            self._bar.update(1)

    def _end(self, trainer: Any, pl_module: Any) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(trainer, pl_module))
            self._bar.close()
            self._bar = None

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._start(self.total_train_batches, f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int) -> None:
        self._step(trainer, pl_module)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._end(trainer, pl_module)

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self._start(sum(trainer.num_test_batches), self.test_description)

    def on_test_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int,
                          dataloader_idx: int = 0) -> None:
        self._step(trainer, pl_module)

    def on_test_end(self, trainer: Any, pl_module: Any) -> None:
        self._end(trainer, pl_module)
