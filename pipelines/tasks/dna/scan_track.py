"""Scan a genome with a promoter classifier: a per-base track (bedGraph) and calls (BED), both strands.

Every base gets the classifier's logit for a training-length crop whose TSS is there, computed from one
pass of the model over a stretch of the record (``token_logits``, pooled as the classifier pools a crop:
:mod:`pipelines.tasks.dna.scan_reads`). The record is read in chunks of ``chunk`` bases with ``flank`` bases
of context either side (the receptive field where attention is local), so memory stays flat in
the record's length apart from its bases (one byte each). The ``-`` strand is the reverse complement,
scored the same way; its scores are written at the forward-strand coordinate of the base.

* bedGraph: one track per strand (``track type=bedGraph name="<name> +"``, then ``-``), ``chrom start end
  value`` per base, 0-based half-open, runs of equal values (after rounding to ``digits``) merged; bases
  whose crop does not fit in the record get no line.
* BED6: one line per call, ``chrom start start+1 name score strand``: a peak of the track (the highest
  score within ``radius`` bases either side, :func:`pipelines.eval.scan_metrics.local_peaks`) at or above
  ``threshold``; ``score`` is 1000 times the crop's promoter probability (sigmoid of the logit), rounded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from datamodules.dna.tokenize import reverse_complement
from pipelines.tasks.dna.scan_reads import (
    NMS_RADIUS,
    check_model,
    crop_weights,
    local_peaks,
    pool_read,
    token_read,
)
from posenc import PosencError

CHUNK = 4096  # bases scored per pass where attention is local (cost linear in the chunk)
CHUNK_FULL = 1024  # where every token attends every other (cost quadratic in the chunk)


@dataclass(frozen=True)
class ScanSettings:
    """How a record is read and called.

    Attributes:
        width: the training crop length in bases.
        tss_index: index of the TSS in a training crop (the base a crop's score is written at).
        chunk: bases scored per pass.
        flank: bases of context read either side of a chunk.
        threshold: the smallest logit called.
        radius: a call is the highest score within this many bases either side.
        digits: decimals of the bedGraph values.
    """

    width: int
    tss_index: int
    chunk: int = CHUNK
    flank: int = 0
    threshold: float = 0.0
    radius: int = NMS_RADIUS
    digits: int = 3


def default_chunk(model: Any) -> int:
    """Bases per pass: :data:`CHUNK` where the model's attention is local, else :data:`CHUNK_FULL`."""
    return CHUNK if getattr(getattr(model, "net", None), "attention_window", None) else CHUNK_FULL


def receptive_flank(model: Any, width: int) -> int:
    """Context either side that makes a chunk read like the whole record: the layers' reach where
    attention is local (layers x (window - 1)), else the training length (a longer record is then read
    as overlapping stretches; attention past them is not seen)."""
    net = getattr(model, "net", None)
    window = getattr(net, "attention_window", None)
    layers = int(getattr(net, "n_layers", 1) or 1)
    return layers * (window - 1) if window else width


def strand_scores(model: Any, codes: np.ndarray, cfg: ScanSettings, weights: np.ndarray,
                  reverse: bool = False) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Per chunk ``[lo, lo + n)`` of ``codes`` (one strand; the last chunk first if ``reverse``): (lo,
    scores (n,) with NaN where no crop fits, the indices of the calls in the chunk, in order)."""
    n, w, t, r = len(codes), cfg.width, cfg.tss_index, cfg.radius
    starts = range(0, n, cfg.chunk)
    for a in reversed(starts) if reverse else starts:
        b = min(n, a + cfg.chunk)
        slo, shi = max(0, a - r), min(n, b + r)  # the scores a chunk's calls need: it and the radius
        zlo, zhi = max(0, slo - t), min(n, shi - t + w - 1)  # the tokens those scores' crops hold
        if zhi - zlo < w:
            yield a, np.full(b - a, np.nan), np.zeros(0, np.int64)
            continue
        ilo, ihi = max(0, zlo - cfg.flank), min(n, zhi + cfg.flank)  # and their context
        z = token_read(model, codes[ilo:ihi])[zlo - ilo : zhi - ilo]
        scores = _shifted(pool_read(z, weights, t), zlo, slo, shi)  # pool_read: NaN where no crop fits
        calls = local_peaks(scores, r, a - slo, b - slo)
        calls = calls[scores[calls] >= cfg.threshold] + slo
        yield a, scores[a - slo : b - slo], calls


def _shifted(pooled: np.ndarray, zlo: int, slo: int, shi: int) -> np.ndarray:
    """``pooled`` (indexed from record base ``zlo``) over record bases ``[slo, shi)``, NaN outside."""
    out = np.full(shi - slo, np.nan)
    lo, hi = max(slo, zlo), min(shi, zlo + len(pooled))
    out[lo - slo : hi - slo] = pooled[lo - zlo : hi - zlo]
    return out


@dataclass
class Written:
    """What a scan wrote: bases scored and calls, over both strands."""

    bases: int = 0
    calls: int = 0


def scan_records(model: Any, records: Callable[[], Iterable[tuple[str, np.ndarray]]], cfg: ScanSettings,
                 track: IO[str] | None, calls: IO[str] | None, name: str = "promoter",
                 progress: Callable[[int], object] | None = None) -> Written:
    """Score every record of ``records()`` on both strands and write the track and/or the calls (see the
    module docstring); ``records`` is called once per strand (the file is read twice, so that each
    strand's track is one section, sorted by position)."""
    check_model(model)
    if cfg.width > cfg.chunk or not 0 <= cfg.tss_index < cfg.width:
        raise PosencError(f"scan: need tss_index in [0, {cfg.width}) and chunk >= {cfg.width}, "
                          f"got tss_index {cfg.tss_index}, chunk {cfg.chunk}")
    weights, out = crop_weights(model, cfg.width), Written()
    for sign in ("+", "-"):
        if track is not None:
            track.write(f'track type=bedGraph name="{name} {sign}" description="{name} logit of the crop '
                        f'whose TSS is at each base, {sign} strand"\n')
        for rid, codes in records():
            n = len(codes)
            seq = codes if sign == "+" else reverse_complement(codes)
            for lo, scores, found in strand_scores(model, seq, cfg, weights, reverse=sign == "-"):
                pos, where = np.arange(lo, lo + len(scores)), found
                if sign == "-":  # forward coordinates, ascending
                    pos, scores, where = (n - 1 - pos)[::-1], scores[::-1], (n - 1 - found)[::-1]
                keep = ~np.isnan(scores)
                out.bases += int(keep.sum())
                if track is not None and keep.any():
                    track.write(_bedgraph(rid, pos[keep], np.round(scores[keep], cfg.digits)))
                if calls is not None and len(where):
                    logit = scores[np.searchsorted(pos, where)]
                    calls.write(_bed(rid, where, logit, sign, out.calls))
                out.calls += len(where)
                if progress is not None:
                    progress(len(scores))
    return out


def _bedgraph(rid: str, pos: np.ndarray, values: np.ndarray) -> str:
    """bedGraph lines of per-base ``values`` at ascending positions, equal neighbours merged."""
    brk = np.flatnonzero((np.diff(pos) != 1) | (np.diff(values) != 0)) + 1
    starts, ends = np.r_[0, brk], np.r_[brk, len(pos)]
    return "".join(f"{rid}\t{pos[a]}\t{pos[b - 1] + 1}\t{values[a]:g}\n"
                   for a, b in zip(starts.tolist(), ends.tolist(), strict=True))


def _bed(rid: str, pos: np.ndarray, logit: np.ndarray, strand: str, before: int) -> str:
    """BED6 lines of calls at forward positions ``pos`` with their logits (score: 1000 x probability)."""
    score = np.rint(1000.0 / (1.0 + np.exp(-logit))).astype(int)
    return "".join(f"{rid}\t{p}\t{p + 1}\t{rid}_tss{before + i + 1}\t{s}\t{strand}\n"
                   for i, (p, s) in enumerate(zip(pos.tolist(), score.tolist(), strict=True)))
