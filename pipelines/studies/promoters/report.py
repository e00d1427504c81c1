"""The promoter benchmark's tables (``summary.md``): per set, every method beside CNNProm's published numbers.

Per set and method: the mean over folds × seeds of MCC, Sn, Sp (at the method's own threshold of best
validation MCC), AUROC and AUPRC, ± the half-width of a 95 % Student-t interval over those runs (folds
share training data, so this interval is optimistic: docs/promoters.md). Then the paired difference
model − baseline in MCC (and, with ``--schemes``, each encoding − the first), paired by fold and seed,
with Holm over the comparisons of the table (:func:`pipelines.studies.verdicts.holm_calls`): ▲ / ▼ where
the adjusted p-value is below 0.05 (the interval shown at Holm's level), · where not called.

Class ratio: MCC depends on how many negatives a test set holds per positive; Sn and Sp do not. The
published (Sn, Sp, CC) triple holds only at some ratios (:func:`~pipelines.tasks.dna.classify_metrics.
consistent_ratios`); where the files' ratio is not among them, the table adds what our Sn and Sp give at
the consistent ratio nearest the files' — computed from them, labelled so, never in the MCC column.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pipelines.eval.statistics import estimate
from pipelines.studies.bootstrap import Arm
from pipelines.studies.compare.run import scheme_label
from pipelines.studies.verdicts import holm_calls, paired
from pipelines.tasks.dna.classify_metrics import consistent_ratios, mcc_at_ratio

METRICS = ("mcc", "sn", "sp", "auroc", "auprc", "threshold")
FIELDS = ["set", "method", "fold", "seed", "n_test_pos", "n_test_neg", *METRICS, "cpu_s", "wall_s", "run_id"]
SHOWN = ("mcc", "sn", "sp", "auroc", "auprc")
MODEL = "model"  # the method name of the config's own model (with --schemes: each scheme's name)



def _by_method(rows: list[dict[str, Any]], name: str) -> dict[str, dict[tuple[int, int], dict[str, Any]]]:
    out: dict[str, dict[tuple[int, int], dict[str, Any]]] = {}
    for r in rows:
        if r["set"] == name:
            out.setdefault(r["method"], {})[(int(r["fold"]), int(r["seed"]))] = r
    return out


def _cell(values: list[float], digits: int = 3) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "—"
    e = estimate(finite)
    return f"{e.mean:.{digits}f}" if e.n < 2 else f"{e.mean:.{digits}f} ± {e.half:.{digits}f}"


def methods(args: Any) -> list[str]:
    """The trained models' method names: ``model``, or one per ``--schemes`` encoding."""
    return [scheme_label(s) for s in args.schemes] or [MODEL]


def _models(by: dict[str, dict], args: Any) -> list[str]:
    return [m for m in methods(args) if m in by]


def _paired_lines(by: dict[str, dict], reference: str, others: list[str], metric: str = "mcc") -> list[str]:
    """``reference − other`` in ``metric``, paired by (fold, seed), Holm over ``others``."""
    stats = {}
    for o in others:
        keys = sorted(set(by[reference]) & set(by[o]))
        a = [by[reference][k][metric] for k in keys]
        b = [by[o][k][metric] for k in keys]
        ok = len(keys) >= 2 and all(math.isfinite(v) for v in a + b)
        stats[o] = paired(Arm.from_values(a), Arm.from_values(b)) if ok else None
    calls = holm_calls(stats, higher_is_better=True)
    lines = [f"| {reference} − … | Δ {metric.upper()} | interval (Holm level) | p (Holm) | call |",
             "|---|---:|---|---:|:-:|"]
    for o in others:
        c = calls[o]
        if not math.isfinite(c.p):
            one = [by[reference][k][metric] - by[o][k][metric] for k in set(by[reference]) & set(by[o])]
            shown = f"{np.mean(one):+.3f}" if one else "—"
            lines.append(f"| {o} | {shown} | {len(one)} run(s): no interval | — | · |")
            continue
        mark = {1: "▲", -1: "▼", 0: "·"}[c.sign]
        lines.append(f"| {o} | {c.stat.mean:+.3f} | [{c.lo:+.3f}, {c.hi:+.3f}] ({c.level:.3g}) | "
                     f"{c.p_adj:.2g} | {mark} |")
    return lines


