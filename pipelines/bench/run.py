"""``make bench``: throughput and peak memory of posenc against x-transformers and a hand-written
SDPA encoder, all in one run, as a markdown table (printed and written to ``bench_results.md``).

For every scheme and workload (training tokens/s at 8×512 and 1×4096; inference tokens/s at 1×512,
1×4096, 1×16384) each implementation is warmed up, then timed several times; the table shows the
median, the spread ((max − min)/median), the peak memory (resident-set growth over the first
timed run: the kernel's high-water mark, reset before it, so no run carries instrumentation),
posenc's ratios to the others measured in the same run, and posenc's model FLOP utilisation
against this machine's measured float32 matmul peak. Configurations whose dense L×L tensors
would exceed ``--mem-cap-gb`` are not run and say how much they would need.

Usage: ``python -m pipelines.bench.run [--quick] [--out bench_results.md]``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

import torch

from pipelines.bench.models import SCHEMES, XT_NO_FLASH, build, forward_flops, matmul_peak

IMPLS = ("posenc", "xt", "xt-flash", "sdpa")
NOPE_REF = "nope"  # the NoPE hand SDPA encoder, timed in every scheme's rounds


@dataclass(frozen=True)
class Workload:
    mode: str  # train | infer
    batch: int
    length: int
    repeats: int = 5  # timed runs at most (the plan may cap it)
    warmup_length: int | None = None  # warm up at a shorter length (the same kernels), default: same

    @property
    def name(self) -> str:
        return f"{self.mode} {self.batch}×{self.length}"


@dataclass(frozen=True)
class Plan:
    d: int = 128
    heads: int = 8
    layers: int = 4
    workloads: tuple[Workload, ...] = (  # longest first: an interrupted run keeps the memory figures
        Workload("infer", 1, 16384, 2, warmup_length=2048), Workload("infer", 1, 4096, 3),
        Workload("train", 1, 4096, 3), Workload("train", 8, 512, 5), Workload("infer", 1, 512, 7),
    )
    schemes: tuple[str, ...] = ("NoPE", "Sinusoidal", "RoPE", "ALiBi", "T5Bias", "DynamicBias",
                                "GaussianPrior", "PeriodicRoPE", "ShawRelative")
    impls: tuple[str, ...] = IMPLS
    repeats: int = 7
    budget_s: float = 25.0  # per implementation: no further rounds once a group has used this
    mem_cap_gb: float = 6.0
    data_seconds: float = 3.0


QUICK = Plan(d=32, heads=4, layers=2,
             workloads=(Workload("train", 2, 64, 2), Workload("infer", 1, 128, 2)),
             schemes=("NoPE", "RoPE", "ALiBi", "ShawRelative"), repeats=2, budget_s=2.0,
             data_seconds=0.3)


@dataclass
class Cell:
    tokens_s: float | None = None
    spread: float = 0.0
    peak_mb: float | None = None
    note: str = ""
    times: list[float] = field(default_factory=list)


# ----------------------------------------------------------------------------- memory
def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _reset_hwm() -> bool:
    """Reset the kernel's resident-set high-water mark (Linux ``clear_refs`` 5); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _trim_heap() -> None:
    """Hand freed heap memory back to the OS (glibc), so the next run's growth is its own."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeakGrowth:
    """Peak resident-set growth (MB) over a ``with`` block: the kernel's high-water mark, reset on
    entry (free: the run carries no instrumentation), or where that is refused a thread sampling
    the resident set every millisecond. Freed heap memory is handed back first, so the growth
    is the block's own."""

    def __enter__(self) -> PeakGrowth:
        _trim_heap()
        self.base = self.peak = _rss_bytes()
        self._thread = None
        if not _reset_hwm():
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, _rss_bytes())

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            self.peak = _hwm_bytes()
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, _rss_bytes())
        self.mb = max(0.0, (self.peak - self.base) / 2**20)


def dense_estimate_gb(impl: str, scheme: str, w: Workload, heads: int, layers: int) -> float:
    """Rough size of the L×L tensors an implementation materialises (0 for the linear-memory ones)."""
    biased = scheme not in ("NoPE", "Sinusoidal", "RoPE", "PeriodicRoPE")
    per = w.batch * heads * w.length**2 * 4 / 2**30  # one float32 (B, H, L, L)
    copies = {"xt": 3.0, "xt-flash": 2.0 if biased else 0.0, "sdpa": 1.0 if biased else 0.0}.get(impl, 0.0)
    if impl == "posenc" and biased and w.length <= 4096:  # dense below the blocked threshold
        copies = 2.0
    if w.mode == "train":
        copies *= layers  # kept for backward
    return per * copies


# ----------------------------------------------------------------------------- timing
def _step_fn(model: torch.nn.Module, w: Workload, d: int, length: int | None = None):
    x = torch.randn(w.batch, length or w.length, d)
    if w.mode == "infer":
        model.eval()

        def run():
            with torch.inference_mode():
                model(x)

        return run
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def run():
        opt.zero_grad(set_to_none=True)
        model(x).float().pow(2).mean().backward()
        opt.step()

    return run


