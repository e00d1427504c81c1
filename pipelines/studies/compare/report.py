"""The comparison's outputs: markdown (mean ± CI, called differences, retained gain), CSVs, figure."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np

from pipelines.eval.extrapolation import TRAINED
from pipelines.eval.report import binned
from pipelines.eval.statistics import Estimate, min_effect
from pipelines.studies.compare.stats import NOPE, Comparison, Row
from pipelines.studies.tables import md_lines
from pipelines.studies.verdicts import POWER_MIN, PairedStat, Retained
from pipelines.tasks.dna.whole_window import length_figure


def decimals(cmp: Comparison) -> int:
    """Decimals for the metric: about four significant digits of its typical value at L₀."""
    at_train = [r.metric[cmp.info.train_length].mean for r in cmp.rows if r.metric.get(cmp.info.train_length)]
    typical = float(np.median(np.abs(at_train))) if at_train else 1.0
    return int(min(4, max(0, 4 - math.floor(math.log10(typical))))) if typical > 0 else 4


def cell(e: Estimate | None, digits: int, signed: bool = False) -> str:
    """``mean ± half-width`` (``undefined`` for ``None``)."""
    if e is None:
        return "undefined"
    sign = "+" if signed else ""
    if e.n < 2 or not math.isfinite(e.half):
        return f"{e.mean:{sign}.{digits}f}"
    return f"{e.mean:{sign}.{digits}f} ± {e.half:.{digits}f}"


def bracket(stat: PairedStat | None, digits: int, level: float | None = None) -> str:
    """``+0.0123 [+0.0040, +0.0206]`` (interval: t ∪ block bootstrap), ``undefined`` for ``None``."""
    if stat is None:
        return "undefined"
    lo, hi = stat.interval(level) if level is not None else stat.interval()
    if not math.isfinite(hi - lo):
        return f"{stat.mean:+.{digits}f}"
    return f"{stat.mean:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


SYMBOLS = {1: "▲", -1: "▼", 0: "·"}  # a call: better than the reference / worse / not called
CHAIN_AT = re.compile(r"^markov_best_L(\d+)$")  # the causal DNA LM's chain on the windows of one length


def chain_by_length(cmp: Comparison) -> dict[int, float]:
    """The best Markov chain scored on the same windows as the model at each length (causal DNA LM)."""
    return {int(m.group(1)): v for k, v in cmp.baselines.items() if (m := CHAIN_AT.match(k))}


def others(cmp: Comparison) -> dict[str, float]:
    """The single-number baselines besides the trivial one (a baseline equal to it is the same
    model); per-length ones (:func:`chain_by_length`) are shown per length instead."""
    trivial = np.mean(list(cmp.trivial.values())) if cmp.trivial else math.nan
    return {k: v for k, v in cmp.baselines.items()
            if not math.isclose(v, trivial, rel_tol=1e-12) and not CHAIN_AT.match(k)}


def _lengths(cmp: Comparison) -> list[str]:
    l0 = cmp.info.train_length
    return [f"L={n} ({n / l0:g}×)" for n in cmp.info.lengths]


def ratio_text(row: Row, cmp: Comparison) -> str:
    if row.ratio is None:
        return f"— ({row.no_ratio})"
    return f"{row.ratio / cmp.info.train_length:g}× (L={row.ratio})"


def markdown(cmp: Comparison) -> str:
    """The three tables (metric, differences from the reference, retained gain) and their notes."""
    info, d, pct = cmp.info, decimals(cmp), f"{cmp.level:.0%}".replace("%", " %")
    direction = "higher" if info.higher_is_better else "lower"
    seeds = " ".join(map(str, cmp.seeds))
    out = [f"### {info.task}: {info.metric} ({direction} is better), trained at L₀ = {info.train_length} "
           f"{info.length_unit}", "",
           f"Seeds {seeds}: every scheme trained once per seed (same seed → same initialisation and "
           f"data order for every scheme). Cells: mean ± half-width of the {pct} Student-t interval "
           "over seeds.", ""]
    body = [[r.label, str(len(r.seeds)), *[cell(r.metric[n], d) for n in info.lengths]] for r in cmp.rows]
    chain = chain_by_length(cmp)
    if chain:  # no model: one value per length, the same windows for every seed
        body.append(["best Markov chain (same windows)", "—",
                     *[f"{chain[n]:.{d}f}" if n in chain else "—" for n in info.lengths]])
    out += md_lines(["scheme", "seeds", *_lengths(cmp)], body)
    if cmp.trivial or cmp.baselines:
        trivial = np.mean(list(cmp.trivial.values())) if cmp.trivial else None
        parts = ([f"trivial = {info.trivial_name} {trivial:.{d}f}"] if trivial is not None else []) + [
            f"{k} {v:.{d}f}" for k, v in others(cmp).items()]
        out += ["", "Baselines on the same test data (no model): " + "; ".join(parts) + "."]
    out += ["", *differences(cmp, d, pct), "", *retained(cmp, d, pct)]
    out += notes(cmp)
    return "\n".join(out) + "\n"


def differences(cmp: Comparison, d: int, pct: str) -> list[str]:
    ref = cmp.reference
    rows = [r for r in cmp.rows if not (r.scheme == ref and r.variant == TRAINED)]
    if not any(r.diff.get(n) for r in rows for n in cmp.info.lengths):
        return [f"#### Difference from `{ref}`", "",
                "No paired difference: the reference has no finished run or there is one seed only."]
    m = next((c.m for r in rows for c in r.holm.values()), 0)
    method = next((c.stat.method for r in rows for c in r.holm.values() if c.stat.diffs.size > 1), "")
    head = [f"#### Difference from `{ref}` (scheme − {ref}, paired by seed)", "",
            f"{SYMBOLS[1]} better than {ref}, {SYMBOLS[-1]} worse, {SYMBOLS[0]} not called. Holm–Bonferroni "
            f"over the {m} calls of this table (family-wise α = {1 - cmp.level:.2g}): a difference is called "
            "only when its Holm-adjusted p (`p_adj`) is below α; the interval shown is the one Holm tested "
            f"it at (level 1 − α/(m − rank), wider than {pct}), so a called difference's interval "
            f"excludes 0. Intervals: {method or 'Student t over seeds'}.", ""]

    def diff(r: Row, n: int) -> str:
        c = r.holm.get(n)
        if c is None or not math.isfinite(c.p):
            return "undefined"
        return (f"{c.stat.mean:+.{d}f} [{c.lo:+.{d}f}, {c.hi:+.{d}f}] {SYMBOLS[c.sign]} "
                f"p_adj {c.p_adj:.2g}")

    body = [[r.label, *[diff(r, n) for n in cmp.info.lengths]] for r in rows]
    return head + md_lines(["scheme", *_lengths(cmp)], body)


def retained(cmp: Comparison, d: int, pct: str) -> list[str]:
    info = cmp.info
    if not cmp.trivial:
        return ["#### Retained gain", "", "The task defines no trivial baseline: no retained gain, no ratio."]
    trivial = float(np.mean(list(cmp.trivial.values())))
    nope = any(r.scheme == NOPE for r in cmp.rows)
    head = [f"#### Retained gain over the trivial baseline ({info.trivial_name})", "",
            "retained(L) = mean gain(L) / mean gain(L₀), gain = b − m (sign flipped when higher is better): "
            "1 = the whole gain over the baseline kept, 0 = none of it, < 0 = worse than the baseline; "
            f"[{pct} paired bootstrap interval]. Defined only when the gain at L₀ has its lower {pct} bound "
            f"above 0 and above the minimum effect ({min_effect(info.metric, trivial):.3g} {info.metric}). "
            + (f"Beside it, Δ {NOPE}: the absolute paired difference from NoPE at that length. "
               if nope else "")
            + f"Power: gain at L₀ / half-width of its interval (≥ {POWER_MIN:g} to judge). Extrapolation "
            f"ratio: the longest length up to which the lower bound of retained gain stays ≥ {cmp.retain:g} "
            "(at every tested length up to it).", ""]
    extra = [f"ratio (±{cmp.tolerance:.0%} rel.)"] if cmp.tolerance is not None else []
    body = []
    for r in cmp.rows:
        tol = [] if cmp.tolerance is None else [
            "—" if r.tolerance_ratio is None else f"{r.tolerance_ratio / info.train_length:g}×"]
        gains = [retained_cell(r, n, d) for n in info.lengths if n != info.train_length]
        power = "—" if r.power is None else "∞" if math.isinf(r.power) else f"{r.power:.3g}"
        body.append([r.label, bracket(r.gain, d), power, *gains, ratio_text(r, cmp), *tol])
    lengths = [h for n, h in zip(info.lengths, _lengths(cmp), strict=True) if n != info.train_length]
    return head + md_lines(["scheme", "gain at L₀", "power", *lengths, "extrapolation ratio", *extra], body)


def retained_cell(row: Row, length: int, digits: int = 4) -> str:
    """Retained gain [CI] (``undefined`` where the metric is, ``—`` where the guard says there is no
    gain to keep), with the paired difference from NoPE beside it."""
    if row.metric.get(length) is None:
        return "undefined"
    found = row.retained.get(length)
    text = "—" if found is None or not found.defined else f"{found.mean:.2f} [{found.lo:.2f}, {found.hi:.2f}]"
    nope = row.nope.get(length)
    return text if nope is None else f"{text}; Δ {NOPE} {bracket(nope, digits)}"


def notes(cmp: Comparison) -> list[str]:
    out = []
    skipped = {c.scheme: c.error for c in cmp.children if not c.ok}
    if skipped:
        listed = "; ".join(f"`{s}`: {e}" for s, e in skipped.items())
        out += ["", f"Skipped (the task cannot run them): {listed}"]
    noted = {c.scheme: c.note for c in cmp.children if c.ok and c.note}
    if noted:
        out += ["", "Notes: " + "; ".join(f"`{s}`: {n}" for s, n in noted.items())]
    reused = sum(c.source == "reused" for c in cmp.children)
    trained = sum(c.source == "trained" for c in cmp.children)
    out += ["", f"Runs: {trained} trained now, {reused} reused from earlier comparisons "
                "(same config, scheme, lengths and seed); run ids in comparison_long.csv."]
    return out


# ----------------------------------------------------------------------------- CSVs
def write_csvs(cmp: Comparison, folder: Path) -> list[Path]:
    """``comparison.csv`` (one row per scheme: every estimate with its bounds) and
    ``comparison_long.csv`` (one row per child, variant and length)."""
    wide, long_ = folder / "comparison.csv", folder / "comparison_long.csv"
    with wide.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(wide_header(cmp.info.lengths))
        w.writerows(wide_row(cmp, r) for r in cmp.rows)
    with long_.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["scheme", "seed", "run_id", "source", "variant", "length", "metric", "status"])
        for c in cmp.children:
            if not c.ok:
                w.writerow([c.scheme, c.seed, "", c.source, "", "", "", f"skipped: {c.error}"])
            for variant, curve in c.curves.items():
                for n, v in curve.items():
                    w.writerow([c.scheme, c.seed, c.run_id, c.source, variant, n, "" if v is None else v,
                                "ok" if v is not None else "undefined"])
    return [wide, long_]


def wide_header(lengths: list[int]) -> list[str]:
    """The columns of ``comparison.csv``."""
    per = (("mean", "lo", "hi"), ("diff", "diff_lo", "diff_hi", "call", "p", "p_holm"),
           ("vs_none", "vs_none_lo", "vs_none_hi"), ("retained", "retained_lo", "retained_hi"))
    return ["scheme", "variant", "seeds", *[f"{k}_L{n}" for keys in per for n in lengths for k in keys],
            "gain_at_train", "gain_lo", "gain_hi", "power", "extrapolation_ratio", "max_length", "no_ratio",
            "tolerance_max_length"]


def wide_row(cmp: Comparison, r: Row) -> list:
    """One scheme's row of ``comparison.csv`` (empty cells where a value is undefined)."""
    def bounds(e: Estimate | None) -> list:
        return ["", "", ""] if e is None else [e.mean, e.lo if e.n > 1 else "", e.hi if e.n > 1 else ""]

    def stat_bounds(s: PairedStat | None) -> list:
        return ["", "", ""] if s is None else [s.mean, *s.interval(cmp.level)]

    def ret_bounds(g: Retained | None) -> list:
        return ["", "", ""] if g is None or not g.defined else [g.mean, g.lo, g.hi]

    def holm(n: int) -> list:
        c = r.holm.get(n)
        return ["", ""] if c is None or not math.isfinite(c.p) else [c.p, c.p_adj]

    lengths = cmp.info.lengths
    return [r.label, r.variant, " ".join(map(str, r.seeds)),
            *[x for n in lengths for x in bounds(r.metric.get(n))],
            *[x for n in lengths for x in [*bounds(r.diff.get(n)), r.calls.get(n, 0), *holm(n)]],
            *[x for n in lengths for x in stat_bounds(r.nope.get(n))],
            *[x for n in lengths for x in ret_bounds(r.retained.get(n))],
            *stat_bounds(r.gain), "" if r.power is None else r.power,
            "" if r.ratio is None else r.ratio / cmp.info.train_length,
            r.ratio or "", r.no_ratio, r.tolerance_ratio or ""]


