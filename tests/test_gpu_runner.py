"""``python -m pipelines.studies.bench.gpu``: refuses without CUDA, and its --tiny mode runs on CPU."""

from __future__ import annotations

import pytest
import torch

from pipelines.studies.bench import gpu


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_refuses_in_one_line_without_cuda(capsys, tmp_path):
    assert gpu.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "needs a CUDA GPU" in err


def test_tiny_mode_plans_the_gpu_steps_and_measures_mfu_on_any_device(tmp_path):
    assert gpu.main(["--tiny", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "gpu_report.md").read_text()
    assert "would run: " in report and "-m gpu" in report
    assert "--config configs/dna_lm.yaml --config configs/trainer/gpu.yaml" in report
    rows = [r for r in report.splitlines() if r.startswith(("| posenc.RoPE", "| posenc.ALiBi |"))]
    mfu_rows = [r for r in rows if r.count("|") == 6 and "×" not in r]
    assert len(mfu_rows) == 2
    for row in mfu_rows:
        gflop, ms, tflops = (float(c) for c in row.split("|")[2:5])
        assert gflop > 0 and ms > 0 and tflops > 0


def test_step_flops_agree_with_torch_flop_counter_on_the_linear_layers():
    """The linear part of :func:`gpu.step_flops` is what FlopCounterMode counts for a step on CPU (it
    counts no CPU SDPA kernel, so attention's 4·B·T²·d per layer is the closed form alone)."""
    from torch.utils.flop_counter import FlopCounterMode

    from posenc import RoPE
    from posenc.nn import Transformer

    d, t, layers = 64, 128, 4
    model = Transformer(d, 8, layers, RoPE(d, 8), causal=True)
    x, pos = torch.randn(2, t, d), torch.arange(t)
    with FlopCounterMode(display=False) as counter:
        model(x, pos).square().mean().backward()
    total, linear = gpu.step_flops(model, 2, t)
    assert counter.get_total_flops() == linear
    assert total - linear == 3 * layers * 4 * 2 * t * t * d
