"""CDS annotations (GFF3/GTF/BED or ``pyrodigal`` gene calls) turned into per-base frame labels.

Labels, one per base of the genome (uint8):

* 0 — not in any CDS;
* 1, 2, 3 — CDS on the + strand, codon frame 0, 1, 2;
* 4, 5, 6 — CDS on the − strand, codon frame 0, 1, 2.

The *frame* of a base is its offset inside its codon, counted on the CDS's own strand from the
CDS start: on the + strand the first base of a codon (reading left to right) has frame 0; on the −
strand the codon is read right to left, so its right-most base has frame 0. With a GFF/GTF phase
``p`` (bases to skip from the feature's 5' end to the first complete codon) the frame of a base at
0-based position ``i`` of a feature spanning ``[s, e)`` is ``(i − s − p) mod 3`` on + and
``(e − 1 − i − p) mod 3`` on −. BED has no phase: each BED6 interval is taken as its own CDS that
starts with a complete codon (phase 0 at ``chromStart`` on +, at ``chromEnd − 1`` on −); BED12
lines use thickStart/thickEnd and the blocks, with the phase carried across blocks. Where CDSs
overlap, the longer CDS feature wins.

Reverse complement (:func:`rc_labels`) reverses the labels and swaps the strands (1↔4, 2↔5, 3↔6);
the frame itself is unchanged because it is counted along the CDS's own strand, which the reverse
complement carries along with the bases.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datamodules.dna.fasta import ALPHABET, Genome, _open_text
from posenc import PosencError

log = logging.getLogger(__name__)

N_LABELS = 7
LABEL_NAMES = ["noncoding", "plus_f0", "plus_f1", "plus_f2", "minus_f0", "minus_f1", "minus_f2"]
_RC_LABEL = np.arange(256, dtype=np.uint8)
_RC_LABEL[1:7] = [4, 5, 6, 1, 2, 3]


@dataclass(frozen=True)
class CDS:
    """One CDS segment: record, 0-based half-open ``[start, end)``, strand ±1, GFF phase 0..2."""

    record: str
    start: int
    end: int
    strand: int
    phase: int = 0


def rc_labels(labels: np.ndarray) -> np.ndarray:
    """Labels of the reverse complement: reversed, + and − strand classes swapped, frame kept."""
    return _RC_LABEL[np.asarray(labels)[::-1]]


def annotation_format(path: Path) -> str:
    """``gff``, ``gtf`` or ``bed`` from the file name (``.gz`` allowed)."""
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    ext = suffixes[-1] if suffixes else ""
    fmt = {".gff": "gff", ".gff3": "gff", ".gtf": "gtf", ".gff2": "gtf", ".bed": "bed"}.get(ext)
    if fmt is None:
        raise PosencError(f"{path}: unknown annotation format (expected .gff, .gff3, .gtf or .bed)")
    return fmt


def read_annotation(path: str | Path, genome: Genome) -> list[CDS]:
    """CDS segments of a GFF3/GTF/BED file, checked against ``genome``.

    Raises:
        PosencError: naming the file, line and record for a missing file, an unknown strand, a bad
            phase or coordinate, a feature past the end of its record, or no CDS on any record.
    """
    path = Path(path)
    if not path.is_file():
        raise PosencError(f"{path}: annotation file not found")
    fmt = annotation_format(path)
    lengths = dict(zip(genome.ids, genome.lengths.tolist(), strict=True))
    out: list[CDS] = []
    skipped: set[str] = set()
    with _open_text(path) as fh:
        for n, line in enumerate(fh, start=1):
            if line.startswith("##FASTA"):
                break
            if not line.strip() or line.startswith(("#", "track", "browser")):
                continue
            where = f"{path}: line {n}"
            parsed = _parse_bed(line, where) if fmt == "bed" else _parse_gff(line, where)
            for cds in parsed:
                if cds.record not in lengths:
                    skipped.add(cds.record)
                    continue
                if cds.end > lengths[cds.record]:
                    raise PosencError(f"{where}: CDS {cds.start + 1}..{cds.end} on record {cds.record!r} "
                                      f"exceeds its length {lengths[cds.record]}")
                out.append(cds)
    if skipped:
        log.warning("%s: CDS on records absent from the genome ignored: %s", path, sorted(skipped)[:5])
    if not out:
        raise PosencError(f"{path}: no CDS feature on any record of {genome.source} "
                          f"(records: {genome.ids[:5]})")
    return out


def _strand(text: str, where: str) -> int:
    if text not in ("+", "-"):
        raise PosencError(f"{where}: unknown strand {text!r} for a CDS (expected '+' or '-')")
    return 1 if text == "+" else -1


def _int(text: str, where: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise PosencError(f"{where}: {what} {text!r} is not an integer") from None


def _parse_gff(line: str, where: str) -> list[CDS]:
    """One GFF3/GTF line (1-based inclusive coordinates) → its CDS, if it is one."""
    cols = line.rstrip("\n\r").split("\t")
    if len(cols) < 8:
        raise PosencError(f"{where}: expected 9 tab-separated GFF/GTF columns, found {len(cols)}")
    if cols[2] != "CDS":
        return []
    start, end = _int(cols[3], where, "start"), _int(cols[4], where, "end")
    if start < 1 or end < start:
        raise PosencError(f"{where}: bad CDS coordinates {start}..{end} on record {cols[0]!r}")
    phase = 0 if cols[7] == "." else _int(cols[7], where, "phase")
    if phase not in (0, 1, 2):
        raise PosencError(f"{where}: CDS phase must be 0, 1 or 2, got {cols[7]!r}")
    return [CDS(cols[0], start - 1, end, _strand(cols[6], f"{where} (record {cols[0]!r})"), phase)]


def _parse_bed(line: str, where: str) -> list[CDS]:
    """One BED line (0-based half-open) → CDS segment(s); BED12 uses thick span and blocks."""
    cols = line.rstrip("\n\r").split("\t")
    if len(cols) < 3:
        raise PosencError(f"{where}: expected at least 3 tab-separated BED columns, found {len(cols)}")
    rec, start, end = cols[0], _int(cols[1], where, "start"), _int(cols[2], where, "end")
    if start < 0 or end <= start:
        raise PosencError(f"{where}: bad interval {start}..{end} on record {rec!r}")
    strand = _strand(cols[5] if len(cols) >= 6 else "", f"{where} (record {rec!r})")
    if len(cols) < 12:
        return [CDS(rec, start, end, strand, 0)]
    lo, hi = _int(cols[6], where, "thickStart"), _int(cols[7], where, "thickEnd")
    sizes = [_int(x, where, "blockSizes") for x in cols[10].strip(",").split(",")]
    offsets = [_int(x, where, "blockStarts") for x in cols[11].strip(",").split(",")]
    spans = [(max(start + o, lo), min(start + o + s, hi)) for s, o in zip(sizes, offsets, strict=False)]
    spans = sorted((a, b) for a, b in spans if b > a)
    out, done = [], 0
    for a, b in spans if strand > 0 else spans[::-1]:  # 5'→3' on the CDS strand
        out.append(CDS(rec, a, b, strand, (3 - done % 3) % 3))
        done += b - a
    return out


def frame_labels(genome: Genome, cds: list[CDS]) -> np.ndarray:
    """Per-base labels (uint8, one per base of ``genome.codes``) from CDS segments (see module doc)."""
    labels = np.zeros(len(genome.codes), dtype=np.uint8)
    offset = dict(zip(genome.ids, genome.starts.tolist(), strict=True))
    for c in sorted(cds, key=lambda c: (c.end - c.start, c.record, c.start)):  # longer CDS painted last
        base = offset[c.record]
        idx = np.arange(c.start, c.end, dtype=np.int64)
        if c.strand > 0:
            labels[base + c.start : base + c.end] = 1 + (idx - c.start - c.phase) % 3
        else:
            labels[base + c.start : base + c.end] = 4 + (c.end - 1 - idx - c.phase) % 3
    return labels


def _record_bytes(genome: Genome, i: int) -> bytes:
    """Record ``i`` as ASCII bases (N kept as N), for pyrodigal."""
    lut = np.frombuffer((ALPHABET + "N").encode(), dtype=np.uint8)
    return lut[genome.codes[genome.starts[i] : genome.ends[i]]].tobytes()


def call_genes(genome: Genome) -> list[dict]:
    """Predict genes with pyrodigal (single-genome mode, trained on this genome; metagenomic mode
    when the genome is shorter than the 20 kb prodigal needs to train).

    Returns:
        One dict per gene: ``record``, ``begin``/``end`` (1-based inclusive, as pyrodigal gives
        them), ``strand`` (±1), ``partial_begin``/``partial_end``.
    """
    import pyrodigal  # optional: pyrodigal, gene calling only

    seqs = [_record_bytes(genome, i) for i in range(len(genome.ids))]
    meta = int(genome.lengths.sum()) < 20000
    finder = pyrodigal.GeneFinder(meta=meta)
    if not meta:
        finder.train(*seqs)
    out = []
    for rid, seq in zip(genome.ids, seqs, strict=True):
        for g in finder.find_genes(seq):
            out.append({"record": rid, "begin": g.begin, "end": g.end, "strand": g.strand,
                        "partial_begin": bool(g.partial_begin), "partial_end": bool(g.partial_end)})
    return out


def genes_to_cds(genes: list[dict]) -> list[CDS]:
    """pyrodigal calls → CDS segments; a gene cut at its 5' end by the record edge gets the phase
    that puts its codons in register with its (complete) 3' end."""
    out = []
    for g in genes:
        start, end, strand = g["begin"] - 1, g["end"], int(g["strand"])
        five_prime_partial = g["partial_begin"] if strand > 0 else g["partial_end"]
        phase = (end - start) % 3 if five_prime_partial else 0
        out.append(CDS(g["record"], start, end, strand, phase))
    return out


