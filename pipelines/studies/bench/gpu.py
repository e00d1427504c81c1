"""Everything the GPU path needs measured, in one command: ``python -m pipelines.studies.bench.gpu``.

On a CUDA machine it runs, in order, and prints (and writes to ``--out``/gpu_report.md):

1. the ``gpu``-marked tests (``pytest -m gpu``);
2. ``make train`` on the GPU (``configs/dna_lm.yaml`` + ``configs/trainer/gpu.yaml``);
3. the Flex-vs-SDPA grid of :mod:`pipelines.studies.bench.gpu_attention` over 1k–32k keys (32k tokens a step);
4. MFU of a bf16 training step for RoPE and ALiBi at d_model 512, 8 heads, 4 layers, 1×4,096 tokens:
   model FLOPs (:func:`step_flops`, the PaLM convention: 3× the forward's matmuls, attention's full
   T² counted even under the causal mask), divided by the median step time and the device's dense
   bf16 peak (:data:`PEAK_BF16`; unknown devices: TFLOP/s only).

``--tiny`` runs steps 3 and 4 at toy sizes on whatever device there is (CPU included) and steps 1–2 only
as printed commands: what ``tests/test_gpu_runner.py`` checks on CPU. No GPU was lent to the session
that wrote this; see docs/performance.md.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from pipelines.studies.bench.gpu_attention import time_step
from pipelines.studies.tables import md_lines
from posenc import build_encoding
from posenc.nn import Transformer

#: dense bf16 tensor-core peak, TFLOP/s, by a substring of ``torch.cuda.get_device_name()`` (vendor sheets)
PEAK_BF16 = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0}
GRID = ((32, 1024), (16, 2048), (8, 4096), (4, 8192), (2, 16384), (1, 32768))  # (batch, keys)
TINY_GRID = ((2, 64), (1, 128))
MFU_SCHEMES = ("posenc.RoPE", "posenc.ALiBi")


def commands() -> list[list[str]]:
    """Steps 1–2 as argument lists (run from the repository root; step 2 is what ``make train`` runs)."""
    py = sys.executable
    tests = [py, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"]
    train = [py, "-m", "pipelines.train", "fit", "--config", "configs/dna_lm.yaml",
             "--config", "configs/trainer/gpu.yaml"]
    return [tests, train]


def timed(step: Callable[[], None], device: torch.device, warm: int, reps: int) -> float:
    """Median milliseconds of ``step`` after ``warm`` untimed calls (CUDA events on CUDA)."""
    for _ in range(warm):
        step()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def step_flops(model: torch.nn.Module, batch: int, tokens: int) -> tuple[int, int]:
    """(all, linear-only) FLOPs of a training step: 3 × forward, forward = 2·B·T·(Linear weights) +
    4·B·T²·d per attention layer (QKᵀ and AV, full square)."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    attn = [m for m in model.modules() if hasattr(m, "qkv") and hasattr(m, "n_heads")]
    d = attn[0].qkv.in_features
    matmul = 2 * batch * tokens * linear
    return 3 * (matmul + len(attn) * 4 * batch * tokens * tokens * d), 3 * matmul


def mfu(scheme: str, d_model: int, tokens: int, device: torch.device, reps: int) -> dict:
    """FLOPs, median ms, TFLOP/s and MFU of one bf16 training step (4 layers, 8 heads, causal)."""
    torch.manual_seed(0)
    pe = build_encoding({"class_path": scheme}, d_model, 8)
    model = Transformer(d_model, 8, 4, pe, causal=True).to(device)
    x = torch.randn(1, tokens, d_model, device=device)  # (B, T, C)
    pos = torch.arange(tokens, device=device)  # (T,)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            y = model(x, pos)  # (B, T, C)
        y.float().square().mean().backward()

    flops = step_flops(model, 1, tokens)[0]
    ms = timed(step, device, warm=2, reps=reps)
    tflops = flops / (ms / 1e3) / 1e12
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    return {"scheme": scheme, "flops": flops, "ms": ms, "tflops": tflops,
            "mfu": None if peak is None else tflops / peak}


def grid_rows(shapes, device: torch.device) -> list[str]:
    """The table of Flex vs SDPA+bias per scheme and shape (CUDA: :func:`time_step`; elsewhere a line per
    shape saying it is not applicable)."""
    if device.type != "cuda":
        return [f"grid {b}×{t}: FlexAttention runs on CUDA only (skipped on {device.type})"
                for b, t in shapes]
    rows: list[list[str]] = []
    for scheme in ("posenc.ALiBi", "posenc.T5Bias"):
        for batch, keys in shapes:
            try:
                f_ms, f_mib, kept = time_step(scheme, batch, keys, flex=True)
                s_ms, s_mib, _ = time_step(scheme, batch, keys, flex=False)
            except torch.cuda.OutOfMemoryError:
                rows.append([scheme, f"{batch}×{keys}", "out of memory", "", ""])
                continue
            finally:
                torch.cuda.empty_cache()
            note = "" if kept else " (fell back)"
            rows.append([scheme, f"{batch}×{keys}", f"{f_ms:.2f} ms, {f_mib:.0f} MiB{note}",
                         f"{s_ms:.2f} ms, {s_mib:.0f} MiB", f"{s_ms / f_ms:.2f}"])
    return md_lines(["scheme", "batch×keys", "flex", "sdpa+bias", "sdpa/flex time"], rows)


def run(args: argparse.Namespace) -> list[str]:
    """The report's lines; steps 1–2 run as subprocesses unless ``--tiny``."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (no CUDA)"
    lines = [f"# GPU runner: {name}, torch {torch.__version__}", ""]
    for cmd in commands():
        if args.tiny:
            lines.append(f"would run: {shlex.join(cmd)}")
            continue
        rc = subprocess.run(cmd, check=False).returncode
        lines.append(f"ran (exit {rc}): {shlex.join(cmd)}")
    lines += ["", *grid_rows(TINY_GRID if args.tiny else GRID, device), ""]
    d_model, tokens, reps = (32, 64, 2) if args.tiny else (512, 4096, 20)
    rows = []
    for scheme in MFU_SCHEMES:
        m = mfu(scheme, d_model, tokens, device, reps)
        share = "n/a" if m["mfu"] is None else f"{100 * m['mfu']:.1f} %"
        rows.append([scheme, f"{m['flops'] / 1e9:.3g}", f"{m['ms']:.1f}", f"{m['tflops']:.3g}", share])
    return lines + md_lines(["scheme", "GFLOP/step", "ms", "TFLOP/s", "MFU"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.studies.bench.gpu",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="toy sizes on any device; steps 1-2 printed only")
    parser.add_argument("--out", type=Path, default=Path("outputs/gpu_bench"),
                        help="where gpu_report.md goes")
    args = parser.parse_args(argv)
    if not args.tiny and not torch.cuda.is_available():
        print("error: python -m pipelines.studies.bench.gpu needs a CUDA GPU (none is visible); "
              "--tiny runs on CPU", file=sys.stderr)
        return 2
    lines = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
