"""FASTA/GenBank reading and base encoding, free of Lightning/MLflow imports so its tests start fast.

Bases are encoded as uint8 codes: A=0, C=1, G=2, T=3, N=4, PAD=5. Soft-masked (lower-case) bases
are upper-cased, RNA ``U`` is read as ``T``, and with ``iupac="N"`` (the default) the IUPAC
ambiguity codes (R Y S W K M B D H V) and gap characters (``-`` ``.``) become N; with
``iupac="error"`` they are an error. Characters that are no nucleotide code at all (``E``, ``*``,
digits: a protein FASTA, say) are always an error. Everything that was changed is counted in
:class:`EncodeReport`.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from datamodules.memory import checks_enabled, host_available_bytes
from posenc import PosencError

ALPHABET = "ACGTN"
N_CODE = 4
PAD_CODE = 5
VOCAB_SIZE = 6  # A C G T N PAD
IupacMode = Literal["N", "error"]

_INVALID, _AMBIGUOUS = 255, 254  # LUT classes resolved per mode below
_LUT = np.full(256, _INVALID, dtype=np.uint8)
for _i, _b in enumerate("ACGT"):
    _LUT[ord(_b)] = _LUT[ord(_b.lower())] = _i
_LUT[ord("U")] = _LUT[ord("u")] = 3
_LUT[ord("N")] = _LUT[ord("n")] = N_CODE
for _b in "RYSWKMBDHV-.":
    _LUT[ord(_b)] = _LUT[ord(_b.lower())] = _AMBIGUOUS
_LOWER = np.zeros(256, dtype=bool)
_LOWER[ord("a") : ord("z") + 1] = True
_IS_U = np.zeros(256, dtype=bool)
_IS_U[[ord("U"), ord("u")]] = True


@dataclass
class EncodeReport:
    """What encoding changed: soft-masked bases upper-cased, ambiguity codes and gaps set to N,
    U read as T, records skipped because they were empty, and repeated record ids numbered (``id#2``, …;
    only where the caller allows repeats: one FASTA per class, whose records are samples, not names)."""

    lowercase: int = 0
    to_n: int = 0
    u_to_t: int = 0
    per_record: dict[str, int] = field(default_factory=dict)
    empty: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.lowercase} soft-masked bases upper-cased, {self.to_n} non-ACGTN characters set to N"
        if self.u_to_t:
            text += f", {self.u_to_t} U read as T"
        if self.empty:
            text += f", {len(self.empty)} empty record(s) skipped ({', '.join(self.empty[:5])})"
        if self.repeated:
            text += f", {len(self.repeated)} repeated record id(s) numbered ({', '.join(self.repeated[:3])})"
        return text

    def to_dict(self) -> dict:
        return {"lowercase": self.lowercase, "to_n": self.to_n, "u_to_t": self.u_to_t,
                "per_record": dict(self.per_record), "empty": list(self.empty),
                "repeated": list(self.repeated)}

    @classmethod
    def from_dict(cls, d: dict) -> EncodeReport:
        return cls(d["lowercase"], d["to_n"], d.get("u_to_t", 0), dict(d["per_record"]), list(d["empty"]),
                   list(d.get("repeated", [])))


@dataclass
class Genome:
    """Records encoded into one uint8 array; record ``i`` spans ``codes[starts[i]:ends[i]]``.

    ``codes`` is an in-memory array or a read-only ``np.memmap`` of the genome cache
    (``cache_path``; ``cache_hit`` says whether it was reused rather than encoded).
    """

    ids: list[str]
    codes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    report: EncodeReport
    source: Path | None = None
    cache_path: Path | None = None
    cache_hit: bool = False

    @property
    def lengths(self) -> np.ndarray:
        return self.ends - self.starts

    def record_index(self, rid: str) -> int:
        """Index of record ``rid`` (a clear error naming the file if it is absent)."""
        try:
            return self.ids.index(rid)
        except ValueError:
            shown = ", ".join(self.ids[:5]) + (", …" if len(self.ids) > 5 else "")
            raise PosencError(f"{self.source}: no record {rid!r} (records: {shown})") from None


def encode_bases(
    seq: bytes, report: EncodeReport | None = None, iupac: IupacMode = "N", where: str = "sequence"
) -> np.ndarray:
    """Encode ASCII bases into uint8 codes (A0 C1 G2 T3 N4), counting what was changed.

    Args:
        seq: the bases as ASCII bytes.
        report: counts of changed characters, updated in place.
        iupac: ``"N"`` maps ambiguity codes and gaps to N; ``"error"`` rejects them.
        where: ``"<file>: record <id>"``, for error messages.

    Raises:
        PosencError: on a character that is no nucleotide code (or an ambiguity code with
            ``iupac="error"``), naming ``where`` and the 1-based position.
    """
    if iupac not in ("N", "error"):
        raise PosencError(f"iupac must be 'N' or 'error', got {iupac!r}")
    raw = np.frombuffer(seq, dtype=np.uint8)
    codes = _LUT[raw]
    bad = codes == _INVALID if iupac == "N" else codes >= _AMBIGUOUS
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        kind = "an IUPAC ambiguity code (iupac: error)" if codes[i] == _AMBIGUOUS else "not a nucleotide code"
        raise PosencError(f"{where}: character {chr(raw[i])!r} at position {i + 1} is {kind}")
    amb = codes == _AMBIGUOUS
    if report is not None:
        report.lowercase += int(_LOWER[raw].sum())
        report.to_n += int(amb.sum())
        report.u_to_t += int(_IS_U[raw].sum())
    codes[amb] = N_CODE
    return codes


def decode_bases(codes: np.ndarray) -> str:
    """Inverse of :func:`encode_bases` for codes 0..4 (PAD decodes to '-')."""
    return "".join((ALPHABET + "-")[c] for c in np.asarray(codes).tolist())


class _CountingRaw(io.RawIOBase):
    """A raw binary stream that reports the bytes read (for a progress bar over the file)."""

    def __init__(self, fh: io.BufferedReader, on_read: Callable[[int], object]) -> None:
        self._fh, self._on_read = fh, on_read

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = self._fh.readinto(buf)
        self._on_read(n or 0)
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


#: bytes of memory one decompressed base of a record costs while it is read and encoded (the peak of
#: a 100 Mb record, docs/reliability.md: ≈ 7.7)
BYTES_PER_BASE = 8
_RECORD_STARTS = (b"\n>", b"\nLOCUS")


class _BoundedRaw(io.RawIOBase):
    """A decompressed stream that stops, in one line, once the record being read has grown past what
    the memory available can hold (:data:`BYTES_PER_BASE` per byte): a gzip bomb (gigabytes from a few
    megabytes) is refused instead of exhausting memory. The count restarts at every record."""

    def __init__(self, fh: io.BufferedIOBase, path: Path, limit: int) -> None:
        self._fh, self._path, self._limit, self._record, self._total = fh, path, limit, 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = self._fh.readinto(buf) or 0
        chunk = bytes(memoryview(buf)[:n])
        start = max(chunk.rfind(mark) for mark in _RECORD_STARTS)
        self._record = n - start - 1 if start >= 0 else self._record + n
        self._total += n
        if self._record > self._limit:
            raise PosencError(
                f"{self._path}: a record decompresses past {self._record / 1e9:.2f} GB "
                f"({self._total / 1e9:.2f} GB read so far); at ~{BYTES_PER_BASE} bytes of memory per base "
                f"that needs more than the {self._limit * BYTES_PER_BASE / 1e9:.1f} GB available: a "
                "decompression bomb, or a record too large for this machine (POSENC_MEMORY_CHECK=0 skips "
                "this check)")
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


def _bounded(gz: io.BufferedIOBase, path: Path) -> io.BufferedIOBase:
    """``gz`` read through :class:`_BoundedRaw` when the memory available is known and checks are on."""
    have = host_available_bytes() if checks_enabled() else None
    if have is None:
        return gz
    return io.BufferedReader(_BoundedRaw(gz, path, have // BYTES_PER_BASE), buffer_size=1 << 20)


def _open_text(path: Path, on_read: Callable[[int], object] | None = None) -> io.TextIOBase:
    """Open plain, gzip or bgzip text (bgzip shares gzip's magic), optionally counting raw bytes."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    raw: io.BufferedIOBase = open(path, "rb")  # noqa: SIM115 - closed with the wrapper
    if on_read is not None:
        raw = io.BufferedReader(_CountingRaw(raw, on_read), buffer_size=1 << 20)
    if magic == b"\x1f\x8b":
        raw = _bounded(gzip.GzipFile(fileobj=raw, mode="rb"), path)  # type: ignore[assignment]
    # latin-1 decodes any byte: a non-ASCII header (say 'µ') is fine, a non-ASCII base is reported
    # by encode_bases as "not a nucleotide code" with its record and position
    return io.TextIOWrapper(raw, encoding="latin-1")


def sniff_format(path: Path) -> str:
    """``"fasta"`` or ``"genbank"`` from the first non-blank line; a clear error otherwise."""
    try:
        with _open_text(path) as fh:
            for line in fh:
                text = line.strip()
                if text:
                    break
            else:
                raise PosencError(f"{path}: contains no sequences (the file is empty)")
    except (UnicodeDecodeError, EOFError, OSError, gzip.BadGzipFile) as exc:
        raise PosencError(f"{path}: cannot read as FASTA/GenBank text ({type(exc).__name__})") from None
    if text.startswith(">"):
        return "fasta"
    if text.startswith("LOCUS"):
        return "genbank"
    hint = " (this looks like FASTQ)" if text.startswith("@") else ""
    raise PosencError(f"{path}: not a FASTA or GenBank file (expected '>' or 'LOCUS' at the start, "
                      f"found {text[:20]!r}){hint}")


def iter_records(
    path: str | Path, report: EncodeReport, iupac: IupacMode = "N",
    on_read: Callable[[int], object] | None = None, repeats: bool = False,
) -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(record id, codes)`` for every non-empty record of a FASTA or GenBank file.

    Args:
        path: plain, gzip or bgzip FASTA/GenBank file, one or many records.
        report: filled with what encoding changed; empty records are listed in ``report.empty``.
        iupac: how ambiguity codes are handled (see :func:`encode_bases`).
        on_read: called with the number of raw file bytes consumed (progress bars).
        repeats: number a repeated record id (``id#2``, listed in ``report.repeated``) instead of failing.

    Raises:
        PosencError: naming the file (and record) for a missing/unreadable file, a file that is no
            FASTA/GenBank, a duplicated record id, a bad character, or no non-empty record.
    """
    from Bio import SeqIO  # optional: Biopython
    from Bio.SeqIO.FastaIO import SimpleFastaParser  # optional: Biopython

    path = Path(path)
    if not path.is_file():
        raise PosencError(f"{path}: sequence file not found")
    fmt = sniff_format(path)
    seen: set[str] = set()
    try:
        with _open_text(path, on_read) as fh:
            if fmt == "fasta":
                pairs = ((t.split(maxsplit=1)[0] if t.strip() else "", s) for t, s in SimpleFastaParser(fh))
            else:
                pairs = ((r.id, str(r.seq)) for r in SeqIO.parse(fh, "genbank"))
            for n, (rid, seq) in enumerate(pairs, start=1):
                rid = rid or f"record{n}"
                if rid in seen and repeats:
                    report.repeated.append(rid)
                    rid = next(f"{rid}#{k}" for k in range(2, n + 2) if f"{rid}#{k}" not in seen)
                elif rid in seen:
                    raise PosencError(f"{path}: duplicate record id {rid!r}")
                seen.add(rid)
                if not seq:
                    report.empty.append(rid)
                    continue
                before = report.lowercase + report.to_n + report.u_to_t
                codes = encode_bases(seq.encode("latin-1"), report, iupac, f"{path}: record {rid!r}")
                report.per_record[rid] = report.lowercase + report.to_n + report.u_to_t - before
                yield rid, codes
    except (UnicodeDecodeError, EOFError, OSError, gzip.BadGzipFile, ValueError) as exc:
        if isinstance(exc, PosencError):
            raise
        raise PosencError(f"{path}: cannot read as {fmt} ({type(exc).__name__}: {exc})") from None
    if not seen - set(report.empty):
        raise PosencError(f"{path}: contains no sequences" + (" (every record is empty)" if seen else ""))


def read_fasta(path: str | Path, iupac: IupacMode = "N", repeats: bool = False) -> Genome:
    """Read a FASTA or GenBank file (plain, gzip or bgzip) into an in-memory :class:`Genome`.

    For genome-scale files use :func:`datamodules.dna.genome_cache.load_genome`, which encodes once
    into a memory-mapped cache.

    Raises:
        PosencError: see :func:`iter_records`.
    """
    report = EncodeReport()
    ids, chunks = [], []
    for rid, codes in iter_records(path, report, iupac, repeats=repeats):
        ids.append(rid)
        chunks.append(codes)
    lengths = np.array([len(c) for c in chunks], dtype=np.int64)
    ends = np.cumsum(lengths)
    return Genome(ids, np.concatenate(chunks), ends - lengths, ends, report, Path(path))


def split_regions(
    genome: Genome, fractions: tuple[float, float, float], gap: int = 0
) -> dict[str, list[tuple[int, int]]]:
    """Split every record into disjoint train/val/test regions, in that order along the record.

    Args:
        genome: the encoded records.
        fractions: (train, val, test) fractions of each record; they must sum to 1.
        gap: bases left out between consecutive regions (so no window is near the border).

    Returns:
        ``{"train": [(start, end), …], "val": …, "test": …}`` as offsets into ``genome.codes``.
    """
    _check_fractions(fractions)
    out: dict[str, list[tuple[int, int]]] = {"train": [], "val": [], "test": []}
    for start, end in zip(genome.starts.tolist(), genome.ends.tolist(), strict=True):
        n = end - start
        cuts = np.round(np.cumsum((0.0,) + tuple(fractions)) * n).astype(int)
        for i, name in enumerate(("train", "val", "test")):
            lo = start + cuts[i] + (gap // 2 if i > 0 else 0)
            hi = start + cuts[i + 1] - (gap - gap // 2 if i < 2 else 0)
            if hi > lo:
                out[name].append((int(lo), int(hi)))
    return out


def split_records(
    genome: Genome,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    records: dict[str, list[str]] | None = None,
) -> dict[str, list[tuple[int, int]]]:
    """Assign whole records to train/val/test (disjoint; no record is shared).

    Args:
        genome: the encoded records.
        fractions: with ``records=None``, records are taken in file order: the first
            ``round(f_train·n)`` to train, the next ``round(f_val·n)`` to val, the rest to test.
        records: explicit ``{"train": [ids], "val": [ids], "test": [ids]}``; records listed nowhere
            are unused.

    Returns:
        ``{"train": [(start, end), …], …}`` — one whole record per region.
    """
    n = len(genome.ids)
    if records is None:
        _check_fractions(fractions)
        n_train, n_val = round(fractions[0] * n), round(fractions[1] * n)
        order = list(range(n))
        groups = {"train": order[:n_train], "val": order[n_train : n_train + n_val],
                  "test": order[n_train + n_val :]}
    else:
        unknown = set(records) - {"train", "val", "test"}
        if unknown:
            raise PosencError(f"split_records keys must be train/val/test, got {sorted(unknown)}")
        groups = {k: [genome.record_index(r) for r in records.get(k, [])] for k in ("train", "val", "test")}
        flat = [i for g in groups.values() for i in g]
        if len(flat) != len(set(flat)):
            dup = sorted({genome.ids[i] for i in flat if flat.count(i) > 1})
            raise PosencError(f"{genome.source}: record(s) {dup} assigned to more than one split")
    for name, idx in groups.items():
        if not idx:
            raise PosencError(f"{genome.source}: split_by=record leaves no record for {name} "
                              f"({n} record(s); give split_records or more records)")
    return {k: [(int(genome.starts[i]), int(genome.ends[i])) for i in v] for k, v in groups.items()}


def _check_fractions(fractions: tuple[float, ...]) -> None:
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-6:
        raise PosencError(f"split fractions must be three non-negative numbers summing to 1, got {fractions}")
