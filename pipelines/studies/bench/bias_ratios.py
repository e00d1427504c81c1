"""Training speed of the learned bias schemes as ratios to NoPE, interleaved in one process.

Usage: ``python -m pipelines.studies.bench.bias_ratios B T [ROUNDS]`` (e.g. ``8 512 4``, ``1 4096 3``).
Each round
runs one training step (forward, backward, AdamW) of every scheme's model in turn — the bench's shapes:
D 128, 8 heads, 4 layers — on one torch thread; the first round is a warm-up. Printed: each scheme's
fastest step and NoPE's fastest step divided by it (other jobs on the host only add time). Used for the
issue-41 table in docs/performance.md; ``make bench`` is the full grid.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from posenc import build_encoding
from posenc.nn import Transformer

SCHEMES = ("PositionalEncoding", "T5Bias", "DynamicBias", "GaussianPrior", "ShawRelative")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.studies.bench.bias_ratios",
                                     description="Training speed of the learned bias schemes over NoPE.")
    parser.add_argument("batch", type=int)
    parser.add_argument("length", type=int)
    parser.add_argument("rounds", type=int, nargs="?", default=4)
    args = parser.parse_args(argv)
    batch, length, rounds = args.batch, args.length, args.rounds
    torch.set_num_threads(1)
    x, pos = torch.randn(batch, length, 128), torch.arange(length)  # (B, T, C), (T,)
    models = {}
    for name in SCHEMES:
        torch.manual_seed(0)
        m = Transformer(128, 8, 4, build_encoding({"class_path": f"posenc.{name}"}, 128, 8))
        models[name] = (m, torch.optim.AdamW(m.parameters()))
    best = dict.fromkeys(SCHEMES, float("inf"))
    for r in range(rounds):
        for name, (m, opt) in models.items():
            t0 = time.perf_counter()
            opt.zero_grad()
            m(x, pos).square().mean().backward()
            opt.step()
            if r:
                best[name] = min(best[name], time.perf_counter() - t0)
    print(f"train {batch}×{length}, {rounds - 1} timed rounds, torch {torch.__version__}, 1 thread")
    for name, t in best.items():
        print(f"{name:20s} {t * 1e3:9.1f} ms  {best['PositionalEncoding'] / t:.2f}× NoPE")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
