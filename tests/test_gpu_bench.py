"""``python -m pipelines.studies.bench.gpu_attention``: a clear refusal without CUDA; on CUDA both paths
run."""

from __future__ import annotations

import pytest
import torch

from pipelines.studies.bench import gpu_attention


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_refuses_in_one_line_without_cuda(capsys):
    assert gpu_attention.main() == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "needs a CUDA GPU" in err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_both_paths_time_a_training_step_on_cuda():
    f_ms, f_mib, kept = gpu_attention.time_step("posenc.ALiBi", 1, 256, flex=True)
    s_ms, s_mib, _ = gpu_attention.time_step("posenc.ALiBi", 1, 256, flex=False)
    assert kept and min(f_ms, s_ms, f_mib, s_mib) > 0
