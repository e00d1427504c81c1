"""What a length-extrapolation sweep leaves behind: MLflow metrics, CSV tables, a figure."""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.eval.extrapolation import TRAINED, Extrapolation
from pipelines.eval.splits import SPLIT_WORDS

PREFIX = "extrapolation"  # a sweep of the test split (what ``make compare`` reads)


def prefix(result: Extrapolation) -> str:
    """Where a sweep's keys, tags and artifacts go: ``extrapolation`` for the test split,
    ``val/extrapolation`` for the validation split (never mixed with the test sweep's)."""
    return PREFIX if result.split == "test" else f"{result.split}/{PREFIX}"


def metric_key(result: Extrapolation, variant: str, name: str) -> str:
    """``<prefix>/<name>`` for the scheme as trained, ``<prefix>/<variant>/<name>`` else (:func:`prefix`)."""
    return f"{prefix(result)}/{name}" if variant == TRAINED else f"{prefix(result)}/{variant}/{name}"


def mlflow_metrics(result: Extrapolation) -> list[tuple[str, float, int]]:
    """(key, value, step) triples: the metric and its retained gain per length (step = length), the
    summary, the trivial baseline and the other baselines (step 0)."""
    out = []
    for variant in result.variants:
        gains = result.retained(variant)
        for length, value in sorted(result.by_length(variant).items()):
            if value is not None:
                out.append((metric_key(result, variant, f"{result.metric}_by_length"), float(value), length))
            if gains.get(length) is not None:
                out.append((metric_key(result, variant, "retained_gain_by_length"), gains[length], length))
        for name, value in result.summary(variant).items():
            out.append((metric_key(result, variant, name), float(value), 0))
    if result.trivial is not None:
        out.append((f"{prefix(result)}/trivial_baseline", float(result.trivial), 0))
    out.extend((f"{prefix(result)}/baseline/{k}", float(v), 0) for k, v in result.baselines.items())
    return out


def mlflow_tags(result: Extrapolation) -> dict[str, str]:
    """What a reader of the run (``make compare`` among them) needs to interpret its metrics: the
    task, metric, direction, training and tested lengths, the trivial baseline's name, and per
    variant the undefined lengths and why there is no ratio (``none`` when there is one)."""
    at = prefix(result)
    tags = {
        f"{at}/task": result.task,
        f"{at}/metric": result.metric,
        f"{at}/higher_is_better": str(result.higher_is_better).lower(),
        f"{at}/train_length": str(result.train_length),
        f"{at}/lengths": ",".join(map(str, result.lengths)),
        f"{at}/length_unit": result.length_unit,
        f"{at}/position_label": result.position_label,
        f"{at}/trivial": result.trivial_name or "none",
        f"{at}/split": result.split,
    }
    for variant in result.variants:
        bad = result.undefined(variant)
        tags[metric_key(result, variant, "undefined_lengths")] = ",".join(map(str, bad)) if bad else "none"
        tags[metric_key(result, variant, "no_ratio")] = result.verdict(variant) or "none"
    return tags


