"""The pieces the reworked claims add: the RBF-feature scores (q = k = PE(t)), the relative phase
mismatch, the causal classifier and the position probe."""

from __future__ import annotations

import math

import numpy as np
import torch

from pipelines.studies.claims.controlled import position_r2
from pipelines.studies.claims.phase import bits_by_position, bits_scaled, keys_rotated_at
from pipelines.studies.claims.rbf import RBFFeatureScores
from pipelines.tasks.dna.classify import SequenceClassifier
from pipelines.tasks.dna.classify_causal import CausalSequenceClassifier
from pipelines.tasks.dna.lm import DNALanguageModel
from tests.helpers import task


def test_rbf_scores_are_a_gaussian_of_the_distance_away_from_the_edges_and_train_sigma():
    pe = RBFFeatureScores(16, 2, train_len=64, n_centres=64, extent=4.0, sigma=3.0, scale=1.0)
    pos = torch.arange(256)
    b = pe.bias(torch.zeros(1, 2, 256, 8), pos, pos)  # (1, 2, 256, 256)
    assert b.shape == (1, 2, 256, 256) and torch.allclose(b, b.transpose(-1, -2))
    row = b[0, 0, 128, 100:157].double()  # one query in the middle, distances −28..28
    d = torch.arange(-28, 29, dtype=torch.float64)
    gauss = row[28] * torch.exp(-(d**2) / (4 * 3.0**2))  # ⟨φ(i), φ(j)⟩ ∝ exp(−(i − j)²/4σ²)
    assert torch.allclose(row, gauss, rtol=0.02, atol=1e-3)
    b.sum().backward()
    assert pe.log_sigma.grad is not None and bool((pe.log_sigma.grad != 0).all())


def test_positions_scaled_by_one_change_nothing_and_a_mismatch_changes_rope_only():
    torch.manual_seed(0)
    batches = [torch.randint(0, 4, (2, 17))]
    rope = task(DNALanguageModel, d_model=16, n_heads=2, n_layers=2, pe={"class_path": "posenc.RoPE"}).eval()
    nope = task(DNALanguageModel, d_model=16, n_heads=2, n_layers=2, pe=None).eval()
    with torch.no_grad():
        x, y = batches[0][:, :-1], batches[0][:, 1:]
        plain = float(torch.nn.functional.cross_entropy(rope(x).transpose(1, 2), y)) / math.log(2)
    assert math.isclose(bits_scaled(rope, batches, 1.0), plain, rel_tol=1e-5)
    assert abs(bits_scaled(rope, batches, 1.2) - plain) > 1e-4
    assert math.isclose(bits_scaled(nope, batches, 1.2), bits_scaled(nope, batches, 1.0), rel_tol=1e-6)


def test_the_causal_classifier_masks_later_tokens_and_nope_position_is_decodable_only_with_it():
    torch.manual_seed(0)
    args = dict(vocab_size=5, pad_id=4, net={"d_model": 16, "n_heads": 2, "n_layers": 2})
    causal, bidir = CausalSequenceClassifier(**args).eval(), SequenceClassifier(**args).eval()
    assert causal.backbone.causal and not bidir.backbone.causal
    loader = [{"tokens": torch.randint(0, 4, (16, 32))} for _ in range(4)]
    bidir_r2 = position_r2(bidir, loader, None)
    assert abs(bidir_r2) < 0.05  # permutation-equivariant: the token alone, no position
    assert position_r2(causal, loader, None) > bidir_r2 + 0.1  # the mask alone tells positions apart


def test_keys_rotated_alone_break_rope_and_are_undone_on_exit():
    torch.manual_seed(0)
    batches = [torch.randint(0, 4, (2, 17))]
    rope = task(DNALanguageModel, d_model=16, n_heads=2, n_layers=2, pe={"class_path": "posenc.RoPE"}).eval()
    nope = task(DNALanguageModel, d_model=16, n_heads=2, n_layers=2, pe=None).eval()
    plain = bits_by_position(rope, batches)
    with keys_rotated_at(rope, 1.0):
        assert np.allclose(bits_by_position(rope, batches), plain, rtol=1e-6)
    with keys_rotated_at(rope, 1.2):
        off = bits_by_position(rope, batches)
    assert abs(off[0] - plain[0]) < 1e-5  # query 0 sees key 0 only: position 0 × 1.2 is still 0
    assert np.abs(off - plain).max() > 1e-4
    assert np.allclose(bits_by_position(rope, batches), plain, rtol=1e-6)  # restored on exit
    with keys_rotated_at(nope, 1.2):
        assert np.allclose(bits_by_position(nope, batches), bits_by_position(nope, batches))
    assert math.isclose(bits_scaled(rope, batches, 1.0), float(plain.mean()), rel_tol=1e-6)
