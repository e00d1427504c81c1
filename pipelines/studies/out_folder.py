"""A study's output folder (``--out``), which stays the user's: nothing planted in it is followed,
waited on or destroyed, and two commands never write into it at once.

* :func:`open_out` — before anything runs: ``--out`` must be a folder (created if missing); its run lock
  (:mod:`pipelines.tracking.runlock`, the training CLI's) stops a second command on the same folder; an
  entry at a name the command writes that is not a regular file (a symbolic link, a FIFO, a folder),
  or a folder that is a link, is refused in one line; an input that *is* one of those files is refused
  (a fresh run would delete it).
* :func:`write_file` — a whole file written to a new temporary file beside it and renamed over the name:
  a link planted there is replaced, never followed, and nothing half-written is left.
* :func:`append_line` — a line added to a file opened with ``O_NOFOLLOW`` and ``O_NONBLOCK`` that must
  be a regular file (a FIFO is refused, not waited on).
* :func:`open_regular` — a file to read, with the same checks; :func:`remove_folder` — a folder of the
  command's own removed, never through a link.

What is not promised: another process of *your* account that swaps entries while the command runs (it
could also just edit the results); the folders above ``--out`` are the user's choice.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from pipelines.tracking.runlock import RunLock, acquire
from posenc import PosencError

#: the refusal's words when another command holds the folder's lock
BUSY = ("another command is writing its results into this folder", "or give this one another --out")
REMOVE = "remove it (nothing this command writes is a link, a FIFO or a folder)"


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a folder" if stat.S_ISDIR(mode) else "a device or socket"


def check_entry(path: Path, folder: bool = False) -> None:
    """``path``, if it exists, is a regular file (``folder``: a real folder, not a link to one).

    Raises:
        PosencError: naming ``path`` and what it is.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode):
        return
    raise PosencError(f"{path} is {kind_of(mode)}, not a {'folder' if folder else 'file'} this command "
                      f"writes: {REMOVE}")


def open_out(out: str | Path, files: Sequence[str], folders: Sequence[str] = (),
             inputs: Sequence[tuple[str, str | Path]] = ()) -> RunLock:
    """Make ``out`` ready for a command that writes ``files`` and ``folders`` (names inside it); the
    held lock, which the caller releases at the end (it is also released at exit).

    Args:
        out: the folder (``--out``).
        files: the names of the files the command writes in it.
        folders: the names of the folders it writes in it.
        inputs: ``(option, path)`` of the command's inputs, none of which may be one of those files.

    Raises:
        PosencError: one line naming the path: ``out`` is not a folder, another command holds it, an
            entry is not what the command writes, an input is one of the command's outputs.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PosencError(f"--out {out}: not a folder (a file of that name is there); name a folder")
    for option, given in inputs:
        for name in files:
            target = out / name
            if target.exists() and Path(given).exists() and os.path.samefile(given, target):
                raise PosencError(f"{option} {given} is {target}, a file this command writes in --out (it "
                                  "would be replaced); move it out of --out or give another --out")
    try:
        lock = acquire(out, busy=BUSY)
    except OSError as exc:
        raise PosencError(f"--out {out}: cannot create or lock it ({exc.strerror or exc})") from None
    try:
        for name in files:
            check_entry(out / name)
        for name in folders:
            check_entry(out / name, folder=True)
    except PosencError:
        lock.release()
        raise
    return lock


def _new_file(path: Path) -> tuple[int, Path]:
    """A new empty temporary file beside ``path`` (``O_EXCL``: never an existing one or a link)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(tmp, flags, 0o644), tmp
        except FileExistsError:
            continue
    raise PosencError(f"{path}: cannot create a temporary file beside it")


def write_file(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` whole: a temporary file beside it, renamed over it (a link at ``path``
    is replaced, its target untouched; a reader never sees half a file)."""
    path = Path(path)
    fd, tmp = _new_file(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _open_checked(path: Path, flags: int) -> int:
    """``os.open`` with ``O_NOFOLLOW | O_NONBLOCK``; the descriptor of a regular file, else one line."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if os.path.islink(path) or exc.errno == errno.ENXIO:  # ENXIO: a FIFO nobody reads
            check_entry(path)
        raise PosencError(f"{path}: cannot open it ({exc.strerror or exc})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise PosencError(f"{path} is {kind_of(mode)}, not a file this command writes: {REMOVE}")
    return fd


def append_line(path: str | Path, text: str) -> None:
    """Add ``text`` at the end of the regular file ``path`` (created if missing)."""
    fd = _open_checked(Path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with os.fdopen(fd, "a", newline="") as fh:
        fh.write(text)


def open_regular(path: str | Path, binary: bool = False) -> IO[Any]:
    """``path`` opened for reading (UTF-8 text, or ``binary``), if it is a regular file (no link, FIFO
    or device)."""
    fd = _open_checked(Path(path), os.O_RDONLY)
    return os.fdopen(fd, "rb") if binary else os.fdopen(fd, "r", newline="", encoding="utf-8")


def remove_folder(path: str | Path) -> None:
    """Remove the folder ``path`` and everything in it, if it is there; a link at ``path`` is refused
    (``shutil.rmtree`` follows none inside it)."""
    path = Path(path)
    check_entry(path, folder=True)
    if path.exists():
        shutil.rmtree(path)


def real_folder(root: str | Path, *parts: str) -> Path:
    """``root/parts…``, each part created if missing and refused if it is a link or not a folder."""
    path = Path(root)
    for part in parts:
        path = path / part
        check_entry(path, folder=True)
        path.mkdir(exist_ok=True)
    return path


__all__ = ["append_line", "check_entry", "open_out", "open_regular", "real_folder", "remove_folder",
           "write_file"]