def write_tables(result: Extrapolation, folder: Path) -> list[Path]:
    """``results.csv`` (variant, length, metric, status, split), ``per_position.csv`` and ``summary.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = folder / "results.csv"
    with rows.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["variant", "length", "factor", result.metric, "retained_gain", "status", "split"])
        gains = {v: result.retained(v) for v in result.variants}
        for c in result.cells:
            gain = gains[c.variant].get(c.length)
            metric = "" if c.metric is None else f"{c.metric:.6g}"
            w.writerow([c.variant, c.length, c.length / result.train_length, metric,
                        "" if gain is None else f"{gain:.6g}", c.status, result.split])
    curves = folder / "per_position.csv"
    with curves.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["variant", "length", "position", "loss"])
        for c in result.cells:
            for i, v in enumerate([] if c.curve is None else c.curve.tolist()):
                w.writerow([c.variant, c.length, i, "" if math.isnan(v) else f"{v:.6g}"])
    summary = folder / "summary.json"
    summary.write_text(json.dumps(summary_dict(result), indent=2))
    blocks = write_blocks(result, folder)
    return [rows, curves, summary, *([blocks] if blocks else [])]


def write_blocks(result: Extrapolation, folder: Path) -> Path | None:
    """``blocks.csv`` (variant, length, block, sum, count): the per-block parts of the metric over the
    test region (variant ``trivial``: the trivial baseline, length 0), where the task scores blocks."""
    cells = [c for c in result.cells if c.blocks is not None]
    if not cells and result.trivial_blocks is None:
        return None
    path = folder / "blocks.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["variant", "length", "block", "sum", "count"])
        parts = [(c.variant, c.length, c.blocks) for c in cells]
        if result.trivial_blocks is not None:
            parts.append(("trivial", 0, result.trivial_blocks))
        for variant, length, table in parts:
            for k, (total, count) in enumerate(np.asarray(table, dtype=np.float64)):
                w.writerow([variant, length, k, repr(float(total)), repr(float(count))])
    return path


def summary_dict(result: Extrapolation) -> dict[str, Any]:
    """Everything of ``summary.json``: the setup, the baselines, and per variant the summary, the
    metric and retained gain per length and the undefined lengths."""
    return {
        "task": result.task, "scheme": result.scheme, "split": result.split, "metric": result.metric,
        "higher_is_better": result.higher_is_better, "train_length": result.train_length,
        "tolerance": result.tolerance, "retain": result.retain,
        "trivial_baseline": {"name": result.trivial_name, "value": result.trivial},
        "baselines": result.baselines, "lengths": result.lengths,
        "variants": {
            v: {
                "summary": result.summary(v),
                "no_ratio": result.verdict(v),
                "undefined_lengths": result.undefined(v),
                "by_length": {str(k): val for k, val in result.by_length(v).items()},
                "retained_gain_by_length": {str(k): g for k, g in result.retained(v).items()},
            }
            for v in result.variants
        },
    }


def binned(curve: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean of ``curve`` over ``bins`` equal runs of positions: (bin centres, values)."""
    n = len(curve)
    edges = np.linspace(0, n, min(bins, n) + 1).astype(int)
    centres = (edges[:-1] + edges[1:] - 1) / 2
    with np.errstate(invalid="ignore"):
        values = np.array(
            [
                np.nanmean(curve[a:b]) if np.isfinite(curve[a:b]).any() else np.nan
                for a, b in zip(edges[:-1], edges[1:], strict=True)
            ]
        )
    return centres, values


def figure(result: Extrapolation, bins: int = 64):
    """Metric vs length (one line per variant), the per-position curves of the scheme as trained
    (one line per length) and, for RoPE-family schemes, every variant at the longest length (a
    matplotlib ``Figure``: no pyplot state, the caller's backend untouched)."""
    from matplotlib.figure import Figure  # optional: matplotlib, figures only

    variants = result.variants
    n_panels = 3 if len(variants) > 1 else 2
    fig = Figure(figsize=(5.2 * n_panels, 4.0))
    axes = fig.subplots(1, n_panels)
    ax = axes[0]
    for i, variant in enumerate(variants):
        values = result.by_length(variant)
        xs = [n for n in result.lengths if values.get(n) is not None]
        ax.plot(xs, [values[n] for n in xs], "o-" if variant == TRAINED else "s--", color=f"C{i}",
                lw=2 if variant == TRAINED else 1.2, label=variant)
        bad = result.undefined(variant)
        if bad:
            top = max((v for v in values.values() if v is not None), default=0.0)
            ax.plot(bad, [top] * len(bad), "x", color=f"C{i}", ms=9, label=f"{variant}: undefined")
    if result.trivial is not None:
        ax.axhline(result.trivial, color="0.3", ls="-.", lw=1, label=f"trivial: {result.trivial_name}")
    ax.axvline(result.train_length, color="0.6", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"test length ({result.length_unit}; dotted = training length)")
    ax.set_ylabel(f"{result.metric} ({'higher' if result.higher_is_better else 'lower'} is better)")
    ax.set_title(f"{result.task}: {result.scheme} ({SPLIT_WORDS[result.split]} split)", fontsize=10)
    ax.legend(fontsize=7)
    per_pos = {c.length: c.curve for c in result.cells if c.variant == TRAINED and c.curve is not None}
    _curves(axes[1], per_pos, bins, "length", result)
    axes[1].set_title(f"per position, {result.scheme} as trained", fontsize=10)
    if n_panels == 3 and per_pos:
        longest = max(c.length for c in result.cells if c.curve is not None)
        curves = {c.variant: c.curve for c in result.cells if c.length == longest and c.curve is not None}
        _curves(axes[2], curves, bins, "", result)
        axes[2].set_title(f"per position at length {longest}, by variant", fontsize=10)
    fig.tight_layout()
    return fig


