"""Train/val/test splits of encoded DNA records: regions along every record (:func:`split_regions`) or
whole records (:func:`split_records`), as offsets into :attr:`Genome.codes <datamodules.dna.fasta.Genome>`."""

from __future__ import annotations

import numpy as np

from datamodules.dna.fasta import Genome
from posenc import PosencError


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
