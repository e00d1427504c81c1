"""The bench machinery on tiny sizes (no timing thresholds: benchmarks are not tests)."""

from __future__ import annotations

import pytest
import torch

from pipelines.bench.models import SCHEMES, build, forward_flops, hand_model
from pipelines.bench.run import Plan, Workload, dense_estimate_gb, render, run, run_group

TINY = Plan(d=16, heads=2, layers=1, workloads=(Workload("train", 1, 24, 2), Workload("infer", 1, 40, 2)),
            schemes=("NoPE", "ALiBi"), impls=("posenc", "sdpa"), repeats=2, budget_s=0.1,
            data_seconds=0.05)


def test_run_writes_a_table_with_every_cell(tmp_path):
    out = tmp_path / "bench.md"
    text = run(TINY, ["--quick"], str(out), log=lambda *a, **k: None)
    assert out.read_text() == text
    assert "matmul peak" in text and "DNA datamodule" in text
    for w in TINY.workloads:
        assert f"### {w.name}" in text
    rows = [line for line in text.splitlines() if line.startswith("| NoPE") or line.startswith("| ALiBi")]
    assert len(rows) == 2 * len(TINY.workloads)
    assert all("k ±" in row and "MB" in row for row in rows)  # both implementations measured
    assert all(row.count("×") >= 2 for row in rows)


@pytest.mark.parametrize("scheme", ["NoPE", "Sinusoidal", "RoPE", "ALiBi", "T5Bias", "GaussianPrior",
                                    "DynamicBias", "PeriodicRoPE"])
def test_hand_encoder_matches_posenc_when_weights_agree(scheme):
    """The hand-written reference computes the same function as posenc (same weights, same scheme)."""
    torch.manual_seed(0)
    ours = build("posenc", scheme, 16, 2, 2).eval()
    hand = hand_model(scheme, 16, 2, 2).eval()
    pe = ours.net.pe
    if scheme in ("T5Bias", "GaussianPrior", "DynamicBias"):  # share the scheme's parameters
        hand = hand_model(scheme, 16, 2, 2, pe=pe).eval()
    with torch.no_grad():
        for blk, lay in zip(ours.net.blocks, hand.layers, strict=True):
            for name in ("ln1", "ln2", "mlp"):
                getattr(lay, name).load_state_dict(getattr(blk, name).state_dict())
            lay.qkv.load_state_dict(blk.attn.qkv.state_dict())
            lay.out.load_state_dict(blk.attn.out.state_dict())
        hand.ln_f.load_state_dict(ours.net.ln_f.state_dict())
    x = torch.randn(2, 30, 16)
    if "RoPE" in scheme:  # posenc's default layout is interleaved, the hand one half: compare per layout
        pe.layout = "half"
    torch.testing.assert_close(hand(x), ours(x), rtol=1e-4, atol=1e-5)


def test_scheme_rows_time_the_nope_reference_in_their_own_rounds():
    cells = run_group("ALiBi", TINY.workloads[0], TINY)
    assert cells["nope"].tokens_s and len(cells["nope"].times) == len(cells["posenc"].times)
    assert "nope" not in run_group("NoPE", TINY.workloads[0], TINY)  # its own hand SDPA cell is it


def test_skips_configurations_that_need_too_much_memory():
    w = Workload("infer", 1, 16384)
    assert dense_estimate_gb("posenc", "ALiBi", w, 8, 4) == 0
    assert dense_estimate_gb("xt", "NoPE", w, 8, 4) > 20
    plan = Plan(d=16, heads=8, layers=1, schemes=("ALiBi",), impls=("sdpa",), mem_cap_gb=1.0)
    cells = run_group("ALiBi", w, plan)
    assert cells["sdpa"].tokens_s is None and "GB" in cells["sdpa"].note


def test_flops_and_render_without_results():
    assert forward_flops(128, 4, 512, 512) == 4 * 512 * (2 * (4 * 128**2 + 8 * 128**2) + 4 * 512 * 128)
    assert "posenc benchmark" in render({}, TINY, 1e9, ["# posenc benchmark"], "data")
    assert set(TINY.schemes) <= set(SCHEMES)
