"""One process per run directory: the lock file ``<run dir>/run.lock``.

``fit`` takes the lock before it decides whether to resume (:func:`pipelines.tracking.resume.prepare`)
and holds it until the process ends, so a second process with the same config never resumes into, or
writes the checkpoint of, a run that is still training: it stops with one line naming the live run.

The lock is created with ``O_CREAT | O_EXCL`` and holds JSON: the PID, the host name, machine id, boot
id and PID namespace (:func:`machine_identity`), the start time and the process's start tick
(``/proc/<pid>/stat``, so a reused PID is not taken for the old process). While held, a thread
touches the file every :data:`HEARTBEAT_S` seconds. A lock left behind by a process that is gone is
*stale* and taken over:

* same machine — the same host name, machine id, boot and PID namespace, all recorded in the lock —:
  its PID is not running, or runs another process (its start tick differs); after a reboot (another
  boot id) every lock of the machine is stale;
* anything that cannot be checked from here — another host (a shared folder), another PID namespace
  (a container with the same host name), a lock without those fields or without the start tick of a
  running PID — counts as another machine: live until its heartbeat is older than
  :data:`STALE_AFTER_S` (one hour; a heartbeat in the future counts by its distance from now, so a
  forged mtime cannot keep it fresh), or until the user passes ``--take_over_lock true``, which takes
  over any lock (said on stderr, naming the holder).

The lock is opened with ``O_NOFOLLOW`` and must be a regular file: a symbolic link, a FIFO (whose
read would block for ever) or a device named ``run.lock`` is one line saying to remove it. Checking
and replacing a stale lock happens under ``flock`` on the run directory, so two processes never both
take the same stale lock.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import socket
import stat
import sys
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
MAX_LOCK_BYTES = 65536  # a lock is a line of JSON; a bigger file is not one of ours
REMOVE_IT = "remove it if no run of this config is training"
_MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


class RunLocked(PosencError):
    """Another live process holds the run directory's lock."""


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name in (…) may hold spaces


def _first_line(*paths: str) -> str | None:
    for name in paths:
        with suppress(OSError, UnicodeDecodeError):
            text = Path(name).read_text().strip()
            if text:
                return text
    return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def machine_identity() -> dict[str, str | None]:
    """What makes a PID checkable from here: host name, machine id, boot id and PID namespace (Linux)."""
    return {"host": socket.gethostname(), "machine_id": _first_line(*_MACHINE_ID_FILES),
            "boot_id": _first_line("/proc/sys/kernel/random/boot_id"), "pid_ns": _pid_namespace()}


def _alive(pid: int) -> bool:
    if pid <= 0:  # (kill(0 or -1, 0) would ask about whole process groups)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        pass
    return True


def _same_machine(info: dict[str, Any], here: dict[str, str | None]) -> str | bool:
    """``True`` when the lock's PID can be checked here; ``"rebooted"`` when it was written on this
    machine before its last boot; ``False`` when it cannot be checked (another host or PID namespace,
    or fields missing)."""
    if any(here[k] is None or info.get(k) != here[k] for k in ("host", "machine_id")):
        return False
    if isinstance(info.get("boot_id"), str) and info["boot_id"] != here["boot_id"]:
        return "rebooted"
    return (here["pid_ns"] is not None and info.get("pid_ns") == here["pid_ns"]
            and info.get("boot_id") is not None)


def stale_reason(info: dict[str, Any] | None, age_s: float, take_over: bool = False) -> str | None:
    """Why the lock described by ``info`` (its heartbeat ``age_s`` seconds from now, either way) may be
    taken over; ``None`` while its holder may still be running."""
    if info is None:
        return "its content is unreadable (the process died while writing it)"
    pid, ticks = info.get("pid"), info.get("ticks")
    same = _same_machine(info, machine_identity())
    if same == "rebooted":
        return f"this machine has restarted since process {pid} took it"
    if same and (not isinstance(pid, int) or not _alive(pid)):
        return f"process {pid} is no longer running"
    if same and isinstance(ticks, int) and _start_ticks(pid) not in (None, ticks):
        return f"process {pid} is no longer running (its PID now runs another process)"
    if take_over:
        return f"--take_over_lock true ({describe(info)}{', which still runs' if same else ''})"
    if abs(age_s) > STALE_AFTER_S:
        return f"its heartbeat is {abs(age_s) / 3600:.1f} h from now (host {info.get('host')})"
    return None