def _curves(ax, curves: dict[Any, np.ndarray], bins: int, label: str, result: Extrapolation) -> None:
    for i, (key, curve) in enumerate(curves.items()):
        x, y = binned(curve, bins)
        ax.plot(x, y, color=f"C{i}", lw=1.2, label=f"{label} {key}".strip())
    if result.position_label.startswith("position"):
        ax.axvline(result.train_length - 1, color="0.6", ls=":", lw=1)
    ax.set_xlabel(result.position_label + f" (binned, ≤{bins} bins)")
    ax.set_ylabel(result.metric)
    ax.legend(fontsize=7)


def figures_on() -> bool:
    """``False`` when ``POSENC_FIGURES=0``: sweeps write their tables and metrics but no
    ``extrapolation.png`` (drawing it costs ~1 CPU s, more than a tiny child's training; the test
    suite's comparisons of many tiny children skip it)."""
    return os.environ.get("POSENC_FIGURES", "1") != "0"


def save_all(result: Extrapolation, folder: Path) -> list[Path]:
    """Write the tables and ``extrapolation.png`` (unless :func:`figures_on` says not) into ``folder``;
    returns the files."""
    files = write_tables(result, folder)
    if not figures_on():
        return files
    png = folder / "extrapolation.png"
    figure(result).savefig(png, dpi=110)
    return [*files, png]


def log_to_mlflow(result: Extrapolation, client: Any, run_id: str) -> None:
    """Log metrics (step = length), the undefined lengths (tags) and the artifacts to ``run_id``."""
    from mlflow.entities import Metric  # heavy: mlflow, loaded only when tracking

    now = int(1000 * __import__("time").time())
    metrics = [Metric(k, v, now, step) for k, v, step in mlflow_metrics(result)]
    for i in range(0, len(metrics), 500):
        client.log_batch(run_id, metrics=metrics[i : i + 500])
    for key, value in mlflow_tags(result).items():
        client.set_tag(run_id, key, value)
    with tempfile.TemporaryDirectory() as tmp:
        save_all(result, Path(tmp))
        client.log_artifacts(run_id, tmp, prefix(result))


def format_table(result: Extrapolation) -> str:
    """Plain-text table under a title naming the split: one row per variant, one column per length
    (metric, then retained gain in brackets), then the extrapolation ratio; a line on the trivial
    baseline."""
    head = ["variant", *[f"L={n}" for n in result.lengths], "ratio"]
    title = f"{result.task} {result.scheme}: whole windows of the {SPLIT_WORDS[result.split]} split"
    lines = [title, " ".join(f"{h:>18}" for h in head)]
    for variant in result.variants:
        values, gains = result.by_length(variant), result.retained(variant)
        cells = [
            "undefined" if values.get(n) is None
            else f"{values[n]:.4g}" + ("" if gains.get(n) is None else f" [{gains[n]:+.2f}]")
            for n in result.lengths
        ]
        ratio = result.summary(variant).get("ratio")
        lines.append(" ".join(f"{c:>18}" for c in [variant, *cells, "-" if ratio is None else f"{ratio:g}x"]))
    if result.trivial is not None:
        lines.append(f"{result.metric}; [retained gain] against the trivial baseline {result.trivial_name}: "
                     f"{result.trivial:.4g}; ratio: longest length with retained gain ≥ {result.retain:g} "
                     "(one run)")
    lines += [f"{v}: {why}" for v in result.variants if (why := result.verdict(v))]
    return "\n".join(lines)