def measure_group(models: dict[str, torch.nn.Module], w: Workload, plan: Plan) -> dict[str, Cell]:
    """Time several implementations of one (scheme, workload) in interleaved rounds.

    Each is warmed up once, then the rounds run every implementation once in turn, up to
    ``plan.repeats`` rounds (at least 1, more only within ``plan.budget_s`` per implementation), so
    a change in the machine's load hits all of them alike and the ratios stay fair. Peak memory is
    the resident-set growth over the first timed run of each implementation.
    """
    runs = {impl: _step_fn(m, w, plan.d) for impl, m in models.items()}
    cells = {impl: Cell() for impl in models}
    for m in models.values():  # warm-up: allocator, kernel selection, caches
        _step_fn(m, w, plan.d, w.warmup_length)()
    start = time.perf_counter()
    budget = plan.budget_s * len(runs)
    for r in range(min(plan.repeats, w.repeats)):
        if r >= 1 and time.perf_counter() - start > budget:
            break
        for impl, run in runs.items():
            with PeakGrowth() if r == 0 else contextlib.nullcontext() as mem:  # memory: first round
                t = time.perf_counter()
                run()
                cells[impl].times.append(time.perf_counter() - t)
            if r == 0:
                cells[impl].peak_mb = mem.mb
    for cell in cells.values():
        med = statistics.median(cell.times)
        cell.tokens_s = w.batch * w.length / med
        cell.spread = (max(cell.times) - min(cell.times)) / med
    return cells


def run_group(scheme: str, w: Workload, plan: Plan) -> dict[str, Cell]:
    """Build every implementation of ``scheme`` that fits and time them together, with the NoPE
    hand SDPA encoder in the same rounds (``nope``: the reference of the "position costs" ratio)."""
    out: dict[str, Cell] = {}
    models: dict[str, torch.nn.Module] = {}
    if scheme != "NoPE" and "sdpa" in plan.impls:
        torch.manual_seed(0)
        models[NOPE_REF] = build("sdpa", "NoPE", plan.d, plan.heads, plan.layers)
    for impl in plan.impls:
        est = dense_estimate_gb(impl, scheme, w, plan.heads, plan.layers)
        if est > plan.mem_cap_gb:
            out[impl] = Cell(note=f"skipped: ~{est:.0f} GB of L×L tensors")
            continue
        torch.manual_seed(0)
        try:
            model = build(impl, scheme, plan.d, plan.heads, plan.layers)
        except ImportError:
            out[impl] = Cell(note="x-transformers not installed (pip install -e '.[bench]')")
            continue
        if model is None:
            out[impl] = Cell(note="n/a")
        else:
            models[impl] = model
    try:
        out.update(measure_group(models, w, plan))
    except RuntimeError as exc:  # e.g. out of memory: measure them one by one
        for impl, model in models.items():
            try:
                out.update(measure_group({impl: model}, w, plan))
            except RuntimeError as exc1:
                out[impl] = Cell(note=f"failed: {str(exc1).splitlines()[0][:60]}")
        del exc
    return {impl: out[impl] for impl in (*plan.impls, NOPE_REF) if impl in out}


# ----------------------------------------------------------------------------- data
def data_throughput(seconds: float, seq_len: int = 512, batch: int = 8) -> tuple[float, str]:
    """DNA windows/s from the default DNADataModule's training loader (E. coli, in-process)."""
    try:
        from datamodules import DNADataModule

        dm = DNADataModule(seq_len=seq_len, batch_size=batch, samples_per_epoch=1 << 20, cache_dir=None)
        dm.setup("fit")
        it = iter(dm.train_dataloader())
        next(it)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            n += next(it).shape[0]
        return n / (time.perf_counter() - start), ""
    except Exception as exc:  # noqa: BLE001 - the bench reports it and goes on
        return 0.0, f"failed: {exc}"


# ----------------------------------------------------------------------------- table
def fmt_rate(c: Cell) -> str:
    if c.tokens_s is None:
        return c.note
    return f"{c.tokens_s / 1e3:.2f}k ±{100 * c.spread:.0f}% n={len(c.times)} · {c.peak_mb:.0f} MB"


def ratio(a: Cell, b: Cell | None) -> str:
    if b is None or a.tokens_s is None or b.tokens_s is None:
        return "–"
    return f"{a.tokens_s / b.tokens_s:.2f}×"


def best_xt(row: dict[str, Cell]) -> Cell | None:
    got = [row[i] for i in ("xt", "xt-flash") if i in row and row[i].tokens_s is not None]
    return max(got, key=lambda c: c.tokens_s) if got else None


