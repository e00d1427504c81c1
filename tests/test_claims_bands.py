"""Claim 16's measurement (band spectra of rotary heads) on hand-made heads whose answer is known, its
premise (a head's rotary score at distance Δ is a cosine per band with amplitude |q_p|·|k_p|), its
reading of a real model, and the experiment's wiring at a tiny budget."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pipelines.studies.claims.bands import (
    band_spectrum,
    concentration,
    data_band_share,
    head_band_information,
    initial_model,
    layer_queries_keys,
    model_bands,
)
from pipelines.tasks.dna.lm import DNALanguageModel
from posenc import PeriodicRoPE, PosencError
from tests.helpers import task, workdir_with_store


def heads_with_amplitudes(amplitudes: np.ndarray, n: int = 64, seed: int = 0) -> np.ndarray:
    """Vectors (n, H, 2P) whose pair p of head h has norm amplitudes[h, p] (random direction in the pair)."""
    rng = np.random.default_rng(seed)
    angle = rng.uniform(0, 2 * math.pi, size=(n, *amplitudes.shape))  # (n, H, P)
    x = np.empty((n, amplitudes.shape[0], 2 * amplitudes.shape[1]))
    x[..., 0::2], x[..., 1::2] = amplitudes * np.cos(angle), amplitudes * np.sin(angle)
    return x


def test_band_pass_heads_are_selective_and_a_bank_flat_or_shared_bands_are_not():
    one_band_each = heads_with_amplitudes(np.eye(4))  # head h: all its amplitude in pair h
    s = band_spectrum(one_band_each, heads_with_amplitudes(np.eye(4), seed=1))
    assert np.allclose(s, np.eye(4)) and np.allclose(concentration(s), 1.0)
    assert head_band_information(s) == pytest.approx(2.0)  # log2 of 4 heads on 4 distinct bands
    flat = heads_with_amplitudes(np.ones((4, 4)))
    s = band_spectrum(flat, flat)
    assert np.allclose(s, 0.25) and np.allclose(concentration(s), 0.25)
    assert head_band_information(s) == pytest.approx(0.0, abs=1e-12)
    same = heads_with_amplitudes(np.tile([0.0, 2.0, 0.0, 0.0], (4, 1)))  # selective, all on one band
    s = band_spectrum(same, same)
    assert np.allclose(concentration(s), 1.0) and head_band_information(s) == pytest.approx(0.0, abs=1e-12)
    # q amplitudes (3, 1) and k (1, 1) in two pairs: shares 3/4, 1/4; two mirrored heads → I = 1 − H(3/4)
    q = heads_with_amplitudes(np.array([[3.0, 1.0], [1.0, 3.0]]))
    s = band_spectrum(q, heads_with_amplitudes(np.ones((2, 2))))
    assert np.allclose(s, [[0.75, 0.25], [0.25, 0.75]])
    h = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert head_band_information(s) == pytest.approx(1.0 - h)


def test_half_layout_pairs_feature_i_with_i_plus_half():
    x = np.zeros((3, 1, 8))
    x[:, 0, 1], x[:, 0, 5] = 3.0, 4.0  # pair 1 under "half" (norm 5); pairs 0 and 2 under "interleaved"
    assert np.allclose(band_spectrum(x, x, "half"), [[0, 1, 0, 0]])
    assert np.allclose(band_spectrum(x, x, "interleaved"), [[9 / 25, 0, 16 / 25, 0]])


def test_a_band_pass_head_scores_a_cosine_of_the_distance_at_its_band():
    """The premise: rotated by the encoding, q·k at distance Δ is |q_p|·|k_p|·cos(ω_p·Δ + φ) for a head
    whose q and k live in pair p — the amplitude band_spectrum assigns to band p."""
    pe = PeriodicRoPE(8, 1, periods=[3.0, 8.0])  # pairs at periods 3, 8, 628, 6283
    omega = pe.scaled_frequencies().double()
    amp = np.zeros((1, 4))
    amp[0, 1] = 1.0
    q = torch.as_tensor(heads_with_amplitudes(2.0 * amp, n=1))  # (1, 1, 8)
    k = torch.as_tensor(heads_with_amplitudes(0.5 * amp, n=1, seed=3))
    delta = torch.arange(40, dtype=torch.float64)
    qr, _ = pe.rotate(q[None].expand(1, 1, 40, 8).clone(), q[None].expand(1, 1, 40, 8).clone(), delta, delta)
    zero = torch.zeros(1, dtype=torch.float64)
    k0, _ = pe.rotate(k[None], k[None], zero, zero)
    score = (qr[0, 0] @ k0[0, 0, 0]).numpy()  # (40,): the query Δ positions after the key
    phase = math.atan2(float(k[0, 0, 3]), float(k[0, 0, 2])) - math.atan2(
        float(q[0, 0, 3]), float(q[0, 0, 2]))
    expected = 2.0 * 0.5 * np.cos(omega[1].item() * delta.numpy() - phase)
    assert np.allclose(score, expected, atol=1e-12)
    assert np.allclose(score[8:], score[:-8], atol=1e-12)  # period 8: the band's own period
    assert np.allclose(band_spectrum(q.numpy(), k.numpy()), [[0, 1, 0, 0]])


def test_data_band_share_reads_the_pairs_at_the_data_periods():
    omegas = 2 * math.pi / np.array([3.0, 8.0, 628.0, 6283.0])
    spectra = [np.array([[0.5, 0.2, 0.3, 0.0], [0.0, 0.1, 0.0, 0.9]])]
    assert data_band_share(spectra, omegas, [3, 8]) == pytest.approx((0.7 + 0.1) / 2)
    assert data_band_share(spectra, omegas, [3]) == pytest.approx(0.25)
    assert math.isnan(data_band_share(spectra, omegas, [5]))


def test_model_bands_reads_each_layers_unrotated_queries_and_keys():
    torch.manual_seed(0)
    pe = {"class_path": "posenc.PeriodicRoPE", "init_args": {"periods": [3.0, 8.0]}}
    model = task(DNALanguageModel, vocab_size=5, d_model=16, n_heads=2, n_layers=2, pe=pe).eval()
    x = torch.randint(0, 4, (3, 32))
    layers = layer_queries_keys(model, x)
    assert len(layers) == 2 and layers[0][0].shape == (96, 2, 8) and layers[0][0].dtype == np.float64
    block = model.backbone.blocks[0]  # its queries: its own projection of the normed embedded tokens
    with torch.no_grad():
        qkv = block.attn.qkv(block.ln1(model.embedding(x))).view(3, 32, 3, 2, 8)  # (B, T, 3, H, Dh)
    assert np.allclose(layers[0][0], qkv[:, :, 0].reshape(96, 2, 8).double().numpy())
    assert np.allclose(layers[0][1], qkv[:, :, 1].reshape(96, 2, 8).double().numpy())
    b = model_bands(model, x)
    assert len(b["spectra"]) == 2 and all(np.allclose(s.sum(axis=1), 1.0) for s in b["spectra"])
    assert np.allclose(2 * math.pi / b["omegas"][:2], [3.0, 8.0])
    assert 0.25 <= b["concentration"] <= 1.0 and 0.0 <= b["information"] <= 1.0
    with pytest.raises(PosencError, match="need a rotary encoding"):
        model_bands(task(DNALanguageModel, vocab_size=5, d_model=16, n_heads=2, n_layers=1,
                         pe=None).eval(), x)
    with pytest.raises(PosencError, match="KeepInitial"):
        initial_model(model)


@pytest.mark.slow
def test_band_claim_runs_at_a_tiny_budget_and_keeps_the_initial_network(tmp_path):
    import json

    from pipelines.studies.claims.runner import run

    with workdir_with_store(tmp_path):
        [result] = run(["--only", "band_filters", "--smoke", "--out", "res"])
    saved = json.loads((tmp_path / "res/band_filters/result.json").read_text())
    assert result.number == "16b" and saved["holds"] in ("yes", "no", "inconclusive (underpowered)")
    assert "I(head; band)" in result.measured
    assert "trained heads − same heads at initialisation" in result.primary
    assert result.power is not None and "the trained LM" in result.power_text
    assert "Holm" in result.details and (tmp_path / "res/band_filters/band_spectra.png").is_file()
    # the control is the network before training: its numbers differ from the trained ones (the smoke
    # run trains two batches, enough to move the weights); the randomized-positions arm is trained too
    m = result.metrics
    assert m["information/trained heads"] != m["information/same heads at initialisation"]
    assert "information/randomized positions" in m
    assert "randomized positions (band concentration)" in result.details
    assert len(result.children) == 4  # two seeds × (the trained LM, the randomized-positions LM)


@pytest.mark.slow
def test_steps_to_criterion_runs_at_a_tiny_budget_and_censors_what_never_reached_it(tmp_path):
    from pipelines.studies.claims.runner import run

    with workdir_with_store(tmp_path):
        [result] = run(["--only", "directional_bias", "--smoke", "--out", "res", "--jobs", "1"])
    assert result.number == "12" and "steps to val/acc ≥ 0.9" in result.measured
    assert "t5_bias − sinusoidal" in result.primary and "Holm" in result.details
    # the smoke budget trains two batches: no arm reaches the criterion, every seed is censored at 425
    assert all(v == 425.0 for k, v in result.metrics.items() if k.endswith("/steps"))
