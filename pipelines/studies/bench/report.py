"""The markdown ``make bench`` writes: machine header, shapes and parameter counts of every
implementation, one table per workload, paired ratios and the spread of the timings."""

from __future__ import annotations

import os
import statistics
import time
from importlib import metadata

import torch

from pipelines.studies.bench.models import XT_NO_FLASH, build, forward_flops, param_groups
from pipelines.studies.bench.plan import IMPLS, NOPE_REF, Cell, Plan
from pipelines.studies.machine import cpu_model
from pipelines.studies.tables import md_lines

IMPL_NAMES = {"posenc": "posenc", "xt": "x-transformers", "xt-flash": "x-transformers flash",
              "sdpa": "hand SDPA"}


def fmt_rate(c: Cell) -> str:
    if c.tokens_s is None:
        return c.note
    best = " best" if c.stat == "min" else ""
    return f"{c.tokens_s / 1e3:.2f}k{best} ±{100 * c.spread:.0f}% n={len(c.times)} · {c.peak_mb:.0f} MB"


def paired_ratios(a: Cell, b: Cell) -> list[float]:
    """a's throughput over b's, round by round, when both were timed in the same rounds (else [])."""
    if a.group < 0 or a.group != b.group or len(a.times) != len(b.times):
        return []
    return [tb / ta for ta, tb in zip(a.times, b.times, strict=True)]


def ratio(a: Cell, b: Cell | None) -> str:
    """``a / b`` throughput: the median of the per-round ratios when the two were timed in the same
    rounds (a load change then hits both), else (or with ``--stat min``) the ratio of the cells;
    then the range of the per-round ratios."""
    if b is None or a.tokens_s is None or b.tokens_s is None:
        return "–"
    per_round = paired_ratios(a, b)
    if len(per_round) < 2:
        return f"{a.tokens_s / b.tokens_s:.2f}×"
    mid = a.tokens_s / b.tokens_s if a.stat == "min" else statistics.median(per_round)
    return f"{mid:.2f}× [{min(per_round):.2f}–{max(per_round):.2f}]"


def best_xt(row: dict[str, Cell]) -> Cell | None:
    got = [row[i] for i in ("xt", "xt-flash") if i in row and row[i].tokens_s is not None]
    return max(got, key=lambda c: c.tokens_s) if got else None


def render(results: dict, plan: Plan, peak: float, header: list[str], data_line: str) -> str:
    out = header + [f"Measured float32 matmul peak: {peak / 1e9:.1f} GFLOP/s.", "", data_line, ""]
    for w in plan.workloads:
        if not any(k[2] == w for k in results):
            continue
        what = "training: forward + backward + AdamW step" if w.mode == "train" else "inference"
        head = ["scheme", "posenc", "x-transformers", "x-transformers flash", "hand SDPA", "posenc / best xt",
                "posenc / hand SDPA", "posenc / NoPE hand SDPA", "posenc MFU"]
        body = []
        for s in plan.schemes:
            row = {i: results[(i, s, w)] for i in (*plan.impls, NOPE_REF) if (i, s, w) in results}
            nope_ref = row.get(NOPE_REF, row.get("sdpa") if s == "NoPE" else None)
            p = row.get("posenc", Cell(note="–"))
            flops = forward_flops(plan.d, plan.layers, w.batch * w.length, w.length)
            flops *= 3 if w.mode == "train" else 1  # backward ≈ 2 forwards
            mfu = f"{100 * flops / (w.batch * w.length / p.tokens_s) / peak:.0f}%" if p.tokens_s else "–"
            cells = [fmt_rate(row[i]) if i in row else "–" for i in IMPLS]
            body.append([s, *cells, ratio(p, best_xt(row)), ratio(p, row.get("sdpa")), ratio(p, nope_ref),
                         mfu])
        out += [f"### {w.name} ({what})", "", *md_lines(head, body), ""]
    if plan.stat == "min":
        out.append("Cells: tokens/s of the fastest timed run ('best'), spread (max − min)/median over the "
                   "timed runs, peak RSS growth. Ratios: of the fastest runs [lowest–highest per-round "
                   "ratio]. NoPE hand SDPA: timed in the same rounds as the row's scheme.")
    else:
        out.append("Cells: median tokens/s, spread (max − min)/median over the timed runs, peak RSS growth. "
                   "Ratios: median of the per-round ratios [lowest–highest] where both were timed in the "
                   "same interleaved rounds. NoPE hand SDPA: timed in the same rounds as the row's scheme.")
    out.append(f"x-transformers has no flash path for {', '.join(sorted(XT_NO_FLASH))}; "
               "'n/a': no such scheme in that implementation.")
    out.append(spread_summary(results))
    return "\n".join(out) + "\n"


