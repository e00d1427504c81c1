"""The bench machinery on tiny sizes (no timing thresholds: benchmarks are not tests), and the
fairness of the comparison: every implementation has posenc's shapes and, with posenc's weights,
computes posenc's function."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import replace

import pytest
import torch

from pipelines.studies.bench.models import (
    SCHEMES,
    XT_KWARGS,
    XT_NO_FLASH,
    build,
    forward_flops,
    hand_model,
    param_groups,
)
from pipelines.studies.bench.plan import Cell, Plan, Workload
from pipelines.studies.bench.report import ratio, render, spread_summary
from pipelines.studies.bench.run import (
    dense_estimate_gb,
    main,
    measure_group,
    parse_cpus,
    pin_cpus,
    run,
    run_group,
)

HAVE_XT = importlib.util.find_spec("x_transformers") is not None
NEEDS_XT = pytest.mark.skipif(not HAVE_XT, reason="x-transformers not installed: pip install -e '.[dev]' "
                              "(or '.[bench]'); the hand encoder is still checked against posenc")
XT_CASES = [(s, impl) for s in XT_KWARGS for impl in ("xt", "xt-flash")
            if not (impl == "xt-flash" and s in XT_NO_FLASH)]

TINY = Plan(d=16, heads=2, layers=1, workloads=(Workload("train", 1, 24, 2), Workload("infer", 1, 40, 2)),
            schemes=("NoPE", "ALiBi"), impls=("posenc", "sdpa"), repeats=2, budget_s=0.1,
            data_seconds=0.05)


def test_run_writes_a_table_with_every_cell(tmp_path):  # exactly 2 rounds, whatever the load
    out = tmp_path / "bench.md"
    text = run(replace(TINY, rounds=2), ["--quick"], str(out), log=lambda *a, **k: None)
    assert out.read_text() == text
    assert "matmul peak" in text and "DNA datamodule" in text and "Spread of the timings" in text
    assert "Shapes: D 16, 2 heads × 8 (attention width 16), MLP 16 → 64 → 16" in text
    assert "| posenc | 1,024 | 64 | 2,128 | 48 | 48 |" in text  # 1 layer: 4·16², 4·16; 2·16·64 + 64 + 16
    assert f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)" in text and "usable" in text
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
    plan = Plan(d=16, heads=8, layers=1, schemes=("ALiBi",), impls=("sdpa",), mem_cap_gb=0.1)
    cells = run_group("ALiBi", Workload("infer", 1, 2048, 1), plan)  # ~0.13 GB of bias: over the cap
    assert cells["sdpa"].tokens_s is None and "GB" in cells["sdpa"].note
    assert cells["nope"].tokens_s  # the unbiased reference in its rounds still runs


def test_flops_and_render_without_results():
    assert forward_flops(128, 4, 512, 512) == 4 * 512 * (2 * (4 * 128**2 + 8 * 128**2) + 4 * 512 * 128)
    assert "posenc benchmark" in render({}, TINY, 1e9, ["# posenc benchmark"], "data")
    assert set(TINY.schemes) <= set(SCHEMES)


# ----------------------------------------------------------------------------- same shapes
D, H, LAYERS = 16, 2, 2
SHARED = ("attention", "mlp", "mlp-bias", "norm")  # what every implementation must have alike


@pytest.mark.parametrize("scheme", [s for s in SCHEMES if hand_model(s, D, H, LAYERS) is not None])
def test_hand_encoder_has_posenc_parameters_part_by_part(scheme):
    ours = param_groups("posenc", build("posenc", scheme, D, H, LAYERS))
    hand = param_groups("sdpa", build("sdpa", scheme, D, H, LAYERS))
    assert ours["other"] == hand["other"] == 0
    assert {k: hand[k] for k in hand if k != "scheme"} == {k: ours[k] for k in ours if k != "scheme"}
    assert ours["attention"] == LAYERS * 4 * D * D and ours["mlp"] == LAYERS * 2 * D * 4 * D


@NEEDS_XT
@pytest.mark.parametrize(("scheme", "impl"), XT_CASES)
def test_x_transformers_has_posenc_parameters_part_by_part(scheme, impl):
    """Attention width, head size, MLP width and its biases, depth and norms as posenc's; the only
    difference is what x-transformers builds without an option: bias-free projections and norms."""
    ours = param_groups("posenc", build("posenc", scheme, D, H, LAYERS))
    xt = build(impl, scheme, D, H, LAYERS)
    theirs = param_groups(impl, xt)
    assert theirs["other"] == 0, "a part of x-transformers' model has no counterpart in posenc's"
    assert {k: theirs[k] for k in SHARED} == {k: ours[k] for k in SHARED}
    assert theirs["attention-bias"] == theirs["norm-bias"] == 0
    assert ours["attention-bias"] == LAYERS * 4 * D
    for layer in xt.net.layers[::2]:  # (attention, feed-forward) pairs
        attn = layer[1]
        assert attn.heads == H and attn.to_q.weight.shape == (D, D)  # H heads × D/H


@NEEDS_XT
@pytest.mark.parametrize("scheme", ["T5Bias", "DynamicBias"])
def test_x_transformers_scheme_tables_have_posenc_shapes_at_bench_width(scheme):
    """At the bench's D 128, 8 heads: T5's (32 buckets, H) table and DPB's four linear layers alike."""
    ours = build("posenc", scheme, 128, 8, 1).net.pe
    theirs = build("xt", scheme, 128, 8, 1).net.rel_pos
    shapes = lambda m: sorted(tuple(p.shape) for p in m.parameters() if p.dim() == 2)  # noqa: E731
    assert shapes(ours) == shapes(theirs) and shapes(ours)


