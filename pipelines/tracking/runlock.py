"""One process per run directory: the lock file ``<run dir>/run.lock``.

``fit`` takes the lock before it decides whether to resume (:func:`pipelines.tracking.resume.prepare`)
and holds it until the process ends, so a second process with the same config never resumes into, or
writes the checkpoint of, a run that is still training: it stops with one line naming the live run.

The lock is created with ``O_CREAT | O_EXCL`` and holds JSON: the PID, the host name, the start time
and the process's start tick (``/proc/<pid>/stat``, so a reused PID is not taken for the old process).
While held, a thread touches the file every :data:`HEARTBEAT_S` seconds. A lock left behind by a
process that is gone is *stale* and taken over:

* same host: its PID is not running (or runs another process, per the start tick);
* another host (a shared folder): its PID cannot be checked, so it is live until its heartbeat is
  older than :data:`STALE_AFTER_S` (one hour), or the user passes ``--take_over_lock true``.

Checking and replacing a stale lock happens under ``flock`` on the run directory, so two processes
never both take the same stale lock.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from posenc import PosencError

LOCK = "run.lock"
HEARTBEAT_S = 60.0
STALE_AFTER_S = 3600.0


class RunLocked(PosencError):
    """Another live process holds the run directory's lock."""


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name in (…) may hold spaces


def _alive(pid: int, ticks: int | None) -> bool:
    if pid <= 0:  # (kill(0 or -1, 0) would ask about whole process groups)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        pass
    now = _start_ticks(pid)
    return ticks is None or now is None or now == ticks


def stale_reason(info: dict[str, Any] | None, age_s: float, take_over: bool = False) -> str | None:
    """Why the lock described by ``info`` (its heartbeat ``age_s`` seconds old) may be taken over;
    ``None`` while its holder may still be running."""
    if info is None:
        return "its content is unreadable (the process died while writing it)"
    if info.get("host") == socket.gethostname():
        pid = info.get("pid")
        if not isinstance(pid, int) or not _alive(pid, info.get("ticks")):
            return f"process {info.get('pid')} is no longer running"
        return None
    if take_over:
        return "--take_over_lock true"
    if age_s > STALE_AFTER_S:
        return f"its heartbeat is {age_s / 3600:.1f} h old (host {info.get('host')})"
    return None


def describe(info: dict[str, Any]) -> str:
    return f"process {info.get('pid')} on {info.get('host')}, started {info.get('started')}"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


@contextmanager
def _dir_flock(folder: Path):
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


class RunLock:
    """The held lock of one run directory; :meth:`release` (also run at exit) removes it."""

    def __init__(self, path: Path, info: dict[str, Any], created: list[Path] | None = None) -> None:
        self.path, self.info, self.created = path, info, created or [path.parent]
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="posenc-run-lock", daemon=True)
        self._beat.start()
        atexit.register(self.release)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with suppress(OSError):
                os.utime(self.path)

    def release(self) -> None:
        """Remove the lock if it is still ours (and the run directory if that leaves it empty)."""
        if self._stop.is_set():
            return
        self._stop.set()
        atexit.unregister(self.release)
        if (_read(self.path) or {}).get("token") == self.info["token"]:
            self.path.unlink(missing_ok=True)
        for folder in self.created:  # the run folder, and any parent this lock created (deepest first)
            with suppress(OSError):
                folder.rmdir()  # only when empty


def acquire(run_dir: Path, take_over: bool = False) -> RunLock:
    """Take ``run_dir``'s lock, replacing a stale one (announced on stderr).

    Raises:
        RunLocked: a live process holds it (the message names it and what to do).
    """
    created = [run_dir, *[p for p in run_dir.parents if not p.exists()]]
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    info = {"pid": os.getpid(), "host": socket.gethostname(), "ticks": _start_ticks(os.getpid()),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "token": uuid.uuid4().hex}
    with _dir_flock(run_dir):
        for _ in range(3):  # (a lock released between the two looks is simply gone: try again)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                break
            except FileExistsError:
                _take_over_or_refuse(path, take_over)
        else:
            raise RunLocked(f"{path}: could not take the run lock (it keeps changing hands)")
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(info))
    return RunLock(path, info, created)


def _take_over_or_refuse(path: Path, take_over: bool) -> None:
    """Remove ``path`` if its lock is stale (said on stderr), else raise :class:`RunLocked`."""
    import sys

    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return
    held = _read(path)
    reason = stale_reason(held, age, take_over)
    if reason is None:
        run = (_read(path.parent / "run.json") or {}).get("run_id")
        which = f"MLflow run {run}, " if run else ""
        raise RunLocked(f"{path.parent}: this config is already training ({which}{describe(held or {})}): "
                        "wait for it or stop it; --resume false trains a separate run")
    print(f"taking over the stale run lock {path}: {reason}", file=sys.stderr)
    path.unlink(missing_ok=True)


_HELD: list[RunLock] = []


def hold(lock: RunLock) -> None:
    """Keep ``lock`` until :func:`release_all` (the CLI's exit)."""
    _HELD.append(lock)


def release_all() -> None:
    """Release every lock this process holds."""
    while _HELD:
        _HELD.pop().release()


__all__ = ["LOCK", "RunLock", "RunLocked", "acquire", "describe", "hold", "release_all", "stale_reason"]
