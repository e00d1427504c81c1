"""The one-pass read of a long window against the sliding read of the same classifier
(pipelines.tasks.dna.scan_reads), on a planted motif at a known offset, with a tiny classifier that has
``token_logits`` (the per-token logit whose pooling is the crop's logit)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from datamodules.dna.scan_windows import ScanWindow
from datamodules.dna.tokenize import reverse_complement
from pipelines.eval.scan import read_windows, score_table
from pipelines.tasks.dna.classify_baselines import PositionWeightMatrix, one_hot
from pipelines.tasks.dna.scan_reads import conv_read, crop_weights, sliding_read, whole_read
from tests.helpers import token_classifier

WIDTH, TSS, MOTIF, AT = 32, 20, np.array([3, 0, 3, 0, 0, 3], np.uint8), 12  # TATAAT at 12..17 of a crop


def tiny(window: int | None, prior: Tensor | None = None, seed: int = 0, layers: int = 2):
    return token_classifier(prior, layers=layers, window=window, seed=seed)


def planted(n: int, at: int, seed: int) -> np.ndarray:
    codes = np.random.default_rng(seed).integers(0, 4, n).astype(np.uint8)
    codes[at : at + len(MOTIF)] = MOTIF
    return codes


def test_one_pass_equals_the_sliding_read_where_tokens_see_only_themselves():
    prior = torch.softmax(torch.randn(WIDTH, generator=torch.Generator().manual_seed(1)), 0)
    for model in (tiny(None, layers=0), tiny(None, prior=prior, layers=0)):
        codes = planted(300, 150, seed=2)
        whole, slid = whole_read(model, codes, WIDTH, TSS), sliding_read(model, codes, WIDTH, TSS)
        assert np.isnan(whole[:TSS]).all() and np.isnan(whole[300 - WIDTH + TSS + 1 :]).all()
        assert np.array_equal(np.isnan(whole), np.isnan(slid))
        np.testing.assert_allclose(whole[TSS : 300 - WIDTH + TSS + 1], slid[TSS : 300 - WIDTH + TSS + 1],
                                   rtol=1e-4, atol=1e-5)
    assert np.allclose(crop_weights(model, WIDTH), prior.numpy())


def context_free(shift: int) -> tuple:
    """A model whose tokens see only themselves, pooling a crop as its token ``TSS - shift`` alone (a crop
    anchored at t scores the base at t - shift), and the base its token logit ranks highest."""
    prior = torch.zeros(WIDTH)
    prior[TSS - shift] = 1.0
    model = tiny(None, prior=prior, layers=0)
    return model, int(np.argmax(whole_read(model, np.arange(4, dtype=np.uint8), 1, 0, pooled=False)))


def background(n: int, best: int, seed: int) -> np.ndarray:
    """Random bases other than ``best``."""
    return np.setdiff1d(np.arange(4), [best]).astype(np.uint8)[np.random.default_rng(seed).integers(0, 3, n)]


def test_a_planted_base_is_found_at_its_known_offset():
    model, best = context_free(shift=7)
    codes = background(400, best, seed=3)
    codes[200] = best  # a crop whose TSS is 7 bases downstream (207) is the one that scores it
    assert np.nanargmax(whole_read(model, codes, WIDTH, TSS)) == 207
    assert np.nanargmax(sliding_read(model, codes, WIDTH, TSS)) == 207
    assert np.nanargmax(whole_read(model, codes, WIDTH, TSS, pooled=False)) == 200  # the raw token logit
    noise = [np.random.default_rng(s).integers(0, 4, WIDTH).astype(np.uint8) for s in range(40, 80)]
    x = one_hot(np.stack([planted(WIDTH, AT, s) for s in range(40)] + noise))
    y = np.array([1] * 40 + [0] * 40)
    pwm = PositionWeightMatrix().fit((x, y), (x, y), 2)
    assert np.nanargmax(conv_read(pwm, planted(700, 333, seed=5), TSS)) == 333 - AT + TSS  # to the base


def test_the_scanning_table_finds_planted_promoters_on_both_strands():
    shift, lengths = 7, (200, 400)
    model, best = context_free(shift)
    rng, contigs, wins = np.random.default_rng(7), [], {}
    for i in range(12):  # one contig per window, read on either strand: its TSS at a random offset
        strand, tss = (1 if i % 2 else -1), int(rng.integers(100, 300))
        seen = background(400, best, seed=100 + i)  # the window as read on its strand
        seen[tss - shift] = best
        contigs.append(seen if strand > 0 else reverse_complement(seen))
        inner = int(rng.integers(max(0, tss - 150), min(200, tss - 40)))
        for n, lo in ((400, 0), (200, inner)):
            start = lo if strand > 0 else 400 - lo - n
            wins.setdefault(n, []).append(ScanWindow(f"p{i}", i, start, n, strand, tss - lo, (tss - lo,), ()))
    contigs += [background(400, best, seed=900 + i) for i in range(3)]
    bg = {n: [ScanWindow(f"b{i}", 12 + i, 0, n, 1, -1, (), ()) for i in range(3)] for n in lengths}
    val_w, test_w = {n: w[:6] for n, w in wins.items()}, {n: w[6:] for n, w in wins.items()}
    reads = [read_windows(model, {}, contigs, ws, WIDTH, TSS) for ws in (val_w, test_w, bg)]
    rows = {(r["read"], r["length"]): r for r in score_table(reads[0], val_w, reads[1], test_w, reads[2], bg)}
    assert set(rows) == {(r, n) for r in ("whole", "whole_tokens", "sliding") for n in lengths}
    for n in lengths:
        for read in ("whole", "sliding", "whole_tokens"):
            row = rows[read, n]
            assert row["offset"] == (-shift if read == "whole_tokens" else 0)
            assert (row["hit5"], row["auprc"], row["false_per_kb"], row["windows"]) == (1.0, 1.0, 0.0, 6)
    assert set(reads[1].seconds) == {"sliding", "whole"}

