"""Processes a command starts die with it: a stopped or killed parent leaves no worker training on.

* :func:`die_with_parent` — called first thing in a child (a claims or LTSF ``--jobs`` worker, a compare
  child, a DDP rank): on Linux the kernel sends the child ``SIGTERM`` when its parent exits, however it
  exits (``SIGTERM``, ``SIGKILL``, a crash), via ``prctl(PR_SET_PDEATHSIG)``. The child's own ``SIGTERM``
  handling (:func:`pipelines.tracking.failure.stop_on_sigterm` in a training) then marks its MLflow run
  KILLED. A parent that is already gone when the child gets there (the race between ``fork`` and the
  ``prctl``) is noticed by its PID: the child stops at once. A watchdog (:func:`watch_parent`) ends the
  child for good a few seconds after its parent is gone, whatever the child was doing with the signal.
* :func:`child_environment` — the environment to start a child with: it names the parent's PID
  (:data:`PARENT_ENV`), which :func:`die_with_parent_from_env` reads in the child.
* :func:`terminate` — ``SIGTERM`` to a list of live child processes (a stopped parent's workers), then
  ``SIGKILL`` to those still there after a grace period.
* :func:`worker_pool` / :func:`stop_pool` — spawned worker processes, one torch thread each, that die with
  this process (the claims' and the LTSF benchmark's ``--jobs``); :func:`default_jobs` how many.

On other systems there is no parent-death signal (:func:`die_with_parent` returns ``False``); the
watchdog still ends an orphan.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from contextlib import suppress
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_ENV = "POSENC_PARENT_PID"
MAX_JOBS = 2  # the budgets are set on 2 cores; more workers than cores only slows each child down


def die_with_parent(parent_pid: int | None = None, signum: int = signal.SIGTERM) -> bool:
    """Have the kernel send ``signum`` to this process when its parent exits (Linux), and end it for
    good :data:`ORPHAN_GRACE_S` seconds after (:func:`watch_parent`, every system).

    The signal lets a training stop cleanly (its run marked KILLED); the watchdog makes sure it stops:
    a pool worker turns the signal into an exception inside the training, reports it, and would then
    wait for ever on a queue nobody reads (the parent was killed with ``kill -9``), keeping itself and
    multiprocessing's resource tracker alive.

    Args:
        parent_pid: the parent's PID as the parent saw it (default: this process's parent now); if
            this process's parent is no longer that process (it already exited), ``signum`` is sent to
            this process now.
        signum: the signal to receive (``SIGTERM``: a training marks its run KILLED and exits 143).

    Returns:
        Whether the kernel will send it (``False`` off Linux or if ``prctl`` failed; the watchdog runs
        either way).
    """
    parent = os.getppid() if parent_pid is None else parent_pid
    watch_parent(parent)
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:
        os.kill(os.getpid(), signum)
    return True


#: how long a process whose parent is gone has to stop by itself (a training marking its run KILLED)
#: before :func:`watch_parent` ends it
ORPHAN_GRACE_S = 5.0
_WATCHED: list[int] = []


def watch_parent(parent: int, grace_s: float = ORPHAN_GRACE_S, every_s: float = 0.5) -> None:
    """A daemon thread that ends this process (``os._exit(143)``, no cleanup: whatever it waits on will
    never come) ``grace_s`` seconds after its parent ``parent`` is gone; once per process."""
    if _WATCHED:
        return
    _WATCHED.append(parent)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        time.sleep(grace_s)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="posenc-parent-watch", daemon=True).start()


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


def default_jobs() -> int:
    """Worker processes by default: the CPUs this process may use, at most :data:`MAX_JOBS`."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(MAX_JOBS, cpus))


def _start_worker(threads: int, parent: int | None = None) -> None:
    """A worker's start: it stops when the main process exits, however; ``threads`` torch threads."""
    die_with_parent(parent)
    import torch  # heavy: only the workers need it here

    torch.set_num_threads(threads)


def worker_pool(jobs: int, threads: int = 1) -> ProcessPoolExecutor:
    """``jobs`` spawned worker processes with ``threads`` torch threads each, which die with this one."""
    context = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker,
                               initargs=(threads, os.getpid()))


def stop_pool(executor: Any) -> None:
    """Stop a :func:`worker_pool` now (``SIGTERM``: a child in training marks its run KILLED), the
    queued work dropped: what a stopped or failed main process does instead of waiting for it."""
    terminate([p.pid for p in list((executor._processes or {}).values()) if p.pid])
    executor.shutdown(wait=True, cancel_futures=True)


__all__ = ["MAX_JOBS", "PARENT_ENV", "child_environment", "default_jobs", "die_with_parent",
           "die_with_parent_from_env", "stop_pool", "terminate", "watch_parent", "worker_pool"]
