"""The claims table ("claim → setup → measured (mean ± CI) → holds?") and the per-experiment write-up."""

from __future__ import annotations

import math
import os
from pathlib import Path

from pipelines.eval.claims.base import ClaimResult
from pipelines.eval.claims.judge import CLAIM_SEEDS, QUICK_SEEDS


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def power_cell(r: ClaimResult) -> str:
    """The claim's power (gain at L₀ / half-width of its interval), or why there is none."""
    if r.power is not None:
        return "∞" if math.isinf(r.power) else f"{r.power:.3g}"
    return "— (exempt)" if r.power_text.startswith("no power gate") else "not measured"


def holds_cell(r: ClaimResult) -> str:
    """``**holds**``, with the rule's own verdict where the power gate overrode it."""
    if r.raw_holds and r.raw_holds != r.holds:
        return f"**{r.holds}** (rule alone: {r.raw_holds})"
    return f"**{r.holds}**"


def summary_table(
    results: list[ClaimResult], wall: float, cpu: float, smoke: bool, factor: float = 1.0, threads: int = 1,
    quick: bool = False,
) -> str:
    """One row per claim — its power, its primary comparison (Holm-adjusted), its verdict, command
    and wall / CPU seconds — then the suite's totals."""
    head = (
        "| # | claim | setup | measured (mean ± 95 % CI over seeds) | power | primary comparison "
        "(Holm-adjusted) | holds? | command | wall s / CPU s |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = [
        f"| {r.number} | {_cell(r.claim)} | {_cell(r.setup)} | {_cell(r.measured)} | {power_cell(r)} | "
        f"{_cell(r.primary or '—')} | {holds_cell(r)} | `{r.command}` | {r.wall_s:.0f} / {r.cpu_s:.0f} |"
        for r in results
    ]
    note = (
        f"\nSuite: {len(results)} experiment(s), {threads} torch thread(s), wall {wall:.0f} s, "
        f"CPU {cpu:.0f} s (idle estimate CPU / {factor} = {cpu / factor:.0f} s)"
        + (" — SMOKE RUN: tiny budgets, the numbers mean nothing" if smoke else "")
        + (f" — QUICK RUN: {QUICK_SEEDS} seeds instead of {len(CLAIM_SEEDS)}, verdicts provisional"
           if quick else "")
        + ".\n"
    )
    return head + "\n".join(rows) + "\n" + note


def claims_markdown(
    results: list[ClaimResult],
    figures_dir: Path | None,
    table: str | None = None,
    relative_to: Path | None = None,
) -> str:
    """The table (if given) and each experiment's details, figures linked relative to ``relative_to``."""
    parts = []
    if table is not None:
        parts += [
            "# Claims of the literature, measured\n",
            "Every row is one experiment of `make experiments` (configs in `configs/experiments/`, "
            "runner `python -m pipelines.eval.claims`), logged to MLflow experiment `posenc-claims` "
            "(one parent run per experiment, one child run per trained model). Each claim declares one "
            "primary comparison before the run; every paired call of an experiment is Holm-adjusted "
            "with the others and the verdict reads the primary one's interval; a trained claim whose "
            "power (gain over the trivial baseline at L₀ / half-width of its 95 % interval) is below "
            "10 is \"inconclusive (underpowered)\" (method: `docs/claims.md`, \"How a verdict is "
            "called\").\n",
            table,
        ]
    for r in results:
        parts.append(
            f"\n## {r.number}. {r.name}\n\n**Claim.** {r.claim}\n\n**Setup.** {r.setup}\n\n"
            f"**Measured.** {r.measured}\n\n**Primary comparison.** {r.primary or '—'}\n\n"
            f"**Power.** {r.power_text or 'not measured'}\n\n"
            f"**Holds?** {holds_cell(r).replace('**', '')} — rule: {r.rule}\n\n"
            f"Command: `{r.command}` (wall {r.wall_s:.0f} s, CPU {r.cpu_s:.0f} s).\n\n{r.details}"
        )
        for f in r.figures:
            shown = os.path.relpath(f, relative_to) if relative_to is not None else f
            parts.append(f"\n![{r.name}]({shown})\n")
    return "\n".join(parts)
