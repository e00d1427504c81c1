"""The scanning study (``make scan-promoters``) at tiny size: promoters planted in a synthetic genome on
both strands, a tiny model trained on one fold, every read scored at two window lengths."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.docs_commands import run_make
from tests.helpers import readable_png, write_fasta

MOTIF, AT, LENGTH, TSS = "TATAAT", 10, 40, 25  # the tiny promoters: a box 15 bases before their TSS
COMP = str.maketrans("ACGT", "TGCA")

TINY = """\
trainer:
  max_epochs: 2
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {monitor: val/auroc, mode: max, save_top_k: 1, filename: best}
model:
  init_args:
    net: {d_model: 16, n_heads: 2, n_layers: 1, attention_window: 8}
data:
  init_args:
    loader: {batch_size: 16}
"""


def planted_genome(tmp_path, n_prom: int = 30, size: int = 40_000) -> tuple:
    """A random genome with ``n_prom`` promoter records planted on alternating strands (a fifth of the
    genome kept free for background windows), the promoter and non-promoter FASTAs."""
    rng = np.random.default_rng(0)
    genome = list("".join(rng.choice(list("ACGT"), size)))
    proms, negs = {}, {}
    starts = np.sort(rng.choice(np.arange(200, int(size * 0.8) - 200, 250), n_prom, replace=False))
    for i, a in enumerate(starts.tolist()):
        rec = "".join(rng.choice(list("ACGT"), LENGTH))
        rec = rec[:AT] + MOTIF + rec[AT + len(MOTIF):]
        proms[f"p{i}"] = rec
        genome[a : a + LENGTH] = list(rec if i % 2 else rec.translate(COMP)[::-1])
    for i in range(45):
        negs[f"n{i}"] = "".join(rng.choice(list("ACGT"), LENGTH))
    return (write_fasta(tmp_path / "genome.fa", {"chr": "".join(genome)}),
            write_fasta(tmp_path / "prom.fa", proms), write_fasta(tmp_path / "non_prom.fa", negs))


@pytest.mark.slow  # a training and every read of 34 windows: about a minute on an idle 2-core host
def test_the_documented_command_at_tiny_size(tmp_path):
    genome, prom, neg = planted_genome(tmp_path)
    (tmp_path / "tiny.yaml").write_text(TINY)
    args = (f"--genome {genome} --config configs/dna_promoter.yaml --config {tmp_path / 'tiny.yaml'} "
            f"--folds 3 --val-fraction 0.3 --lengths 200 400 --background 4 --margin 100 --tss-index {TSS} "
            f"--boxes {AT + 3}")
    make = ("make", "scan-promoters", f"DATA={prom} {neg}", f"OUT={tmp_path / 'out'}", f"ARGS={args}")
    done = run_make(make, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out"
    placed = json.loads((out / "locate.json").read_text())["summary"]
    assert placed == {"records": 30, "placed": 30, "exact": 30, "substitutions": 0, "plus": 15, "minus": 15,
                      "ambiguous": 0, "not_found": 0}
    rows = pd.read_csv(out / "scan.csv")
    assert set(zip(rows.read, rows.length, strict=True)) == {
        (r, n) for r in ("whole", "whole_tokens", "sliding", "pwm", "onehot_lr") for n in (200, 400)}
    assert (rows.windows == 10).all()  # the test fold's 10 promoters, each in one window per length
    assert rows[["hit5", "hit10", "auprc", "false_per_kb"]].notna().all().all()
    pwm = rows[(rows.read == "pwm") & (rows.length == 400)].iloc[0]
    assert pwm.hit5 == 1.0 and pwm.offset == 0  # a position-specific scorer finds the planted box exactly
    md = (out / "scan.md").read_text()
    assert "30 of 30 records placed" in md and "| 400 | PWM slid |" in md and "Cost of the reads" in md
    readable_png(out / "scan.png")
    readable_png(out / "saliency.png")
