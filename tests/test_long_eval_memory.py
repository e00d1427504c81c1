"""Whole-window evaluation far past the training length keeps memory bounded (issue 27): for every
scheme the DNA study scores past L₀, no op of a causal no-grad forward longer than ``long_threshold``
returns a tensor whose storage is anywhere near one (H, T, T) float32 square — the blocked and
Toeplitz paths keep O(T) per head (see pipelines/resources.py and docs/extrapolation.md for the
peak RSS of the make-train model at 8,192 tokens). A regression guard: an op's output sizes are
recorded by a torch dispatch mode (what an op allocates inside, e.g. a fused kernel's work buffer,
is not seen)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from posenc import all_schemes
from posenc.nn import AttentionSettings, Transformer
from tests.helpers import D, H, scheme

STUDY = ("PositionalEncoding", "RoPE", "PeriodicRoPE", "ALiBi", "Kerple", "FIRE", "T5Bias", "GaussianPrior")
T = 1024


class LargestOutput(TorchDispatchMode):
    """Records the largest storage (bytes) of any op's output while active, and the op."""

    def __init__(self) -> None:
        super().__init__()
        self.nbytes, self.op = 0, ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() > self.nbytes:
                self.nbytes, self.op = t.untyped_storage().nbytes(), str(func)
        return out


def schemes() -> list:
    """The study's schemes; FIRE (an MLP on every (query, key) pair) runs in the slow suite."""
    return [pytest.param(c, marks=pytest.mark.slow) if c.__name__ == "FIRE" else c
            for c in all_schemes() if c.__name__ in STUDY]


@pytest.mark.parametrize("cls", schemes(), ids=lambda c: c.__name__)
def test_no_square_tensor_past_the_long_threshold(cls):
    model = Transformer(D, H, 2, scheme(cls), causal=True,
                        settings=AttentionSettings(long_threshold=256, block_elements=1 << 10)).eval()
    x = torch.randn(1, T, D)  # (B, T, D)
    probe = LargestOutput()
    with torch.no_grad(), probe:
        y = model(x, torch.arange(T))
    assert torch.isfinite(y).all()
    square = 4 * H * T * T  # bytes of one (H, T, T) float32 tensor; (T, T) float32 at H = 2: half
    assert probe.nbytes < square / 2, f"{cls.__name__}: {probe.op} returned {probe.nbytes} bytes"


def test_fire_bias_without_gradients_runs_its_mlp_in_bounded_chunks(monkeypatch):
    import posenc.learned_bias as lb
    from posenc import FIRE

    pe, n = scheme(FIRE), 256
    pos, q = torch.arange(n), torch.randn(1, H, n, D // H)  # (B, H, T, Dh)
    whole = pe.bias(q, pos, pos).detach()  # with autograd: the MLP on all n² pairs at once
    monkeypatch.setattr(lb, "FIRE_PAIRS", 4096)  # 16 query rows per chunk
    probe = LargestOutput()
    with torch.no_grad(), probe:
        chunked = pe.bias(q, pos, pos)
    torch.testing.assert_close(chunked, whole)
    hidden_all = 4 * n * n * 32  # bytes of one hidden activation over every pair (hidden 32)
    assert probe.nbytes <= hidden_all / 8, f"{probe.op} returned {probe.nbytes} bytes"
