"""What every on-disk cache of parsed data shares: the content key of a file and a write that never
leaves a half-written entry (no Lightning/MLflow imports).

Parsed data is cached under ``cache_dir`` (default ``outputs/cache``, next to the run outputs) keyed by
the SHA-256 of the source file's bytes, so an edited file gets a new key: the genome's encoded bases
(:mod:`datamodules.dna.genome_cache`) and the LTSF benchmark's scaled series
(:mod:`datamodules.timeseries.ltsf`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from posenc import PosencError

T = TypeVar("T")

DEFAULT_CACHE_DIR = "outputs/cache"


def file_sha256(path: str | Path) -> str:
    """SHA-256 hex digest of a file's bytes, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(4 << 20):
            h.update(chunk)
    return h.hexdigest()


def atomic_write(path: Path, write: Callable[[Any], None], mode: str = "wb") -> None:
    """Call ``write(fh)`` on a temporary sibling of ``path``, then rename it into place."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, mode) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def cached_file(path: Path, cache_dir: Path, open_entry: Callable[[str], T | None],
                make_entry: Callable[[str], None]) -> tuple[T, bool]:
    """What ``path`` parses to, through ``cache_dir``, keyed by the SHA-256 of its bytes (the hex digest
    handed to both): ``open_entry(digest)`` when its entry is there and complete (a hit), else
    ``make_entry(digest)`` writes it (atomically: :func:`atomic_write`) and it is opened.

    Returns:
        (the value, whether it was a hit).
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    digest = file_sha256(path)
    found = open_entry(digest)
    if found is not None:
        return found, True
    make_entry(digest)
    found = open_entry(digest)
    if found is None:
        raise PosencError(f"{path}: its cache entry in {cache_dir} does not read back after writing it")
    return found, False