def label_intervals(labels: np.ndarray) -> list[tuple[int, int, int, int]]:
    """CDS intervals ``(start, end, strand, phase)`` (0-based half-open) from per-base labels.

    An interval is a maximal run of one strand whose codon frame steps consistently (+ strand: frame
    rises by one per base left to right; − strand: falls), so reading it back with
    ``datamodules.dna.annotation`` reproduces the labels. ``phase`` is the GFF phase: bases from the
    interval's 5' end (left on +, right on −) to its first complete codon.
    """
    labels = np.asarray(labels, dtype=np.int64)
    coding = labels > 0
    strand = np.where(labels >= 4, -1, 1) * coding
    frame = np.where(labels >= 4, labels - 4, labels - 1)
    step = np.where(strand > 0, 1, 2)  # expected frame change left → right (+: +1, −: −1 ≡ +2 mod 3)
    cont = coding[1:] & (strand[1:] == strand[:-1]) & ((frame[1:] - frame[:-1]) % 3 == step[1:])
    breaks = np.flatnonzero(~cont) + 1
    out = []
    for lo, hi in zip(np.r_[0, breaks], np.r_[breaks, len(labels)], strict=True):
        if hi > lo and coding[lo]:
            s = int(strand[lo])
            first = frame[lo] if s > 0 else frame[hi - 1]  # frame of the 5'-most base
            out.append((int(lo), int(hi), s, int((3 - first) % 3)))
    return out
