"""``make bench``: throughput and peak memory of posenc against x-transformers and a hand-written
SDPA encoder, all in one run, as a markdown table (printed and written to ``bench_results.md``).

For every scheme and workload (training tokens/s at 8×512 and 1×4096; inference tokens/s at 1×512,
1×4096, 1×16384) each implementation is warmed up, then timed several times; the table shows the
median, the spread ((max − min)/median), the peak memory (resident-set growth over the first
timed run: the kernel's high-water mark, reset before it, so no run carries instrumentation),
posenc's ratios to the others measured in the same rounds, and posenc's model FLOP utilisation
against this machine's measured float32 matmul peak. Configurations whose dense L×L tensors
would exceed ``--mem-cap-gb`` are not run and say how much they would need.

On a noisy host: ``--rounds N`` times every group N interleaved rounds (no time budget),
``--stat min`` reports each implementation's fastest run (other jobs only add time), and ``--pin
0,1`` binds the process and all its threads to those CPUs (as ``taskset -c``) with one torch thread
per CPU. The header records the CPU set and threads; a closing line gives the spread of the timings.

Usage: ``python -m pipelines.studies.bench.run [--quick] [--rounds N] [--stat min] [--pin CPUS]
[--out FILE]``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import itertools
import os
import statistics
import sys
import threading
import time
from dataclasses import replace

import torch

from datamodules import DNADataModule
from datamodules.config import Loader
from datamodules.dna.config import GenomeFile, GenomeWindows
from pipelines.studies.bench.models import SCHEMES, build, matmul_peak
from pipelines.studies.bench.plan import IMPLS, NOPE_REF, QUICK, Cell, Plan, Workload
from pipelines.studies.bench.report import data_line, fmt_rate, machine_header, render

__all__ = ["dense_estimate_gb", "main", "measure_group", "pin_cpus", "run", "run_group"]
_GROUPS = itertools.count()  # one id per measure_group call: cells timed in the same rounds share it


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
    :meth:`Plan.n_rounds` rounds (at least 1, more only within ``plan.budget_s`` per implementation
    unless ``plan.rounds`` asks for exactly that many), so a change in the machine's load hits all
    of them alike and the ratios stay fair. Peak memory is the resident-set growth over the first
    timed run of each implementation.
    """
    runs = {impl: _step_fn(m, w, plan.d) for impl, m in models.items()}
    group = next(_GROUPS)
    cells = {impl: Cell(group=group) for impl in models}
    for m in models.values():  # warm-up: allocator, kernel selection, caches
        _step_fn(m, w, plan.d, w.warmup_length)()
    start = time.perf_counter()
    budget = plan.budget_s * len(runs)
    for r in range(plan.n_rounds(w)):
        if r >= 1 and not plan.rounds and time.perf_counter() - start > budget:
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
        cell.stat = plan.stat
        cell.tokens_s = w.batch * w.length / (min(cell.times) if plan.stat == "min" else med)
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

        dm = DNADataModule(GenomeFile(cache_dir=None), windows=GenomeWindows(seq_len=seq_len),
                           loader=Loader(batch_size=batch, samples_per_epoch=1 << 20))
        dm.setup("fit")
        it = iter(dm.train_dataloader())
        next(it)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            n += next(it).shape[0]
        return n / (time.perf_counter() - start), ""
    except Exception as exc:  # noqa: BLE001 - the bench reports it and goes on
        return 0.0, f"failed: {exc}"


def run(plan: Plan, argv: list[str], out_path: str | None, log=print) -> str:
    header = machine_header(argv, plan)
    peak = matmul_peak(1.0 if plan.repeats <= 2 else 3.0)
    rate, err = data_throughput(plan.data_seconds)
    results: dict = {}
    text = ""
    for w in plan.workloads:
        for s in plan.schemes:
            for impl, cell in run_group(s, w, plan).items():
                results[(impl, s, w)] = cell
                log(f"{w.name:>16} {s:>14} {impl:>9}: {fmt_rate(cell)}", file=sys.stderr)
            text = render(results, plan, peak, header, data_line(rate, err, results, plan))
            if out_path:  # rewritten after every group: an interrupted run keeps what it measured
                with open(out_path, "w") as f:
                    f.write(text)
    return text


def parse_cpus(spec: str) -> tuple[int, ...]:
    """``"0,2-3"`` → (0, 2, 3); ``ValueError`` naming the spec when it is not such a list."""
    cpus: set[int] = set()
    try:
        for part in spec.split(","):
            lo, _, hi = part.strip().partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise ValueError(f"--pin {spec!r}: expected CPU numbers like 0,1 or 0-3") from None
    if not cpus:
        raise ValueError(f"--pin {spec!r}: no CPU named")
    return tuple(sorted(cpus))


def pin_cpus(cpus: tuple[int, ...]) -> None:
    """Bind this process and every thread it has (torch's pool included) to ``cpus``, as
    ``taskset -c`` would, and run one torch thread per CPU."""
    allowed = os.sched_getaffinity(0)
    if not set(cpus) <= allowed:
        raise ValueError(f"--pin: CPUs {sorted(set(cpus) - allowed)} are not available to this "
                         f"process (it may use {sorted(allowed)})")
    for tid in os.listdir("/proc/self/task"):  # threads that already exist keep their own mask
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), cpus)
    torch.set_num_threads(len(cpus))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the machinery")
    ap.add_argument("--out", default="bench_results.md", help="markdown file to write ('' for none)")
    ap.add_argument("--schemes", nargs="*", help=f"schemes to run, from {', '.join(SCHEMES)}")
    ap.add_argument("--impls", nargs="*", choices=IMPLS, help="subset of implementations")
    ap.add_argument("--mem-cap-gb", type=float, help="skip configurations needing more L×L memory")
    ap.add_argument("--max-length", type=int, help="only workloads up to this length")
    ap.add_argument("--rounds", type=int, help="exactly this many timed rounds per group (no time budget)")
    ap.add_argument("--pin", help="bind to these CPUs (e.g. 0,1 or 1), one torch thread each")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="cells and ratios from the median or the fastest timed run (noisy host: min)")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else Plan()
    if args.schemes:
        unknown = sorted(set(args.schemes) - set(SCHEMES))
        if unknown:
            ap.error(f"unknown scheme(s) {unknown}; choose from {list(SCHEMES)}")
        plan = replace(plan, schemes=tuple(args.schemes))
    if args.impls:
        plan = replace(plan, impls=tuple(args.impls))
    if args.max_length is not None:
        plan = replace(plan, workloads=tuple(w for w in plan.workloads if w.length <= args.max_length))
    if args.mem_cap_gb is not None:
        plan = replace(plan, mem_cap_gb=args.mem_cap_gb)
    plan = replace(plan, stat=args.stat)
    if args.rounds is not None:
        if args.rounds < 1:
            ap.error(f"--rounds must be >= 1, got {args.rounds}")
        plan = replace(plan, rounds=args.rounds)
    if args.pin is not None:
        try:
            cpus = parse_cpus(args.pin)
            pin_cpus(cpus)
        except ValueError as exc:
            ap.error(str(exc))
        plan = replace(plan, pin=cpus)
    print(run(plan, argv, args.out or None))


if __name__ == "__main__":
    main()