def _posenc_weights_into_xt(ours, xt) -> None:
    """posenc's weights into x-transformers' Encoder, posenc's biases zeroed (x-transformers has none)."""
    with torch.no_grad():
        for i, blk in enumerate(ours.net.blocks):
            attn_norm, attn = xt.net.layers[2 * i][0][0], xt.net.layers[2 * i][1]
            ff_norm, ff = xt.net.layers[2 * i + 1][0][0], xt.net.layers[2 * i + 1][1].ff
            for bias in (blk.attn.qkv.bias, blk.attn.out.bias, blk.ln1.bias, blk.ln2.bias):
                bias.zero_()
            for dst, src in zip((attn.to_q, attn.to_k, attn.to_v), blk.attn.qkv.weight.chunk(3), strict=True):
                dst.weight.copy_(src)  # (D, D) each
            attn.to_out.weight.copy_(blk.attn.out.weight)
            attn_norm.gamma.copy_(blk.ln1.weight - 1)  # x-transformers' gain has a unit offset
            ff_norm.gamma.copy_(blk.ln2.weight - 1)
            ff[0][0].load_state_dict(blk.mlp[0].state_dict())
            ff[2].load_state_dict(blk.mlp[2].state_dict())
        ours.net.ln_f.bias.zero_()
        xt.net.final_norm.gamma.copy_(ours.net.ln_f.weight - 1)


@NEEDS_XT
@pytest.mark.parametrize(("scheme", "impl"), [c for c in XT_CASES if c[0] != "DynamicBias"])
def test_x_transformers_computes_posenc_function_when_weights_agree(scheme, impl):
    """Not only the same parameter counts: the same function (float64). DPB is left out: its MLP
    uses SiLU in x-transformers, ReLU in posenc (the same layers and cost)."""
    torch.manual_seed(0)
    ours, xt = build("posenc", scheme, D, H, LAYERS).double().eval(), build(impl, scheme, D, H, LAYERS)
    xt = xt.double().eval()
    with torch.no_grad():
        for blk in ours.net.blocks:  # gains away from 1, so a missed copy shows
            blk.ln1.weight.normal_(1.0, 0.2)
            blk.ln2.weight.normal_(1.0, 0.2)
    _posenc_weights_into_xt(ours, xt)
    if scheme == "T5Bias":  # x-transformers multiplies its table by √Dh
        xt.net.rel_pos.relative_attention_bias.weight.data.copy_(ours.net.pe.table / (D // H) ** 0.5)
    x = torch.randn(2, 30, D, dtype=torch.float64)
    with torch.no_grad():
        # float32 inside: x-transformers' non-flash softmax, both rotary angle tables (~1e-7 here;
        # a different width, scale, head split or rotation differs by ~1e-1)
        torch.testing.assert_close(xt(x), ours(x), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- noisy hosts
def test_paired_ratio_is_the_median_of_per_round_ratios():
    a = Cell(tokens_s=1.0, times=[1.0, 2.0, 1.0], group=3)  # round 2 slow for both: a load change
    b = Cell(tokens_s=1.0, times=[2.0, 4.0, 1.5], group=3)
    assert ratio(a, b) == "2.00× [1.50–2.00]"
    assert ratio(a, Cell(tokens_s=0.5, times=b.times, group=4)) == "2.00×"  # other rounds: medians
    assert "over 2 cells" in spread_summary({("posenc", "X", 0): a, ("sdpa", "X", 0): b})
    fastest = Cell(tokens_s=1.0, times=a.times, group=3, stat="min")
    assert ratio(fastest, Cell(tokens_s=1 / 1.5, times=b.times, group=3, stat="min")) == "1.50× [1.50–2.00]"


def test_rounds_fixes_the_number_of_timed_rounds():
    plan = Plan(d=16, heads=2, layers=1, repeats=1, budget_s=0.0, rounds=3, stat="min")
    models = {"posenc": build("posenc", "NoPE", 16, 2, 1), "sdpa": build("sdpa", "NoPE", 16, 2, 1)}
    cells = measure_group(models, Workload("infer", 1, 16, repeats=1), plan)
    assert [len(c.times) for c in cells.values()] == [3, 3] and cells["posenc"].group == cells["sdpa"].group
    assert all(c.tokens_s == 16 / min(c.times) for c in cells.values())  # --stat min: the fastest run


def test_pin_binds_every_thread_and_sets_torch_threads():
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    cpu = min(before)
    try:
        pin_cpus((cpu,))
        assert all(os.sched_getaffinity(int(t)) == {cpu} for t in os.listdir("/proc/self/task"))
        assert torch.get_num_threads() == 1
    finally:
        for t in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(t), before)
        torch.set_num_threads(threads)
    assert parse_cpus("0,2-3") == (0, 2, 3)
    with pytest.raises(ValueError, match="not available"):
        pin_cpus((max(before) + 1,))


@pytest.mark.parametrize(("argv", "says"), [
    (["--pin", "x"], "--pin 'x'"), (["--rounds", "0"], "--rounds"), (["--schemes", "Nope"], "unknown scheme"),
    (["--stat", "mean"], "--stat"),
])
def test_bad_options_exit_with_status_2(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--out", "", *argv])
    assert exc.value.code == 2 and says in capsys.readouterr().err