def spread_summary(results: dict) -> str:
    """One line: how noisy the timings were, over every measured cell and every paired ratio."""
    spreads = sorted(c.spread for c in results.values() if c.tokens_s is not None and len(c.times) > 1)
    if not spreads:
        return "Spread: no cell was timed more than once."
    cells = [c for c in results.values() if c.tokens_s is not None]
    posenc = {k[1:]: c for k, c in results.items() if k[0] == "posenc"}
    widths = []  # (max − min)/median of posenc's per-round ratio to each peer timed with it
    for (impl, *key), c in results.items():
        p = posenc.get(tuple(key))
        r = paired_ratios(p, c) if p is not None and impl != "posenc" and c.tokens_s else []
        if len(r) > 1:
            widths.append((max(r) - min(r)) / statistics.median(r))
    load = f" Load average when written: {os.getloadavg()[0]:.2f}." if hasattr(os, "getloadavg") else ""
    line = (f"Spread of the timings over {len(spreads)} cells timed more than once (of {len(cells)}): "
            f"median {100 * statistics.median(spreads):.0f}%, max {100 * spreads[-1]:.0f}%.")
    if widths:
        line += (f" Width (max − min)/median of posenc's per-round ratios over {len(widths)} pairs: median "
                 f"{100 * statistics.median(widths):.0f}%, max {100 * max(widths):.0f}%.")
    return line + load


def machine_header(argv: list[str], plan: Plan | None = None) -> list[str]:
    """Title, command, machine (CPU model, usable CPUs, threads, torch and x-transformers versions,
    load) and, given the plan, the shapes and parameter counts of the implementations compared."""
    cpu = cpu_model()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pinned = f"pinned to CPUs {','.join(map(str, plan.pin))}" if plan and plan.pin else "not pinned"
    try:
        xt = f"x-transformers {metadata.version('x-transformers')}"
    except metadata.PackageNotFoundError:
        xt = "x-transformers not installed"
    out = ["# posenc benchmark", "",
           f"Command: `python -m pipelines.studies.bench.run {' '.join(argv)}`".replace("bench `", "bench`"),
           f"Machine: {cpu}, {os.cpu_count()} cores ({len(usable) or '?'} usable, {pinned}); "
           f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); {xt}; "
           f"load average at start {load:.2f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."]
    return out + (["", *shape_lines(plan)] if plan is not None else [])


def shape_lines(plan: Plan) -> list[str]:
    """The shapes every implementation shares and its parameters by part (built once, NoPE), so a
    reader can check that no implementation does more or less work than posenc."""
    d, h = plan.d, plan.heads
    out = [f"Shapes: D {d}, {h} heads × {d // h} (attention width {d}), MLP {d} → {4 * d} → {d} (GELU), "
           f"{plan.layers} pre-LN layers and a final LayerNorm, in every implementation. "
           "Parameters by part (NoPE; `pipelines.studies.bench.models.param_groups`):", ""]
    parts = []
    scheme_counts: dict[str, list[str]] = {}
    for impl in plan.impls:
        try:
            model = build(impl, "NoPE", d, h, plan.layers)
        except ImportError:
            continue
        g = param_groups(impl, model)
        parts.append([IMPL_NAMES[impl], f"{g['attention']:,}", f"{g['attention-bias']:,}",
                      f"{g['mlp'] + g['mlp-bias']:,}", f"{g['norm']:,}", f"{g['norm-bias']:,}"])
        for s in plan.schemes:
            m = build(impl, s, d, h, plan.layers) if impl in ("posenc", "xt") else None
            n = param_groups(impl, m)["scheme"] if m is not None else 0
            if n:
                scheme_counts.setdefault(s, []).append(f"{IMPL_NAMES[impl]} {n:,}")
    head = ["implementation", "attention weights", "attention biases", "MLP (with biases)", "norm gains",
            "norm biases"]
    out += md_lines(head, parts)
    out += ["", "x-transformers' q/k/v/out projections and LayerNorms have no biases by construction "
            "(no option turns them on): posenc and the hand encoder pay those additions, about "
            f"1/(2·D) = {100 / (2 * d):.1f}% of the projection matmuls."]
    if scheme_counts:
        out += ["", "Scheme parameters (counted apart): " + "; ".join(
            f"{s} {' · '.join(v)}" for s, v in scheme_counts.items()) + "."]
    return out + [""]


def data_line(rate: float, err: str, results: dict, plan: Plan) -> str:
    if err:
        return f"DNA datamodule: {err}"
    w = next((w for w in plan.workloads if w.mode == "train"), plan.workloads[0])  # what data must feed
    nope = results.get(("posenc", "NoPE", w))
    need = (f"; posenc NoPE {w.name} consumes {nope.tokens_s / w.length:.1f} windows/s"
            if nope and nope.tokens_s else "")
    return f"DNA datamodule (E. coli, 8×512 windows, 0 workers): {rate:.0f} windows/s{need}."