# ----------------------------------------------------------------------------- figure
def figure(cmp: Comparison):
    """Metric vs length per scheme with its CI band; the RoPE family with its variants; retained
    gain with its CI band; per-position curves at the longest defined length (mean over seeds). A
    matplotlib ``Figure``, as the library's figures (:func:`pipelines.eval.report.figure`)."""
    from matplotlib.figure import Figure  # optional: matplotlib, figures only

    info = cmp.info
    trained = [r for r in cmp.rows if r.variant == TRAINED]
    family = {r.scheme for r in cmp.rows if r.variant != TRAINED}
    fig = Figure(figsize=(14, 9.5))
    axes = fig.subplots(2, 2)
    ylabel = f"{info.metric} ({'higher' if info.higher_is_better else 'lower'} is better)"
    for ax, rows, title in ((axes[0, 0], trained, "schemes as trained"),
                            (axes[0, 1], [r for r in cmp.rows if r.scheme in family] or trained,
                             "RoPE family + inference-time variants")):
        for i, r in enumerate(rows):
            _band(ax, r.metric, i, r.label, "o-" if r.variant == TRAINED else "s--")
        if cmp.trivial:
            ax.axhline(np.mean(list(cmp.trivial.values())), color="0.3", ls="-.", lw=1,
                       label=f"trivial: {info.trivial_name}")
        for j, (name, value) in enumerate(others(cmp).items()):
            ax.axhline(value, color="0.5", ls=[":", "--"][j % 2], lw=0.8, label=f"baseline: {name}")
        chain = chain_by_length(cmp)
        if chain:
            ax.plot(sorted(chain), [chain[n] for n in sorted(chain)], "--", color="0.2", lw=1.2,
                    label="best Markov chain (same windows)")
        _axes(ax, info, ylabel, f"{info.task}: {title} (band: {cmp.level:.0%} CI over seeds)")
    ax = axes[1, 0]
    for i, r in enumerate(trained):
        if r.ratio is not None:  # the guard passed: retained gain is defined
            _band(ax, {n: g for n, g in r.retained.items() if g is not None and g.defined}, i, r.label, "o-")
    if not any(r.ratio is not None for r in trained):
        ax.text(0.5, 0.5, "no scheme's gain at L₀ passes the guard", transform=ax.transAxes, ha="center")
    for y in (0.0, 1.0):
        ax.axhline(y, color="0.6", lw=0.8)
    ax.axhline(cmp.retain, color="0.3", ls=":", lw=1, label=f"retain = {cmp.retain:g}")
    _axes(ax, info, f"retained gain over {info.trivial_name or 'the trivial baseline'}",
          "retained gain (1 = all of the gain at L₀ kept)")
    _positions(axes[1, 1], cmp)
    fig.tight_layout()
    return fig


