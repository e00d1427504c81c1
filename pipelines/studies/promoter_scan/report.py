"""The scanning study's outputs: the table (CSV and markdown) and the figure of hits and false calls."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any

from datamodules.dna.locate import Located

FIELDS = ("read", "length", "hit5", "hit10", "auprc", "false_per_kb", "offset", "threshold", "windows",
          "targets", "background_kb")
READ_NAMES = {"whole": "one pass, pooled", "whole_tokens": "one pass, token logits",
              "sliding": "same model slid", "pwm": "PWM slid", "onehot_lr": "one-hot LR slid"}


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| length | read | ±5 | ±10 | call AUPRC | false calls / kb | offset | threshold |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["length"], list(READ_NAMES).index(r["read"]))):
        lines.append(f"| {r['length']} | {READ_NAMES[r['read']]} | {r['hit5']:.2f} | {r['hit10']:.2f} | "
                     f"{r['auprc']:.3f} | {r['false_per_kb']:.2f} | {r['offset']:+d} | "
                     f"{r['threshold']:.2f} |")
    return lines


def _verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's target per length: the one-pass read at or above the slid read, and above the PWM."""
    by = {(r["read"], r["length"]): r for r in rows}
    out = []
    for n in sorted({r["length"] for r in rows}):
        w, s, p = by.get(("whole", n)), by.get(("sliding", n)), by.get(("pwm", n))
        if not (w and s and p):
            continue
        met = [w[k] >= s[k] for k in ("hit10", "auprc")] + [w[k] > p[k] for k in ("hit10", "auprc")]
        out.append(f"- {n} bases: one pass vs slid: ±10 {w['hit10']:.2f} vs {s['hit10']:.2f}, AUPRC "
                   f"{w['auprc']:.3f} vs {s['auprc']:.3f}; vs PWM: ±10 {p['hit10']:.2f}, AUPRC "
                   f"{p['auprc']:.3f} — {'met' if all(met) else 'not met'}")
    return out


def scan_markdown(rows: list[dict[str, Any]], found: Located, args: argparse.Namespace,
                  seconds: dict[str, float], profiles: list[dict[str, Any]], source: str) -> str:
    """The study's summary: settings, the locator's counts, the table, the target, cost, saliency."""
    first = rows[0] if rows else {}
    quick = " (--quick: fewer windows)" if args.quick else ""
    genome = args.genome or "shipped E. coli W3110"
    lines = [f"# Scanning the genome: fold {args.fold} of {args.folds}, seed {args.seed}{quick}", "",
             f"Model: `{source}`. Promoters: `{args.data[0]}`; genome: `{genome}`.",
             f"Placed by sequence: {found.describe()}.",
             f"Windows per length: {first.get('windows', 0)} test promoters ({first.get('targets', 0)} "
             f"target TSSs in them), {args.background} background windows "
             f"({first.get('background_kb', 0):.1f} kb scored at the longest); offsets and thresholds "
             "chosen on the validation promoters' windows.",
             "The genome has promoters no set names: a false call in a background window is an upper bound.",
             "", *_table(rows), "",
             "Target (one pass at or above the slid read, and above the PWM scan):", "",
             *_verdicts(rows), "",
             f"Cost of the reads (s, this run): one pass {seconds.get('whole', 0):.1f}, slid model "
             f"{seconds.get('sliding', 0):.1f}, PWM {seconds.get('pwm', 0):.1f}.", "",
             "Saliency (share of |gradient x input| within ±3 of each box; enrichment over a flat profile):",
             "",
             "| model | " + " | ".join(f"box at {b}" for b in args.boxes) + " | peak |",
             "|---|" + "---:|" * (len(args.boxes) + 1)]
    for p in profiles:
        cells = " | ".join(f"{p['boxes'][b]['share']:.3f} ({p['boxes'][b]['enrichment']:.1f}x)"
                           for b in args.boxes)
        lines.append(f"| {p['label']} | {cells} | {p['peak']} |")
    return "\n".join(lines) + "\n"


def scan_figure(rows: list[dict[str, Any]], path: Path) -> None:
    """Hits within ±10 and false calls per kb against the window length, one line per read."""
    import matplotlib  # heavy: matplotlib, only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: matplotlib

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for read, name in READ_NAMES.items():
        mine = sorted((r for r in rows if r["read"] == read), key=lambda r: r["length"])
        if not mine:
            continue
        x = [r["length"] / 1000 for r in mine]
        axes[0].plot(x, [r["hit10"] for r in mine], marker="o", label=name)
        axes[1].plot(x, [r["false_per_kb"] for r in mine], marker="o", label=name)
    for ax, what in zip(axes, ("test promoters with a call within ±10", "false calls per kb (background)"),
                        strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("window (kb)")
        ax.set_ylabel(what)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