def render(results: dict, plan: Plan, peak: float, header: list[str], data_line: str) -> str:
    out = header + [f"Measured float32 matmul peak: {peak / 1e9:.1f} GFLOP/s.", "", data_line, ""]
    for w in plan.workloads:
        if not any(k[2] == w for k in results):
            continue
        what = "training: forward + backward + AdamW step" if w.mode == "train" else "inference"
        out += [f"### {w.name} ({what})",
                "", "| scheme | posenc | x-transformers | x-transformers flash | hand SDPA | "
                "posenc / best xt | posenc / hand SDPA | posenc / NoPE hand SDPA | posenc MFU |",
                "|---|---|---|---|---|---|---|---|---|"]
        for s in plan.schemes:
            row = {i: results[(i, s, w)] for i in (*plan.impls, NOPE_REF) if (i, s, w) in results}
            nope_ref = row.get(NOPE_REF, row.get("sdpa") if s == "NoPE" else None)
            p = row.get("posenc", Cell(note="–"))
            flops = forward_flops(plan.d, plan.layers, w.batch * w.length, w.length)
            flops *= 3 if w.mode == "train" else 1  # backward ≈ 2 forwards
            mfu = f"{100 * flops / (w.batch * w.length / p.tokens_s) / peak:.0f}%" if p.tokens_s else "–"
            cells = [fmt_rate(row[i]) if i in row else "–" for i in IMPLS]
            out.append(f"| {s} | " + " | ".join(cells) + f" | {ratio(p, best_xt(row))} | "
                       f"{ratio(p, row.get('sdpa'))} | {ratio(p, nope_ref)} | {mfu} |")
        out.append("")
    out.append("Cells: median tokens/s, spread (max − min)/median over the timed runs, peak RSS growth. "
               "NoPE hand SDPA: timed in the same rounds as the row's scheme.")
    out.append(f"x-transformers has no flash path for {', '.join(sorted(XT_NO_FLASH))}; "
               "'n/a': no such scheme in that implementation.")
    return "\n".join(out) + "\n"


def machine_header(argv: list[str]) -> list[str]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return ["# posenc benchmark", "",
            f"Command: `python -m pipelines.bench.run {' '.join(argv)}`".replace("bench `", "bench`"),
            f"Machine: {cpu}, {os.cpu_count()} cores, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads); load average at start {load:.2f}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."]


def run(plan: Plan, argv: list[str], out_path: str | None, log=print) -> str:
    header = machine_header(argv)
    peak = matmul_peak(1.0 if plan.repeats <= 2 else 3.0)
    rate, err = data_throughput(plan.data_seconds)
    results: dict = {}
    text = ""
    for w in plan.workloads:
        for s in plan.schemes:
            for impl, cell in run_group(s, w, plan).items():
                results[(impl, s, w)] = cell
                log(f"{w.name:>16} {s:>14} {impl:>9}: {fmt_rate(cell)}", file=sys.stderr)
            text = render(results, plan, peak, header, _data_line(rate, err, results, plan))
            if out_path:  # rewritten after every group: an interrupted run keeps what it measured
                with open(out_path, "w") as f:
                    f.write(text)
    return text


def _data_line(rate: float, err: str, results: dict, plan: Plan) -> str:
    if err:
        return f"DNA datamodule: {err}"
    w = next((w for w in plan.workloads if w.mode == "train"), plan.workloads[0])  # what data must feed
    nope = results.get(("posenc", "NoPE", w))
    need = (f"; posenc NoPE {w.name} consumes {nope.tokens_s / w.length:.1f} windows/s"
            if nope and nope.tokens_s else "")
    return f"DNA datamodule (E. coli, 8×512 windows, 0 workers): {rate:.0f} windows/s{need}."


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the machinery")
    ap.add_argument("--out", default="bench_results.md", help="markdown file to write ('' for none)")
    ap.add_argument("--schemes", nargs="*", help=f"schemes to run, from {', '.join(SCHEMES)}")
    ap.add_argument("--impls", nargs="*", choices=IMPLS, help="subset of implementations")
    ap.add_argument("--mem-cap-gb", type=float, help="skip configurations needing more L×L memory")
    ap.add_argument("--max-length", type=int, help="only workloads up to this length")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else Plan()
    if args.schemes:
        unknown = sorted(set(args.schemes) - set(SCHEMES))
        if unknown:
            ap.error(f"unknown scheme(s) {unknown}; choose from {list(SCHEMES)}")
        plan = Plan(**{**plan.__dict__, "schemes": tuple(args.schemes)})
    if args.impls:
        plan = Plan(**{**plan.__dict__, "impls": tuple(args.impls)})
    if args.max_length is not None:
        kept = tuple(w for w in plan.workloads if w.length <= args.max_length)
        plan = Plan(**{**plan.__dict__, "workloads": kept})
    if args.mem_cap_gb is not None:
        plan = Plan(**{**plan.__dict__, "mem_cap_gb": args.mem_cap_gb})
    print(run(plan, argv, args.out or None))


if __name__ == "__main__":
    main()