def whole_window_figure(cmp: Comparison, path: Path) -> Path:
    """Bits/base against whole-window length, every scheme (and RoPE variant) with its band over
    seeds and the chain on the same windows dashed
    (:func:`pipelines.tasks.dna.whole_window.length_figure`)."""

    def points(est: dict[int, Estimate | None]) -> dict[int, tuple[float, float, float]]:
        return {n: (e.mean, e.lo if e.n > 1 else e.mean, e.hi if e.n > 1 else e.mean)
                for n, e in est.items() if e is not None}

    curves = {r.label: points(r.metric) for r in cmp.rows}
    title = f"{cmp.info.task}: whole windows, {cmp.level:.0%} CI over seeds {' '.join(map(str, cmp.seeds))}"
    return length_figure(curves, chain_by_length(cmp), cmp.info.train_length, title, path)


def _band(ax, est: dict[int, Estimate | Retained | None], i: int, label: str, style: str) -> None:
    xs = [n for n, e in est.items() if e is not None]
    if not xs:
        return
    ys = np.array([est[n].mean for n in xs])
    ax.plot(xs, ys, style, color=f"C{i % 10}", lw=1.5, ms=4, label=label)
    lo, hi = np.array([est[n].lo for n in xs]), np.array([est[n].hi for n in xs])
    if np.isfinite(lo).all():
        ax.fill_between(xs, lo, hi, color=f"C{i % 10}", alpha=0.15)
    bad = [n for n, e in est.items() if e is None]
    if bad:
        ax.plot(bad, [ys[-1]] * len(bad), "x", color=f"C{i % 10}", ms=9)


def _axes(ax, info, ylabel: str, title: str) -> None:
    ax.axvline(info.train_length, color="0.6", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"test length ({info.length_unit}); dotted = L₀; × = undefined")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)


def _positions(ax, cmp: Comparison) -> None:

    curves: dict[str, list[tuple[int, np.ndarray]]] = {}
    for c in cmp.children:
        if c.ok and c.positions is not None:
            curves.setdefault(c.scheme, []).append(c.positions)
    for i, (scheme, found) in enumerate(curves.items()):
        n = max(length for length, _ in found)
        same = [curve for length, curve in found if length == n]
        x, y = binned(np.nanmean(np.stack(same), axis=0), 48)
        ax.plot(x, y, color=f"C{i % 10}", lw=1.2, label=f"{scheme} (L={n})")
    if cmp.info.position_label.startswith("position"):
        ax.axvline(cmp.info.train_length - 1, color="0.6", ls=":", lw=1)
    ax.set_xlabel(cmp.info.position_label + " (binned)")
    ax.set_ylabel(cmp.info.metric)
    ax.set_title("per position at the longest defined length (mean over seeds)", fontsize=10)
    if curves:
        ax.legend(fontsize=7, ncol=2)
