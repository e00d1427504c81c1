"""The promoter sets a benchmark run reads, and the numbers CNNProm published on them.

``DATA`` is a folder or a pair of FASTA files (positives first). In a folder, files are grouped by
organism: the part of the name before the first ``_`` (``Ecoli_prom.fa`` → ``Ecoli``). A file whose
name holds ``non_prom`` or ``nonprom`` (any case; ``-`` as ``_``) is a negative set; every other FASTA of
the same organism is a positive set, paired with each negative set of its organism. So CNNProm's folder
(``Ecoli_prom.fa`` + ``Ecoli_non_prom.fa``, ``Arabidopsis_tata.fa`` + ``Arabidopsis_non_tata.fa`` +
``Arabidopsis_non_prom_big.fa``, ``Mouse_tata.fa`` + ``Mouse_nonprom.fa``, …) gives one set per promoter
file. Every file is read (the project's FASTA reader) and checked before anything is trained: one line
naming the file for a missing or non-FASTA file, a set whose two files are one class, or a class with
fewer records than folds.

Published numbers (:data:`PUBLISHED`) are matched by the positive file's name (organism and TATA /
non-TATA), so a user's copy of a CNNProm set is compared with its row whatever folder it sits in.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from datamodules.dna.fasta import EncodeReport, iter_records
from posenc import PosencError

FASTA_SUFFIXES = (".fa", ".fasta", ".fna", ".fas", ".fa.gz", ".fasta.gz", ".fna.gz")
CNNPROM = ("CNNProm: Umarov & Solovyev, PLOS ONE 12(2): e0171410 (2017), its abstract (mouse: as quoted "
           "beside CNNProm by iPTT(2L)-CNN, Comput. Math. Methods Med. 2021)")
#: (organism, kind) → published Sn, Sp, CC of CNNProm (kind: prom = bacterial σ promoters)
PUBLISHED: dict[tuple[str, str], dict[str, float]] = {
    ("ecoli", "prom"): {"Sn": 0.90, "Sp": 0.96, "CC": 0.84},
    ("bsubtilis", "prom"): {"Sn": 0.91, "Sp": 0.95, "CC": 0.86},
    ("human", "tata"): {"Sn": 0.95, "Sp": 0.98, "CC": 0.90},
    ("human", "non_tata"): {"Sn": 0.90, "Sp": 0.98, "CC": 0.89},
    ("arabidopsis", "tata"): {"Sn": 0.95, "Sp": 0.97, "CC": 0.91},
    ("arabidopsis", "non_tata"): {"Sn": 0.94, "Sp": 0.94, "CC": 0.86},
    ("mouse", "tata"): {"Sn": 0.97, "Sp": 0.97, "CC": 0.93},
    ("mouse", "non_tata"): {"Sn": 0.88, "Sp": 0.94, "CC": 0.83},
}
ORGANISMS = {"ecoli": ("ecoli", "e_coli", "escherichia"), "bsubtilis": ("bacillus", "subtilis", "bsub"),
             "human": ("human", "homo", "hs_"), "arabidopsis": ("arabidopsis", "athal", "thaliana"),
             "mouse": ("mouse", "mus_", "mm_")}


@dataclass
class PromoterSet:
    """One benchmark set: a positive and a negative FASTA, with their record counts and lengths."""

    name: str
    positive: Path
    negative: Path
    n_pos: int = 0
    n_neg: int = 0
    lengths: tuple[int, int] = (0, 0)  # shortest and longest record, in bases
    published: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """Negatives per positive in the files."""
        return self.n_neg / self.n_pos


def _norm(path: Path) -> str:
    name = path.name.lower().replace("-", "_")
    for suffix in FASTA_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _organism(path: Path) -> str:
    return _norm(path).split("_")[0]


def is_negative(path: Path) -> bool:
    """Whether a file name marks a non-promoter set (``non_prom``, ``nonprom``)."""
    return bool(re.search(r"non_?prom", _norm(path)))


def published_for(positive: Path) -> dict[str, float]:
    """CNNProm's Sn/Sp/CC for the set a positive file's name names, or ``{}``."""
    name = _norm(positive)
    organism = next((o for o, keys in ORGANISMS.items() if any(k in name for k in keys)), None)
    if organism is None or "dbtss" in name:  # (the DBTSS mouse set is another set than EPDnew's)
        return {}
    kind = "non_tata" if re.search(r"non_?tata|tata_?less", name) else "tata" if "tata" in name else "prom"
    return dict(PUBLISHED.get((organism, kind), {}))


def pair_folder(folder: Path) -> list[tuple[Path, Path]]:
    """(positive, negative) pairs of a folder's FASTA files by organism prefix (see the module docstring)."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(FASTA_SUFFIXES))
    groups: dict[str, list[Path]] = {}
    for p in files:
        groups.setdefault(_organism(p), []).append(p)
    pairs = [(pos, neg) for members in groups.values() for neg in members if is_negative(neg)
             for pos in members if not is_negative(pos)]
    if not pairs:
        shown = ", ".join(p.name for p in files[:6]) or "no FASTA file (.fa, .fasta, .fna, optionally .gz)"
        raise PosencError(f"{folder}: no promoter set to pair ({shown}): a set is a negative FASTA whose "
                          "name holds 'non_prom' beside a positive FASTA with the same organism prefix "
                          "(Ecoli_prom.fa + Ecoli_non_prom.fa), or pass the two files")
    return pairs


def count_records(path: Path) -> tuple[int, int, int]:
    """Records, shortest and longest record (bases) of a FASTA, read with the project's reader (one
    line naming the file when it is missing, not FASTA, or holds no sequence)."""
    lengths = [len(codes) for _, codes in iter_records(path, EncodeReport(), repeats=True)]
    return len(lengths), min(lengths), max(lengths)


def read_sets(data: list[str], folds: int) -> list[PromoterSet]:
    """The sets ``data`` names (a folder, or a positive and a negative FASTA), every file checked."""
    paths = [Path(d) for d in data]
    for p in paths:
        if not p.exists():
            raise PosencError(f"{p}: no such file or folder")
    if len(paths) == 1 and paths[0].is_dir():
        pairs = pair_folder(paths[0])
    elif len(paths) == 2 and all(p.is_file() for p in paths):
        pairs = [(paths[0], paths[1])]
    else:
        raise PosencError(f"DATA={' '.join(data)}: expected a folder, or a positive and a negative "
                          "FASTA file")
    per_organism = Counter(_organism(neg) for neg in {neg for _, neg in pairs})
    counts = {p: count_records(p) for pair in pairs for p in pair}
    out = []
    for pos, neg in pairs:
        if pos.resolve() == neg.resolve():
            raise PosencError(f"{pos}: the same file as positives and negatives: a set needs two classes")
        name = _norm(pos) + (f"-vs-{_norm(neg)}" if per_organism[_organism(neg)] > 1 else "")
        (n_pos, lo_p, hi_p), (n_neg, lo_n, hi_n) = counts[pos], counts[neg]
        for path, n in ((pos, n_pos), (neg, n_neg)):
            if n < folds:
                raise PosencError(f"{path}: {n} record(s), fewer than the {folds} folds: a set needs at "
                                  "least one record of each class in every fold")
        out.append(PromoterSet(name, pos, neg, n_pos, n_neg, (min(lo_p, lo_n), max(hi_p, hi_n)),
                               published_for(pos)))
    return out


__all__ = ["CNNPROM", "PUBLISHED", "PromoterSet", "is_negative", "pair_folder", "published_for", "read_sets"]
