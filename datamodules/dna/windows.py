"""Windows over regions of an encoded genome, drawn by index from the (memory-mapped) codes.

No Lightning imports. A dataset maps an index to a window *start* (an offset into the codes); an
optional :class:`WindowItem` turns the start into the model's input (tokens, labels, masking,
reverse-complement augmentation). Windows never cross a region, and regions never cross a record
or a split, so no window straddles either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from datamodules.dna.annotation import rc_labels
from datamodules.dna.fasta import N_CODE
from datamodules.dna.tokenize import KmerTokenizer, hash_uniform, mask_tokens, reverse_complement
from posenc import PosencError

_PROBE_STEP = 2654435761  # odd step for deterministic re-draws of mostly-N windows
_MAX_PROBES = 64


class _MemmapPickling:
    """Pickle memory-mapped arrays as (file, size) and re-open them, so spawned DataLoader workers
    share the page cache instead of receiving a copy of the genome."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key, value in state.items():
            if isinstance(value, np.memmap) and value.filename is not None and value.base is not None:
                state[key] = ("__memmap__", value.filename, value.size)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            if isinstance(value, tuple) and value and value[0] == "__memmap__":
                state[key] = np.memmap(value[1], dtype=np.uint8, mode="r", shape=(value[2],))
        self.__dict__.update(state)


