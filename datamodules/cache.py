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
from typing import Any

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
