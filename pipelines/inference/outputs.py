"""Where ``python -m pipelines.inference.predict`` writes: the output checked before the run, written
to a temporary file beside it and renamed into place at the end.

* :func:`check_output` (before the model loads): the output is not a folder (nor a device or a
  pipe), its folder exists and takes a new file, it is none of the inputs (same file after symlinks
  and hard links), and an existing file is replaced only with ``--overwrite``. A symlinked output is
  followed: the file it points to is replaced and the link stays.
* :func:`atomic_output`: a new file gets the umask's mode, a replaced one keeps its own; an error,
  Ctrl-C or SIGTERM (the command runs under :func:`pipelines.tracking.failure.stop_on_sigterm`)
  removes the temporary file, so nothing half-written is ever left.
"""

from __future__ import annotations

import gzip
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from posenc import PosencError

GZIP_LEVEL = 6
OVERWRITE_HINT = "pass --overwrite to replace it (make predict: ARGS=--overwrite)"


def same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` name one file: equal after resolving symlinks, or hard links to one inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def check_output(path: str | Path, inputs: list[str | Path], overwrite: bool) -> Path:
    """The file to write for the output ``path`` (``path`` itself, or the file a symlink names),
    refused before any work with a one-line :class:`PosencError` when it cannot or must not be
    written."""
    given = Path(path)
    target = Path(os.path.realpath(given))  # a symlink: its target is replaced, the link stays
    if given.is_dir() or target.is_dir():
        raise PosencError(f"{given}: the output is a folder; name a file in it")
    if not target.parent.is_dir():
        raise PosencError(f"{given}: output folder {target.parent} does not exist")
    for source in inputs:
        if Path(source).exists() and same_file(target, Path(source)):
            raise PosencError(f"{given}: the output is the input {source}; name another output file")
    if target.exists() and not target.is_file():  # a device or a pipe is never replaced by a file
        raise PosencError(f"{given}: the output exists and is not a regular file; name a file")
    if target.exists() and not overwrite:
        raise PosencError(f"{given}: the output exists; {OVERWRITE_HINT}")
    try:  # the folder takes a new file (permissions, read-only file systems, quotas)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise PosencError(f"{given}: cannot write in {target.parent} ({exc.strerror or exc})") from None
    return target if given.is_symlink() else given


def _temporary(path: Path) -> Path:
    """A new empty file beside ``path``, created with mode 0666 less the umask (as ``open`` would)."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.part"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise PosencError(f"{path}: cannot create a temporary file in {path.parent}")


@contextmanager
def atomic_output(path: Path, overwrite: bool = False) -> Iterator[IO[str]]:
    """A text handle on a temporary file next to ``path`` (gzip for ``.gz``), renamed to ``path`` only
    when the block ends without an error. ``path`` existing by then needs ``overwrite``; its mode is
    kept."""
    if not path.parent.is_dir():
        raise PosencError(f"{path}: output folder {path.parent} does not exist")
    tmp: Path | None = None
    try:
        tmp = _temporary(path)
        if path.suffix == ".gz":  # level 6: the size of level 9 here at a quarter of the CPU time
            fh = gzip.open(tmp, "wt", newline="", compresslevel=GZIP_LEVEL)
        else:
            fh = open(tmp, "w", newline="")
        with fh:
            yield fh
        if path.exists():
            if not overwrite:  # created while this ran
                raise PosencError(f"{path}: the output appeared while predicting; {OVERWRITE_HINT}")
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise
