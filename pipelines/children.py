"""Processes a command starts die with it: a stopped or killed parent leaves no worker training on.

* :func:`die_with_parent` — called first thing in a child (a claims ``--jobs`` worker, a compare child,
  a DDP rank): on Linux the kernel sends the child ``SIGTERM`` when its parent exits, however it exits
  (``SIGTERM``, ``SIGKILL``, a crash), via ``prctl(PR_SET_PDEATHSIG)``. The child's own ``SIGTERM``
  handling (:func:`pipelines.tracking.failure.stop_on_sigterm` in a training) then marks its MLflow run
  KILLED. A parent that is already gone when the child gets there (the race between ``fork`` and the
  ``prctl``) is noticed by its PID: the child stops at once.
* :func:`child_environment` — the environment to start a child with: it names the parent's PID
  (:data:`PARENT_ENV`), which :func:`die_with_parent_from_env` reads in the child.
* :func:`terminate` — ``SIGTERM`` to a list of live child processes (a stopped parent's workers), then
  ``SIGKILL`` to those still there after a grace period.

On other systems :func:`die_with_parent` does nothing (and says so by returning ``False``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterable
from contextlib import suppress

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_ENV = "POSENC_PARENT_PID"


def die_with_parent(parent_pid: int | None = None, signum: int = signal.SIGTERM) -> bool:
    """Have the kernel send ``signum`` to this process when its parent exits (Linux).

    Args:
        parent_pid: the parent's PID as the parent saw it; if this process's parent is no longer that
            process (it already exited), ``signum`` is sent to this process now.
        signum: the signal to receive (``SIGTERM``: a training marks its run KILLED and exits 143).

    Returns:
        Whether the kernel will send it (``False`` off Linux or if ``prctl`` failed).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signum)
    return True


def child_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) naming this process as the child's parent."""
    return {**(os.environ if environ is None else environ), PARENT_ENV: str(os.getpid())}


def die_with_parent_from_env(signum: int = signal.SIGTERM) -> bool:
    """:func:`die_with_parent` for a child started with :func:`child_environment`; the variable is then
    removed, so the child's own children do not take it for theirs. ``False`` when it is not set."""
    given = os.environ.pop(PARENT_ENV, "")
    if not given.isdigit():
        return False
    return die_with_parent(int(given), signum)


def terminate(pids: Iterable[int], grace_s: float = 30.0) -> list[int]:
    """``SIGTERM`` to each live process of ``pids``, then ``SIGKILL`` to those still running after
    ``grace_s`` seconds (their runs get that long to be marked KILLED); returns the PIDs signalled."""
    sent = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            sent.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    deadline = time.monotonic() + grace_s
    while sent and time.monotonic() < deadline and any(_running(p) for p in sent):
        time.sleep(0.1)
    for pid in sent:
        if _running(pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return sent


def _running(pid: int) -> bool:
    """Whether ``pid`` is running (a zombie, dead but not yet reaped by us, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True


__all__ = ["PARENT_ENV", "child_environment", "die_with_parent", "die_with_parent_from_env", "terminate"]
