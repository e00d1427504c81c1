"""Frame labels from GFF/GTF/BED against hand-computed frames; labels under reverse complement."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.dna.annotation import CDS, frame_labels, rc_labels, read_annotation
from datamodules.dna.fasta import decode_bases, read_fasta
from datamodules.dna.tokenize import reverse_complement
from datamodules.paths import resolve_path
from posenc import PosencError
from tests.helpers import random_bases, write_fasta, write_gff

YEAST = "package:bio_test_artifacts/prebuilt/artifacts/yeast_chr01"


def labels_string(labels: np.ndarray) -> str:
    return "".join(str(x) for x in np.asarray(labels).tolist())


@pytest.fixture
def toy(tmp_path):
    fasta = write_fasta(tmp_path / "g.fa", {"r": random_bases(40, 3), "s": random_bases(12, 4)})
    return read_fasta(fasta), tmp_path


def test_gff_frames_by_hand(toy):
    genome, tmp = toy
    gff = write_gff(tmp / "a.gff", [
        ("r", 4, 12, "+", 0),   # bases 3..11: frames 0 1 2 0 1 2 0 1 2 → 1 2 3 …
        ("r", 21, 29, "-", 0),  # bases 20..28, read right to left: base 28 is frame 0 (label 4)
        ("r", 31, 37, "+", 1),  # phase 1: the first base ends a codon (frame 2), then 0 1 2 …
        ("s", 2, 7, "-", 2),    # bases 1..6; phase 2: bases 6, 5 are frames 1, 2 (labels 5 6), base 4 frame 0
    ])
    labels = frame_labels(genome, read_annotation(gff, genome))
    #                       r: 0         1         2         3         4
    #                          0123456789012345678901234567890123456789
    assert labels_string(labels[:40]) == "0001231231230000000065465465403123123000"
    #                                         s: 012345678901
    assert labels_string(labels[40:]) == "046546500000"


def test_spliced_cds_carries_the_frame_across_the_intron(toy):
    genome, tmp = toy
    gff = write_gff(tmp / "a.gff", [("r", 2, 6, "+", 0), ("r", 11, 17, "+", 1)])  # 5 bases, then phase 1
    labels = frame_labels(genome, read_annotation(gff, genome))
    assert labels_string(labels[:20]) == "01231200003123123000"


def test_gtf_and_bed_give_the_same_labels_as_gff(toy):
    genome, tmp = toy
    gff = write_gff(tmp / "a.gff", [("r", 4, 12, "+", 0), ("s", 3, 11, "-", 0)])
    gtf = tmp / "a.gtf"
    gtf.write_text('r\tt\tCDS\t4\t12\t.\t+\t0\tgene_id "g1";\ns\tt\tCDS\t3\t11\t.\t-\t0\tgene_id "g2";\n')
    bed = tmp / "a.bed"
    bed.write_text("track name=x\nr\t3\t12\tg1\t0\t+\ns\t2\t11\tg2\t0\t-\n")
    ref = frame_labels(genome, read_annotation(gff, genome))
    for other in (gtf, bed):
        np.testing.assert_array_equal(frame_labels(genome, read_annotation(other, genome)), ref)


def test_labels_follow_the_reverse_complement(toy):
    """Labels of RC(genome) built from the mirrored annotation = rc_labels(labels of the genome)."""
    genome, tmp = toy
    cds = [CDS("r", 3, 12, 1, 0), CDS("r", 20, 29, -1, 0), CDS("r", 30, 37, 1, 1), CDS("r", 5, 8, -1, 2)]
    labels = frame_labels(genome, cds)[:40]
    seq = decode_bases(genome.codes[:40])
    rc_fasta = write_fasta(tmp / "rc.fa", {"r": decode_bases(reverse_complement(genome.codes[:40]))})
    rc_genome = read_fasta(rc_fasta)
    mirrored = [CDS("r", 40 - c.end, 40 - c.start, -c.strand, c.phase) for c in cds]
    np.testing.assert_array_equal(rc_labels(labels), frame_labels(rc_genome, mirrored))
    np.testing.assert_array_equal(rc_labels(rc_labels(labels)), labels)
    assert decode_bases(reverse_complement(rc_genome.codes)) == seq


def test_shipped_yeast_gff_puts_stop_codons_only_at_frame_zero_ends():
    """Real data: on S. cerevisiae chr I, in-frame stop codons (TAA/TAG/TGA starting at a frame-0
    base) occur about once per gene (the terminal stop), while the other two frames are full of them."""
    genome = read_fasta(resolve_path(YEAST + ".fasta"))
    cds = read_annotation(resolve_path(YEAST + ".gff"), genome)
    labels = frame_labels(genome, cds)
    assert len(cds) == 120 and 0.55 < (labels > 0).mean() < 0.7

    def stops_at(codes, labels, cls):
        c = codes[:-2].astype(int) * 16 + codes[1:-1] * 4 + codes[2:]  # codon as a base-4 number
        return int((np.isin(c, [48, 50, 56]) & (labels[:-2] == cls)).sum())  # TAA TAG TGA

    codes = np.asarray(genome.codes)
    n_plus = sum(c.strand > 0 for c in cds)
    rc, rl = reverse_complement(codes), rc_labels(labels)  # − strand genes read as + strand
    for seq, lab, n in ((codes, labels, n_plus), (rc, rl, len(cds) - n_plus)):
        assert stops_at(seq, lab, 1) <= n
        assert min(stops_at(seq, lab, 2), stops_at(seq, lab, 3)) > 10 * n


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("r\tt\tCDS\t30\t45\t.\t+\t0\tID=x\n",
         r"a\.gff: line 1: CDS 30\.\.45 on record 'r' exceeds its length 40"),
        ("r\tt\tCDS\t10\t5\t.\t+\t0\tID=x\n", r"a\.gff: line 1: bad CDS coordinates 10\.\.5 on record 'r'"),
        ("r\tt\tCDS\t1\t9\t.\t?\t0\tID=x\n", r"a\.gff: line 1 \(record 'r'\): unknown strand '\?'"),
        ("r\tt\tCDS\t1\t9\t.\t+\t3\tID=x\n", r"a\.gff: line 1: CDS phase must be 0, 1 or 2"),
        ("r\tt\tCDS\tone\t9\t.\t+\t0\tID=x\n", r"a\.gff: line 1: start 'one' is not an integer"),
        ("r t CDS 1 9 . + 0\n", r"a\.gff: line 1: expected 9 tab-separated"),
        ("chrZ\tt\tCDS\t1\t9\t.\t+\t0\tID=x\n", r"a\.gff: no CDS feature on any record of .*g\.fa"),
    ],
)
def test_bad_annotation_is_one_line_error(toy, text, match):
    genome, tmp = toy
    path = tmp / "a.gff"
    path.write_text(text)
    with pytest.raises(PosencError, match=match) as info:
        read_annotation(path, genome)
    assert "\n" not in str(info.value)


def test_missing_or_unknown_annotation_file(toy):
    genome, tmp = toy
    with pytest.raises(PosencError, match=r"nope\.gff: annotation file not found"):
        read_annotation(tmp / "nope.gff", genome)
    (tmp / "a.txt").write_text("x")
    with pytest.raises(PosencError, match=r"a\.txt: unknown annotation format"):
        read_annotation(tmp / "a.txt", genome)