def checkable(info: dict[str, Any]) -> bool:
    """Whether this process can tell if the lock's holder runs (same machine and a start tick)."""
    return _same_machine(info, machine_identity()) is True and isinstance(info.get("ticks"), int)


def describe(info: dict[str, Any]) -> str:
    return f"process {info.get('pid')} on {info.get('host')}, started {info.get('started')}"


class NotAFile(PosencError):
    """``run.lock`` (or ``run.json``) is a link, a FIFO, a device or a folder: never read or followed."""


def _read(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` if it is missing, unreadable or not an object.

    Raises:
        NotAFile: ``path`` is a symbolic link or not a regular file (opened with ``O_NOFOLLOW`` and
            ``O_NONBLOCK``, so neither is followed or waited on).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        link = os.path.islink(path)
        why = "is a symbolic link, not a lock file" if link else f"cannot be read ({exc.strerror})"
        raise NotAFile(f"{path} {why}: {REMOVE_IT}") from None
    mode = os.fstat(fd).st_mode  # before fdopen, which refuses a folder with "4: Is a directory"
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a device"
        raise NotAFile(f"{path} is {kind}, not a lock file: {REMOVE_IT}")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_LOCK_BYTES + 1)
    try:
        info = json.loads(data) if len(data) <= MAX_LOCK_BYTES else None
    except ValueError:
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
        with suppress(NotAFile):  # (a lock replaced by something else is not ours to remove)
            if (_read(self.path) or {}).get("token") == self.info["token"]:
                self.path.unlink(missing_ok=True)
        for folder in self.created:  # the run folder, and any parent this lock created (deepest first)
            with suppress(OSError):
                folder.rmdir()  # only when empty


#: what a live lock's holder is doing and what else to do, in the refusal (the training CLI's words)
TRAINING = ("this config is already training", "--resume false trains a separate run")


def acquire(run_dir: Path, take_over: bool = False, busy: tuple[str, str] = TRAINING) -> RunLock:
    """Take ``run_dir``'s lock, replacing a stale one (announced on stderr).

    Args:
        run_dir: the folder the lock guards (created if missing).
        take_over: take any lock, a live one too (``--take_over_lock true``).
        busy: what the holder of a live lock is doing, and what to do instead, for the refusal.

    Raises:
        RunLocked: a live process holds it (the message names it and what to do).
    """
    created = [run_dir, *[p for p in run_dir.parents if not p.exists()]]
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    info = {"pid": os.getpid(), **machine_identity(), "ticks": _start_ticks(os.getpid()),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "token": uuid.uuid4().hex}
    with _dir_flock(run_dir):
        for _ in range(3):  # (a lock released between the two looks is simply gone: try again)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
                break
            except FileExistsError:
                _take_over_or_refuse(path, take_over, busy)
        else:
            raise RunLocked(f"{path}: could not take the run lock (it keeps changing hands)")
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(info))
    return RunLock(path, info, created)


def _run_id(run_dir: Path) -> str | None:
    """The MLflow run id ``run_dir/run.json`` names (``None`` if none, or if it is not a plain file)."""
    try:
        return (_read(run_dir / "run.json") or {}).get("run_id")
    except NotAFile:
        return None


def _take_over_or_refuse(path: Path, take_over: bool, busy: tuple[str, str] = TRAINING) -> None:
    """Remove ``path`` if its lock is stale (said on stderr), else raise :class:`RunLocked`."""

    try:
        age = time.time() - os.lstat(path).st_mtime
    except FileNotFoundError:
        return
    held = _read(path)
    reason = stale_reason(held, age, take_over)
    if reason is None:
        run = _run_id(path.parent)
        which = f"MLflow run {run}, " if run else ""
        clear = ("" if checkable(held or {}) else "; its process cannot be checked from here (another host, "
                 "container or PID namespace): if it no longer runs, pass --take_over_lock true")
        raise RunLocked(f"{path.parent}: {busy[0]} ({which}{describe(held or {})}): "
                        f"wait for it or stop it{clear}; {busy[1]}")
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


__all__ = ["LOCK", "TRAINING", "NotAFile", "RunLock", "RunLocked", "acquire", "checkable", "describe", "hold",
           "machine_identity", "release_all", "stale_reason"]
