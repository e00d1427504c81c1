"""FlexAttention against SDPA with the dense bias, on a CUDA GPU: what sets ``choose_path``'s rule.

For ALiBi and T5's bias (parameters frozen, as Flex needs) the library's Transformer (4 layers,
d_model 128, 8 heads of 16, causal) runs a training step (bf16 autocast, forward and backward) at
8×1,024, 2×4,096 and 1×16,384 tokens, once on the ``flex`` path and once on ``sdpa+bias``; each is
warmed up 5 times, then timed 20 times with CUDA events (median), and its peak GPU memory read.
Printed: both times, both peaks, their ratio (same process, same GPU).

Usage: ``python -m pipelines.studies.bench.gpu_attention`` (on a machine with CUDA; measured on an H200:
docs/performance.md).
"""

from __future__ import annotations

import statistics
import sys

import torch

from posenc import build_encoding
from posenc.nn import AttentionSettings, Transformer

SCHEMES = ("posenc.ALiBi", "posenc.T5Bias")
SHAPES = ((8, 1024), (2, 4096), (1, 16384))  # (batch, tokens)


def time_step(scheme: str, batch: int, length: int, flex: bool) -> tuple[float, float, bool]:
    """(median ms, peak MiB, whether every layer kept Flex) of a bf16 training step."""
    torch.manual_seed(0)
    pe = build_encoding({"class_path": scheme}, 128, 8).cuda().requires_grad_(False)
    # long_threshold 1: Flex at every length past one key (AttentionSettings refuses 0, which this asked for
    # before); 10**9: the dense bias through SDPA at every length
    m = Transformer(128, 8, 4, pe, causal=True,
                    settings=AttentionSettings(flex=flex, long_threshold=1 if flex else 10**9)).cuda()
    x = torch.randn(batch, length, 128, device="cuda")  # (B, T, C)
    pos = torch.arange(length, device="cuda")  # (T,)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = m(x, pos)  # (B, T, C)
        y.float().square().mean().backward()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    kept = all(block.attn.flex_ok for block in m.blocks)
    return statistics.median(times), torch.cuda.max_memory_allocated() / 2**20, kept


def main() -> int:
    if not torch.cuda.is_available():
        print("error: pipelines.studies.bench.gpu_attention needs a CUDA GPU (none is visible)",
              file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for scheme in SCHEMES:
        for batch, length in SHAPES:
            f_ms, f_mib, kept = time_step(scheme, batch, length, flex=True)
            s_ms, s_mib, _ = time_step(scheme, batch, length, flex=False)
            torch.cuda.empty_cache()
            print(f"{scheme:14s} {batch}×{length:<5d} flex {f_ms:7.2f} ms {f_mib:7.0f} MiB"
                  f"{'' if kept else ' (fell back)'} | sdpa+bias {s_ms:7.2f} ms {s_mib:7.0f} MiB"
                  f" | sdpa/flex time {s_ms / f_ms:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
