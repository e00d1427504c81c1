"""The claims table ("claim → setup → measured (mean ± CI) → holds?") and the per-experiment write-up."""

from __future__ import annotations

import math
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from pipelines.machine import cpu_model
from pipelines.studies.claims.base import ClaimResult
from pipelines.studies.claims.context import ROOT
from pipelines.studies.claims.judge import CLAIM_SEEDS, QUICK_SEEDS, QUICK_STEPS

#: the method section of the write-up (docs/claims.md), regenerated with it
METHOD = """\
## How a verdict is called

The rules are code (`pipelines/eval/verdicts.py`, `pipelines/studies/claims/judge.py`), fixed before a run:

1. **One primary comparison per claim, declared before the run.** Each config in `configs/experiments/`
   names it at the top (`primary: {a: <condition>, b: <condition>, length: <L>, expect: better|worse|differ}`;
   `length` omitted = the training length L₀); the runner refuses a config without one and logs it on the
   experiment's parent run before anything trains. The verdict is read from that comparison alone:
   **yes** when it is called in the expected direction, **no** otherwise. Every other comparison in the
   write-up is reported, not used. Claims without a paired comparison over seeds (probes, analytic checks)
   name their primary measurement in words.
2. **Intervals that cover the seeds and the test data.** A paired difference `a − b` is computed per seed
   on the whole test region (seeds are paired: the same seed gives both arms the same initialisation and
   data order). Its interval is the Student-t interval over seeds; where the task scores its test region
   as K separate blocks (per-block sums, artifact `extrapolation/blocks.csv`), also a seed × block
   bootstrap (10,000 replicates; seeds and blocks drawn with replacement, the same block draw for every
   seed and arm, blocks kept whole), and the interval used is the **union** of the two (p-value: the
   larger). Every table says which ("Student t over 5 seeds" or "… ∪ seed × block bootstrap (K blocks)").
   Seeds: 5 by default (`CLAIM_SEEDS`); `ARGS=--quick` uses 3, half the training steps and leaves out the
   experiments marked `quick: false` (the real-data periodic ones), and the table says its verdicts are
   provisional.
3. **Holm–Bonferroni within each experiment.** All paired calls one experiment makes (the primary among
   them) are adjusted together; a difference is *called* only when its Holm-adjusted p is below 0.05, and
   its interval is shown at the level Holm tested it at (1 − 0.05/(m − rank)), so a called difference's
   interval always excludes 0. Direction is read from the interval's side of 0 — no rule reads a mean.
4. **Power before verdicts.** A trained claim's power is the gain over the task's trivial baseline at L₀
   divided by the half-width of that gain's 95 % interval, for the one of the primary's two arms where this
   ratio is larger (a testbed is powered when either arm is far from trivial: the other arm staying near
   trivial is then a measured failure, not noise; decided 2026-11-26 before the run it applies to — the
   earlier rule read arm `a` only and called claim 12 underpowered with sinusoidal at 1.000; trivial
   baselines: order-0 Markov chain = base composition for the DNA LM, chance = 0.5 for classifiers
   (AUROC) and the balanced order task, seasonal naive for the forecaster, majority class for
   segmentation). Below **10** — or not
   measured — the claim is **"inconclusive (underpowered)"**, never "no"; the rule's own verdict is shown
   beside it ("rule alone: …"). Claims that train nothing or measure an exact identity (7, 8, 10) are exempt
   and say so.
5. **Retained gain, guarded.** retained(L) = mean gain(L) / mean gain(L₀) (a ratio of means over seeds and
   blocks, not a mean of per-seed ratios), with a 95 % paired bootstrap interval (numerator and denominator
   resampled together). It is defined only when the gain at L₀ has its lower 95 % bound above 0 **and** above
   the minimum effect — 0.01 bits/base for the LM, 0.01 for accuracy and AUROC, 1 % of the trivial
   baseline's value for other metrics (MSE) (`MIN_EFFECT`, `MIN_RELATIVE_EFFECT`) — otherwise "undefined",
   with the reason. Beside it, at every length, the absolute paired difference from the no-position
   condition (NoPE, scheme `none`) where the experiment has one.
"""


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


def provenance(root: Path | None = None) -> str:
    """When and where a run finished: UTC time, CPU model and count, torch, and the git commit of
    ``root`` (``+ uncommitted changes`` when its tree differs; omitted outside a git checkout)."""
    import torch

    root = root or ROOT
    git = ["git", "-C", str(root)]
    try:
        sha = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
        commit = f", commit {sha}" + (" + uncommitted changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        commit = ""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"Run finished {when} on {cpu_model()} ({os.cpu_count()} CPUs), torch {torch.__version__}"
            f"{commit}.")


def summary_table(
    results: list[ClaimResult], wall: float, cpu: float, smoke: bool, factor: float = 1.0, threads: int = 1,
    quick: bool = False, jobs: int = 1, skipped: list[str] | None = None, where: str = "",
) -> str:
    """One row per claim — its power, its primary comparison (Holm-adjusted), its verdict, command
    and wall / CPU seconds — then the suite's totals and ``where`` (:func:`provenance`)."""
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
        f"\nSuite: {len(results)} experiment(s), {threads} torch thread(s), {jobs} worker process(es), "
        f"wall {wall:.0f} s, "
        f"CPU {cpu:.0f} s (idle estimate CPU / {factor} = {cpu / factor:.0f} s)"
        + (" — SMOKE RUN: tiny budgets, the numbers mean nothing" if smoke else "")
        + (f" — QUICK RUN: {QUICK_SEEDS} seeds instead of {len(CLAIM_SEEDS)}, {QUICK_STEPS:.0%} of the "
           "training steps" + (f", not run: {', '.join(skipped)}" if skipped else "")
           + "; verdicts provisional (an inconclusive one says nothing)" if quick else "")
        + "." + (f" {where}" if where else "") + "\n"
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
            "runner `python -m pipelines.studies.claims`), logged to MLflow experiment `posenc-claims` "
            "(one parent run per experiment, one child run per trained model). Each claim declares one "
            "primary comparison before the run; every paired call of an experiment is Holm-adjusted "
            "with the others and the verdict reads the primary one's interval; a trained claim whose "
            "power (gain over the trivial baseline at L₀ / half-width of its 95 % interval) is below "
            "10 is \"inconclusive (underpowered)\" (below: how a verdict is called). Budget, cost plan "
            "and `--jobs`: [claims_budget.md](claims_budget.md).\n",
            METHOD,
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
