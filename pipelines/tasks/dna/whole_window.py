"""The causal DNA LM's length extrapolation at a glance: whole-window bits/base at every test length
beside the Markov chain scored on the same windows, and sliding-window inference where it was used.

* :func:`read_lengths` / :func:`format_lengths` — the table ``make train`` prints after its test pass;
* :func:`length_figure` — bits/base against whole-window length (log₂ axis): one line per scheme
  (a band where a lower and upper bound are given, e.g. a CI over seeds), the chain dashed. ``make
  train`` logs it to its run as ``whole_windows.png`` (:func:`log_run_lengths`); ``make compare``
  draws it with bands over seeds per scheme.

The keys read (logged by :class:`pipelines.tasks.dna.lm.DNALanguageModel` and
:class:`pipelines.tasks.dna.markov.MarkovBaselines`): :data:`WHOLE`, :data:`CHAIN`, :data:`SLIDING` + length.
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WHOLE = "test/bits_per_base_whole_L"  # + length: whole windows (the extrapolation score)
CHAIN = "baseline/markov_bits_per_base_L"  # + length: the chosen chain on the same windows
SLIDING = "test/bits_per_base_sliding_L"  # + length: sliding-window inference (an option)
FIGURE = "whole_windows.png"

#: scheme label → length → (mean, lower, upper); lower = upper = mean for a single run
Curves = dict[str, dict[int, tuple[float, float, float]]]


@dataclass
class LengthTable:
    """One run's per-length scores (bits/base) by test length in tokens."""

    train_length: int
    whole: dict[int, float] = field(default_factory=dict)
    chain: dict[int, float] = field(default_factory=dict)
    sliding: dict[int, float] = field(default_factory=dict)
    window: int | None = None  # the model's local attention window (None: every query reads all keys)

    @property
    def lengths(self) -> list[int]:
        return sorted(set(self.whole) | set(self.chain))


def _by_length(metrics: dict[str, float], prefix: str) -> dict[int, float]:
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    return {int(m.group(1)): float(v) for k, v in metrics.items() if (m := pattern.match(k))}


def read_lengths(metrics: dict[str, float], train_length: int) -> LengthTable | None:
    """The per-length table from a run's metrics, or ``None`` when it has no whole-window scores."""
    whole = _by_length(metrics, WHOLE)
    if not whole:
        return None
    return LengthTable(train_length, whole, _by_length(metrics, CHAIN), _by_length(metrics, SLIDING))


def format_lengths(table: LengthTable) -> str:
    """The table as aligned text: length (× L₀, tokens) | whole-window | chain [| sliding]."""

    def num(values: dict[int, float], n: int) -> str:
        v = values.get(n)
        return "undefined" if v is None or not math.isfinite(v) else f"{v:.4f}"

    head = ["length (×L0, tokens)", "whole-window bits/base", "chain bits/base (same windows)"]
    if table.sliding:
        head.append("sliding-window bits/base (not extrapolation)")
    rows = [[f"{n / table.train_length:g}× ({n})", num(table.whole, n), num(table.chain, n),
             *([num(table.sliding, n)] if table.sliding else [])] for n in table.lengths]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows]]
    window = "" if table.window is None else f", each query attending its {table.window} nearest tokens"
    title = (f"Whole-window extrapolation (trained at L0 = {table.train_length} tokens{window}; "
             "lower is better):")
    return "\n".join([title, *("  " + line for line in lines)])


def length_figure(curves: Curves, chain: dict[int, float], train_length: int, title: str, path: Path) -> Path:
    """Bits/base against whole-window length (log₂ x axis): one line per scheme of ``curves`` with
    its band (where lower < upper), ``chain`` dashed, L₀ dotted; written to ``path`` (PNG)."""
    from matplotlib import colormaps  # optional: matplotlib, figures only
    from matplotlib.figure import Figure  # optional: matplotlib, figures only

    fig = Figure(figsize=(7.2, 4.2))
    ax = fig.subplots()
    colors = colormaps["tab20"].colors  # up to 20 schemes apart
    for i, (label, points) in enumerate(curves.items()):
        xs = sorted(n for n, (m, _, _) in points.items() if math.isfinite(m))
        if not xs:
            continue
        mean, lo, hi = ([points[n][j] for n in xs] for j in range(3))
        ax.plot(xs, mean, "o-", color=colors[i % 20], lw=1.5, ms=4, label=label)
        if all(math.isfinite(a) and math.isfinite(b) for a, b in zip(lo, hi, strict=True)) and lo != hi:
            ax.fill_between(xs, lo, hi, color=colors[i % 20], alpha=0.15, lw=0)
    if chain:
        xs = sorted(chain)
        ax.plot(xs, [chain[n] for n in xs], "--", color="0.2", lw=1.2,
                label="best Markov chain (same windows)")
    ticks = sorted({n for points in curves.values() for n in points} | set(chain))
    ax.axvline(train_length, color="0.6", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    if ticks:
        ax.set_xticks(ticks, [f"{n}\n{n / train_length:g}×" for n in ticks])
    ax.set(xlabel=f"whole-window length (tokens; dotted: L0 = {train_length})",
           ylabel="bits/base (lower is better)", title=title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def run_curves(table: LengthTable, label: str) -> Curves:
    """One run's whole-window scores as a single curve (no band)."""
    return {label: {n: (v, v, v) for n, v in table.whole.items()}}


def log_run_lengths(client: Any, run_id: str, train_length: int, window: int | None = None) -> str | None:
    """Print-ready table of run ``run_id`` (``None`` if it has no whole-window scores); its figure
    is logged to the run as :data:`FIGURE`. ``window``: the model's local attention window, if any."""
    run = client.get_run(run_id)
    table = read_lengths(run.data.metrics, train_length)
    if table is None:
        return None
    table.window = window
    label = (run.info.run_name or "model") + ("" if window is None else f", attention window {window}")
    with tempfile.TemporaryDirectory(prefix="posenc-lengths-") as tmp:
        path = length_figure(run_curves(table, f"{label} (whole windows)"), table.chain, train_length,
                             f"{label}: held-out test bases", Path(tmp) / FIGURE)
        client.log_artifact(run_id, str(path))
    return format_lengths(table) + f"\n  figure: {FIGURE} (run artifact)"
