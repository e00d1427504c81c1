"""The claims table ("claim → setup → measured (mean ± CI) → holds?") and the per-experiment write-up."""

from __future__ import annotations

import os
from pathlib import Path

from pipelines.eval.claims.base import ClaimResult


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_table(results: list[ClaimResult], wall: float, cpu: float, smoke: bool,
                  factor: float = 1.0, threads: int = 1) -> str:
    """One row per claim, with its command and its wall / CPU seconds, then the suite's totals."""
    head = ("| # | claim | setup | measured (mean ± 95 % CI over seeds) | holds? | command | wall s / CPU s |\n"
            "|---|---|---|---|---|---|---|\n")
    rows = [f"| {r.number} | {_cell(r.claim)} | {_cell(r.setup)} | {_cell(r.measured)} | **{r.holds}** | "
            f"`{r.command}` | {r.wall_s:.0f} / {r.cpu_s:.0f} |" for r in results]
    note = (f"\nSuite: {len(results)} experiment(s), {threads} torch thread(s), wall {wall:.0f} s, CPU {cpu:.0f} s "
            f"(idle estimate CPU / {factor} = {cpu / factor:.0f} s)"
            + (" — SMOKE RUN: tiny budgets, the numbers mean nothing" if smoke else "") + ".\n")
    return head + "\n".join(rows) + "\n" + note


def claims_markdown(results: list[ClaimResult], figures_dir: Path | None, table: str | None = None,
                    relative_to: Path | None = None) -> str:
    """The table (if given) and each experiment's details, figures linked relative to ``relative_to``."""
    parts = []
    if table is not None:
        parts += ["# Claims of the literature, measured\n",
                  "Every row is one experiment of `make experiments` (configs in `configs/experiments/`, "
                  "runner `python -m pipelines.eval.claims`), logged to MLflow experiment `posenc-claims` "
                  "(one parent run per experiment, one child run per trained model). Intervals are 95 % "
                  "Student-t intervals over seeds (`pipelines/eval/statistics.py`); a difference is called "
                  "only when its paired interval excludes 0.\n", table]
    for r in results:
        parts.append(f"\n## {r.number}. {r.name}\n\n**Claim.** {r.claim}\n\n**Setup.** {r.setup}\n\n"
                     f"**Measured.** {r.measured}\n\n**Holds?** {r.holds} — rule: {r.rule}\n\n"
                     f"Command: `{r.command}` (wall {r.wall_s:.0f} s, CPU {r.cpu_s:.0f} s).\n\n{r.details}")
        for f in r.figures:
            shown = os.path.relpath(f, relative_to) if relative_to is not None else f
            parts.append(f"\n![{r.name}]({shown})\n")
    return "\n".join(parts)
