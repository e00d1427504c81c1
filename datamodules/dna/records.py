"""The DNA records a predictor takes, as ``(id, base codes)`` pairs: a sequence string, a list of
strings, ``{id: sequence}``, a list of ``(id, sequence)`` pairs or Biopython ``SeqRecord``s, a DataFrame
with ``sequence`` (and optionally ``id``) columns, or a FASTA/GenBank path (plain or gzip)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from datamodules.dna.fasta import EncodeReport, encode_bases, iter_records
from posenc import PosencError

Records = Iterable[tuple[str, np.ndarray]]
_NUCLEOTIDES = set("ACGTUNRYSWKMBDHV-.acgtunryswkmbdhv")


def as_records(data: Any) -> Records:
    """``(id, base codes)`` pairs from any of the DNA inputs listed in the module docstring."""
    if isinstance(data, Path) or (isinstance(data, str) and not _NUCLEOTIDES.issuperset(data)):
        return iter_records(data, EncodeReport())  # a file name (a pure nucleotide string is a sequence)
    if isinstance(data, str):
        data = [data]
    if isinstance(data, pd.DataFrame):
        if "sequence" not in data.columns:
            raise PosencError(f"DataFrame input needs a 'sequence' column, got columns {list(data.columns)}")
        n = len(data)
        ids = data["id"].astype(str).tolist() if "id" in data.columns else [f"seq{i + 1}" for i in range(n)]
        data = list(zip(ids, data["sequence"].astype(str).tolist(), strict=True))
    if isinstance(data, dict):
        data = list(data.items())
    return (_one(i, item) for i, item in enumerate(data))


def _one(i: int, item: Any) -> tuple[str, np.ndarray]:
    if isinstance(item, str):
        rid, seq = f"seq{i + 1}", item
    elif hasattr(item, "seq") and hasattr(item, "id"):  # Bio.SeqRecord
        rid, seq = str(item.id), str(item.seq)
    else:
        rid, seq = item
    if isinstance(seq, np.ndarray):
        return str(rid), np.asarray(seq, dtype=np.uint8)  # no copy of a long record already in codes
    if not seq:
        raise PosencError(f"record {rid!r}: empty sequence")
    return str(rid), encode_bases(str(seq).encode("ascii", "replace"), where=f"record {rid!r}")
