"""The comparison's outputs: per-scheme rows (mean ± std over seeds), markdown, CSVs, the figure."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.eval.extrapolation import TRAINED, Extrapolation, extrapolation_ratio


@dataclass
class Child:
    """One trained scheme × seed: its run and its sweep (``None`` if training failed)."""

    scheme: str
    seed: int
    run_id: str | None
    result: Extrapolation | None
    error: str = ""
    module: Any = None  # the trained LightningModule and its datamodule (for the baselines)
    datamodule: Any = None


def mean_curves(children: list[Child], variant: str) -> dict[int, tuple[float, float, int] | None]:
    """length → (mean, std, n seeds) of the metric over ``children``; ``None`` where undefined."""
    out: dict[int, tuple[float, float, int] | None] = {}
    lengths = sorted({n for c in children for n in c.result.by_length(variant)})
    for n in lengths:
        vals = [c.result.by_length(variant).get(n) for c in children]
        if any(v is None for v in vals):
            out[n] = None
        else:
            out[n] = (float(np.mean(vals)), float(np.std(vals)), len(vals))
    return out


def rows(children: list[Child]) -> list[dict[str, Any]]:
    """One row per (scheme, variant): mean ± std per length, extrapolation ratio, metric at the longest."""
    out = []
    by_scheme: dict[str, list[Child]] = {}
    for c in children:
        if c.result is not None:
            by_scheme.setdefault(c.scheme, []).append(c)
    for scheme, group in by_scheme.items():
        ref = group[0].result
        for variant in ref.variants:
            curve = mean_curves(group, variant)
            means = {n: (v[0] if v else None) for n, v in curve.items()}
            max_len, ratio = extrapolation_ratio(means, ref.train_length, ref.higher_is_better, ref.tolerance)
            longest = max(curve)
            out.append(
                {
                    "scheme": scheme if variant == TRAINED else f"{scheme}+{variant}",
                    "variant": variant,
                    "seeds": len(group),
                    "curve": curve,
                    "ratio": ratio,
                    "max_length": max_len,
                    "at_longest": means[longest],
                    "metric": ref.metric,
                    "train_length": ref.train_length,
                }
            )
    return out


def _cell(v: tuple[float, float, int] | None) -> str:
    if v is None:
        return "undefined"
    return f"{v[0]:.4f}" if v[2] == 1 else f"{v[0]:.4f} ± {v[1]:.4f}"


def markdown(table: list[dict[str, Any]], baselines: dict[str, float]) -> str:
    lengths = sorted({n for r in table for n in r["curve"]})
    train = table[0]["train_length"]
    head = ["scheme", *[f"L={n} ({n / train:g}×)" for n in lengths], "extrap. ratio (≤5%)", "at longest"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table:
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:g}×"
        longest = "undefined" if r["at_longest"] is None else f"{r['at_longest']:.4f}"
        lines.append(
            "| "
            + " | ".join([r["scheme"], *[_cell(r["curve"].get(n)) for n in lengths], ratio, longest])
            + " |"
        )
    note = f"\nMetric: {table[0]['metric']} (mean ± std over seeds where > 1)."
    if baselines:
        note += (
            " Baselines on the same test data: "
            + ", ".join(f"{k} {v:.4f}" for k, v in baselines.items())
            + "."
        )
    return "\n".join(lines) + "\n" + note + "\n"


def write_csvs(table: list[dict[str, Any]], children: list[Child], folder: Path) -> list[Path]:
    wide, long_ = folder / "comparison.csv", folder / "comparison_long.csv"
    lengths = sorted({n for r in table for n in r["curve"]})
    with wide.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "scheme",
                "variant",
                "seeds",
                *[f"mean_L{n}" for n in lengths],
                *[f"std_L{n}" for n in lengths],
                "extrapolation_ratio",
                "max_length_within_tol",
                "metric_at_longest",
            ]
        )
        for r in table:
            cur = r["curve"]
            w.writerow(
                [
                    r["scheme"],
                    r["variant"],
                    r["seeds"],
                    *[("" if cur.get(n) is None else cur[n][0]) for n in lengths],
                    *[("" if cur.get(n) is None else cur[n][1]) for n in lengths],
                    r["ratio"] if r["ratio"] is not None else "",
                    r["max_length"] or "",
                    r["at_longest"] or "",
                ]
            )
    with long_.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["scheme", "seed", "run_id", "variant", "length", "metric", "status"])
        for c in children:
            if c.result is None:
                w.writerow([c.scheme, c.seed, c.run_id or "", "", "", "", f"failed: {c.error}"])
                continue
            for cell in c.result.cells:
                w.writerow(
                    [
                        c.scheme,
                        c.seed,
                        c.run_id,
                        cell.variant,
                        cell.length,
                        "" if cell.metric is None else cell.metric,
                        cell.status,
                    ]
                )
    return [wide, long_]


def figure(table: list[dict[str, Any]], children: list[Child], baselines: dict[str, float]):
    """Metric vs length, one curve per scheme (band: min–max over seeds); RoPE variants beside;
    per-position curves of every scheme at the longest length it defines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipelines.eval.report import binned

    ref = next(c.result for c in children if c.result is not None)
    trained = [r for r in table if r["variant"] == TRAINED]
    rope_family = {r["scheme"].split("+")[0] for r in table if r["variant"] != TRAINED}
    variants = [r for r in table if r["scheme"].split("+")[0] in rope_family]  # as trained + variants
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    for ax, group, title in (
        (axes[0], trained, "schemes as trained"),
        (axes[1], variants or trained, "RoPE family + inference-time variants"),
    ):
        for i, r in enumerate(group):
            xs = [n for n, v in r["curve"].items() if v is not None]
            ys = np.array([r["curve"][n][0] for n in xs])
            style = "o-" if r["variant"] == TRAINED else "s--"
            ax.plot(xs, ys, style, color=f"C{i % 10}", lw=1.5, ms=4, label=r["scheme"])
            spread = _seed_range(children, r, xs)
            if spread is not None:
                ax.fill_between(xs, spread[0], spread[1], color=f"C{i % 10}", alpha=0.15)
            bad = [n for n, v in r["curve"].items() if v is None]
            if bad:
                ax.plot(bad, [ys.max() if len(ys) else 0] * len(bad), "x", color=f"C{i % 10}", ms=10)
        for j, (name, value) in enumerate(baselines.items()):
            ax.axhline(value, color="0.3", ls=[":", "-."][j % 2], lw=1, label=f"baseline: {name}")
        ax.axvline(ref.train_length, color="0.6", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"test length ({ref.length_unit}); × = undefined")
        ax.set_ylabel(f"{ref.metric} ({'higher' if ref.higher_is_better else 'lower'} is better)")
        ax.set_title(f"{ref.task}: {title}", fontsize=10)
        ax.legend(fontsize=7, ncol=2)
    _position_panel(axes[2], children, ref, binned)
    fig.tight_layout()
    return fig