class WorkerRNG:
    """A numpy Generator seeded per DataLoader worker from ``seed`` and the worker's torch seed
    (``get_worker_info().seed``, itself derived from the seeded main process), so augmentation
    differs between workers and is reproducible run to run."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._key: tuple[int, int] | None = None
        self._rng: np.random.Generator | None = None

    def get(self) -> np.random.Generator:
        info = get_worker_info()
        key = (info.id, info.seed % 2**63) if info is not None else (-1, 0)
        if key != self._key or self._rng is None:
            self._key, self._rng = key, np.random.default_rng([self.seed, key[0] + 1, key[1]])
        return self._rng


def n_fraction(codes: np.ndarray) -> float:
    return float(np.count_nonzero(np.asarray(codes) == N_CODE)) / max(1, len(codes))


class WindowItem(_MemmapPickling):
    """Window start → model input.

    Args:
        codes: base codes of the genome (array or memmap).
        tokens: tokens per window (LM windows include the extra target token).
        tokenizer: k-mer tokenizer.
        labels: per-base labels aligned with ``codes`` (segmentation), or ``None``.
        rc_prob: probability of reverse-complementing the window (labels follow, see
            :func:`datamodules.dna.annotation.rc_labels`).
        mlm_prob: BERT masking probability, or ``None`` for no masking.
        fixed_masks: mask by a hash of each token's genome offset (same masks at every length).
        seed: seed of the per-worker RNG.

    Returns (on call): a LongTensor of tokens (T,); with labels ``{"tokens", "labels"}``; with
    masking ``{"input", "target"}``.
    """

    def __init__(self, codes: np.ndarray, tokens: int, tokenizer: KmerTokenizer,
                 labels: np.ndarray | None = None, rc_prob: float = 0.0, mlm_prob: float | None = None,
                 fixed_masks: bool = False, seed: int = 0) -> None:
        self.codes, self.labels, self.tok = codes, labels, tokenizer
        self.tokens, self.bases = tokens, tokenizer.n_bases(tokens)
        self.rc_prob, self.mlm_prob, self.fixed_masks = rc_prob, mlm_prob, fixed_masks
        self.rng = WorkerRNG(seed)

    def __call__(self, start: int) -> Any:
        seq = np.asarray(self.codes[start : start + self.bases])
        lab = None if self.labels is None else np.asarray(self.labels[start : start + self.bases])
        if self.rc_prob > 0 and self.rng.get().random() < self.rc_prob:
            seq = reverse_complement(seq)
            lab = None if lab is None else rc_labels(lab)
        ids = self.tok.encode(seq)  # (T,)
        if self.mlm_prob is not None:
            if self.fixed_masks:
                offsets = start + np.arange(len(ids), dtype=np.int64) * self.tok.stride  # (T,)
                u = np.stack([hash_uniform(offsets, salt) for salt in (1, 2, 3)])  # (3, T)
            else:
                u = self.rng.get().random((3, len(ids)))  # (3, T)
            inputs, targets = mask_tokens(ids, self.tok, u, self.mlm_prob)
            return {"input": torch.from_numpy(inputs), "target": torch.from_numpy(targets)}
        if lab is not None:
            return {"tokens": torch.from_numpy(ids), "labels": torch.from_numpy(lab.astype(np.int64))}
        return torch.from_numpy(ids)


def _window(codes: np.ndarray, start: int, length: int, item: Callable[[int], Any] | None) -> Any:
    """``item(start)``, or the raw codes as a LongTensor (length,) without an item."""
    if item is not None:
        return item(start)
    return torch.from_numpy(np.asarray(codes[start : start + length]).astype(np.int64))


class RandomWindows(_MemmapPickling, Dataset):
    """Every window of ``length`` bases lying wholly inside one region; index i → one window.

    Pair it with a ``RandomSampler(replacement=True)`` to draw random windows each epoch. A window
    with more than ``max_n_fraction`` N is replaced by a deterministic re-draw (index + j·step).
    """

    def __init__(self, codes: np.ndarray, regions: list[tuple[int, int]], length: int,
                 max_n_fraction: float = 1.0, item: Callable[[int], Any] | None = None) -> None:
        self.codes, self.length, self.max_n = codes, length, max_n_fraction
        self.item = item
        spans = [(a, b) for a, b in regions if b - a >= length]
        if not spans:
            longest = max((b - a for a, b in regions), default=0)
            raise PosencError(
                f"no region is long enough for windows of {length} bases (longest region: {longest})"
            )
        self.starts = np.array([a for a, _ in spans], dtype=np.int64)
        counts = np.array([b - a - length + 1 for a, b in spans], dtype=np.int64)
        self.cum = np.cumsum(counts)

    def __len__(self) -> int:
        return int(self.cum[-1])

    def start_of(self, idx: int) -> int:
        """Genome offset of window ``idx`` (before the N check)."""
        seg = int(np.searchsorted(self.cum, idx, side="right"))
        return int(self.starts[seg]) + idx - (int(self.cum[seg - 1]) if seg else 0)

    def __getitem__(self, idx: int) -> Any:
        a = self.start_of(idx)
        for j in range(1, _MAX_PROBES + 1):
            if self.max_n >= 1.0 or n_fraction(self.codes[a : a + self.length]) <= self.max_n:
                break
            a = self.start_of((idx + j * _PROBE_STEP) % len(self))
        return _window(self.codes, a, self.length, self.item)


#: bootstrap units of a scored split: its kept slots (blocks of the longest evaluation length), in
#: order, grouped into at most this many runs of consecutive slots (:func:`slot_blocks`), so that a
#: unit is a contiguous stretch of the split (e.g. 2048 slots of 512 bases → 64 units of 32 slots)
#: and a seed × block bootstrap (``pipelines.studies.bootstrap``) resamples a few dozen test regions.
MAX_BLOCKS = 64


def check_regions(regions: dict[str, list[tuple[int, int]]], need: dict[str, int], source: object) -> None:
    """Every split ``name`` of ``regions`` ({split: [(start, end)…]}) holds one window of ``need[name]``
    bases in one of its parts; else one line naming the file (``source``) and the split."""
    for name, bases in need.items():
        longest = max((b - a for a, b in regions[name]), default=0)
        if longest < bases:
            raise PosencError(
                f"{source}: the {name} split ({longest} bases) is shorter than one window "
                f"of {bases} bases; use a longer sequence or a smaller data.init_args.windows.seq_len / "
                f"data.init_args.windows.eval_lengths")


def aligned_slots(
    regions: list[tuple[int, int]], budget: int | None, align: int = 1, tail: int = 0
) -> list[tuple[int, int]]:
    """(region index, start) of the slots of ``align`` bases that :func:`aligned_spans` keeps, in
    the order of the regions and along each (genome order for a split by region)."""
    slots = [(r, a + j * align) for r, (a, b) in enumerate(regions)
             for j in range(max(0, (b - a - tail) // align))]  # (region index, block start)
    k = len(slots) if budget is None else max(0, (budget - tail) // align)
    if k < len(slots):
        slots = [slots[(2 * i + 1) * len(slots) // (2 * k)] for i in range(k)]
    return slots


def slot_blocks(n_slots: int, max_blocks: int = MAX_BLOCKS) -> np.ndarray:
    """Bootstrap block of each of ``n_slots`` kept slots (int64, (n_slots,)): consecutive slots in
    min(n_slots, ``max_blocks``) runs of near-equal size (slot i → ⌊i · G / n_slots⌋)."""
    groups = min(n_slots, max_blocks)
    return np.arange(n_slots, dtype=np.int64) * groups // max(1, n_slots)


def aligned_spans(
    regions: list[tuple[int, int]], budget: int | None, align: int = 1, tail: int = 0
) -> list[tuple[int, int]]:
    """Spans holding ``budget − tail`` bases of the regions in blocks of ``align`` bases spread evenly
    over the regions, each span followed by ``tail`` more bases (a region too short for one ``align``
    + ``tail`` holds no block).

    Every region is cut into slots of ``align`` bases (the last one followed by ``tail`` bases of the
    region); K = (budget − tail) // align of the S slots are kept, slot ⌊(2i + 1)·S / 2K⌋ for
    i = 0..K − 1 in genome order, so the blocks sample the whole of the regions rather than their
    start (all S when K ≥ S; ``budget=None``: all; :func:`aligned_slots`). Kept slots that touch
    inside one region are merged into one span.

    With ``align`` = the stride of the longest evaluation window and ``tail`` = window length minus
    stride (the same for every length of a family), windows of every length that divides the
    longest tile exactly the same bases.
    """
    out: list[tuple[int, int]] = []
    last_region = -1
    for r, start in aligned_slots(regions, budget, align, tail):
        if out and r == last_region and out[-1][1] - tail == start:
            out[-1] = (out[-1][0], start + align + tail)  # touches the previous kept block
        else:
            out.append((start, start + align + tail))
        last_region = r
    return out


class TiledWindows(_MemmapPickling, Dataset):
    """Windows of ``length`` bases at stride ``stride`` tiling ``max_tokens`` bases of the regions in
    blocks of ``align`` bases (the longest window's stride) spread evenly over the regions
    (:func:`aligned_spans`), so that every evaluation length covers the same bases and per-length
    metrics are comparable. Windows with more than ``max_n_fraction`` N are left out (a length whose
    windows are more often mostly N then scores fewer of those bases).

    ``window_blocks`` (int64, aligned with ``starts``) is the bootstrap block of each window: the
    group (:func:`slot_blocks`, at most ``max_blocks``) of the kept ``align``-sized slot holding its
    start. With the same ``align`` every length that divides the longest gives the same block to the
    same bases, so per-block sums of every length cover the same stretches of the split."""

    def __init__(
        self,
        codes: np.ndarray,
        regions: list[tuple[int, int]],
        length: int,
        stride: int,
        max_tokens: int | None = None,
        max_n_fraction: float = 1.0,
        item: Callable[[int], Any] | None = None,
        align: int | None = None,
        max_blocks: int = MAX_BLOCKS,
    ) -> None:
        self.codes, self.length, self.item = codes, length, item
        align, tail = align or stride, max(0, length - stride)
        self.spans = aligned_spans(regions, max_tokens, align, tail)
        starts: list[int] = []
        for a, b in self.spans:
            starts.extend(range(a, b - length + 1, stride))
        if max_n_fraction < 1.0:
            starts = [s for s in starts if n_fraction(codes[s : s + length]) <= max_n_fraction]
        if not starts:
            raise PosencError(f"the evaluation region is shorter than one window of {length} bases"
                              + (" (or every window is mostly N)" if max_n_fraction < 1.0 else ""))
        self.starts = np.array(starts, dtype=np.int64)
        slots = np.array([p for _, p in aligned_slots(regions, max_tokens, align, tail)], dtype=np.int64)
        order = np.argsort(slots, kind="stable")  # the slots by genome offset (regions may not be)
        holder = order[np.searchsorted(slots[order], self.starts, side="right") - 1]  # (windows,) slot
        self.window_blocks = slot_blocks(len(slots), max_blocks)[holder]  # (windows,)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, idx: int) -> Any:
        return _window(self.codes, int(self.starts[idx]), self.length, self.item)