def ratio_lines(pset: Any, model_rows: dict[tuple[int, int], dict[str, Any]]) -> list[str]:
    """What the class ratio does to the published comparison (see the module docstring)."""
    pub = pset.published
    if not pub:
        return ["No published number matches this file's name."]
    window = consistent_ratios(pub["Sn"], pub["Sp"], pub["CC"])
    lines = [f"Class ratio: the files hold {pset.ratio:.2f} negatives per positive (every fold keeps it)."]
    if window is None:
        return [*lines, "The published Sn, Sp and CC fit no ratio from 0.05 to 50 (a typo in the source?)."]
    lo, hi = window
    fits = lo <= pset.ratio <= hi
    lines.append(f"CNNProm's published Sn {pub['Sn']:.2f}, Sp {pub['Sp']:.2f}, CC {pub['CC']:.2f} hold "
                 f"together only at {lo:.2f}–{hi:.2f} negatives per positive: the files' ratio "
                 + ("is among them." if fits else "is not, so the published CC was not measured at it."))
    if not fits and model_rows:
        near = hi if pset.ratio > hi else lo
        sn = float(np.nanmean([r["sn"] for r in model_rows.values()]))
        sp = float(np.nanmean([r["sp"] for r in model_rows.values()]))
        lines.append(f"Computed, not measured: our mean Sn {sn:.3f} and Sp {sp:.3f} give MCC "
                     f"{mcc_at_ratio(sn, sp, near):.3f} at {near:.2f} negatives per positive (the consistent "
                     "ratio nearest the files'); the MCC column above is the one measured, at the files' "
                     "ratio.")
    return lines


def set_section(pset: Any, rows: list[dict[str, Any]], args: Any) -> str:
    """The markdown of one set: protocol, table beside the published row, paired differences, ratio."""
    by = _by_method(rows, pset.name)
    models = _models(by, args)
    baselines = sorted(m for m in by if m not in models)
    runs = max((len(v) for v in by.values()), default=0)
    what = (f"--quick: fold 0 of {args.folds}, seed {args.seeds[0]}: one run per cell, no interval"
            if args.quick else f"{args.folds}-fold CV × {len(args.seeds)} seeds")
    lines = [f"## {pset.name}", "",
             f"`{pset.positive.name}` ({pset.n_pos} promoters) against `{pset.negative.name}` "
             f"({pset.n_neg}), {pset.lengths[1]} nt; {what}; {runs} run(s) per method. Mean ± 95 % "
             "half-width over folds × seeds; Sn, Sp, MCC at each method's threshold of best validation "
             "MCC.", "",
             "| method | MCC | Sn | Sp | AUROC | AUPRC |", "|---|---:|---:|---:|---:|---:|"]
    for m in models + baselines:
        vals = by[m].values()
        label = f"**{m}**" if m in models else m
        lines.append(f"| {label} | "
                     + " | ".join(_cell([float(r[k]) for r in vals]) for k in SHOWN) + " |")
    if pset.published:
        p = pset.published
        lines.append(f"| CNNProm (published) | {p['CC']:.2f} | {p['Sn']:.2f} | {p['Sp']:.2f} | — | — |")
    if models and baselines:
        lines += ["", f"Paired over folds × seeds, Holm over the {len(baselines)} comparisons:", "",
                  *_paired_lines(by, models[0], baselines)]
    if len(models) > 1:
        lines += ["", f"Encodings, paired with {models[0]} (Holm over {len(models) - 1}):", "",
                  *_paired_lines(by, models[0], models[1:])]
    lines += ["", *ratio_lines(pset, by.get(models[0], {}) if models else {}), ""]
    return "\n".join(lines)


def set_means(pset: Any, rows: list[dict[str, Any]]) -> dict[str, float]:
    """``<method>/<metric>_mean`` over folds × seeds, for the set's parent run."""
    out = {}
    for method, runs in _by_method(rows, pset.name).items():
        for k in SHOWN:
            vals = [float(r[k]) for r in runs.values() if math.isfinite(float(r[k]))]
            if vals:
                out[f"{method}/{k}_mean"] = float(np.mean(vals))
    return out


def summary_markdown(sets: list[Any], rows: list[dict[str, Any]], args: Any) -> str:
    head = ["# Promoter recognition beside CNNProm", "",
            "Protocol, and where it differs from the paper's: docs/promoters.md. Every number below was "
            "measured by this run except the rows marked published and the lines marked computed.", ""]
    return "\n".join(head + [set_section(s, rows, args) for s in sets])


__all__ = ["FIELDS", "METRICS", "set_means", "set_section", "summary_markdown"]