def _seed_range(children: list[Child], row: dict[str, Any], xs: list[int]):
    group = [c for c in children if c.result is not None and c.scheme == row["scheme"].split("+")[0]]
    if len(group) < 2:
        return None
    vals = np.array([[c.result.by_length(row["variant"])[n] for n in xs] for c in group], dtype=float)
    return vals.min(axis=0), vals.max(axis=0)


def _position_panel(ax, children: list[Child], ref: Extrapolation, binned) -> None:
    seen: dict[str, list[np.ndarray]] = {}
    longest = {}
    for c in children:
        if c.result is None:
            continue
        cells = [x for x in c.result.cells if x.variant == TRAINED and x.curve is not None]
        if cells:
            last = max(cells, key=lambda x: x.length)
            seen.setdefault(c.scheme, []).append(last.curve)
            longest[c.scheme] = last.length
    for i, (scheme, curves) in enumerate(seen.items()):
        x, y = binned(np.nanmean(np.stack(curves), axis=0), 48)
        ax.plot(x, y, color=f"C{i % 10}", lw=1.2, label=f"{scheme} (L={longest[scheme]})")
    if ref.position_label.startswith("position"):
        ax.axvline(ref.train_length - 1, color="0.6", ls=":", lw=1)
    ax.set_xlabel(ref.position_label + " (binned)")
    ax.set_ylabel(ref.metric)
    ax.set_title("per position at the longest defined length", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
