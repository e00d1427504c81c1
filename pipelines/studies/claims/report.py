"""The claims table ("claim → setup → measured (mean ± CI) → holds?") and the per-experiment write-up."""

from __future__ import annotations

import math
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from pipelines.studies.claims.base import ClaimResult
from pipelines.studies.claims.changes import CHANGES
from pipelines.studies.claims.context import ROOT
from pipelines.studies.claims.judge import CLAIM_SEEDS, QUICK_SEEDS, QUICK_STEPS
from pipelines.studies.machine import cpu_model
from pipelines.studies.tables import md_table
from posenc import PosencError

#: the method section of the write-up (docs/claims.md), regenerated with it
METHOD = """\
## How a verdict is called

The rules are code (`pipelines/studies/verdicts.py`, `pipelines/studies/claims/judge.py`), fixed before a run:

1. **Rules declared before the run, in the configs.** Each config in `configs/experiments/` names at the
   top its primary comparison (`primary: {a, b, length, expect: better|worse|differ, min_effect}`;
   `length` omitted = the training length L₀; `min_effect` the smallest difference that matters, in the
   metric's units) and its gate (`gate:` below); the runner refuses a config without either and logs
   the primary on the experiment's parent run before anything trains. `a` or `b` may be a list: the
   primary is then the conjunction of every `a − b` pair (claim 19: each side useful; 19b: better than
   each single arm, i.e. than the best). The run records the commit at its **start**, refuses a tree with
   uncommitted changes (`--allow-dirty` runs a draft, marked "DRAFT (dirty tree)" at the top of the
   table), and checks commit and tree again after its last experiment: a tree that moved writes no docs.
   The published run (`make publish-claims`) runs from a git worktree pinned at its commit. This page
   and the claims block of `docs/results.md` are generated from the run's stored results
   (`docs/claims_results/`), never edited by hand (`tests/test_claims_docs.py`). Claims without a
   paired comparison over seeds (probes, analytic checks) name their primary measurement in words.
2. **Three-way verdicts.** Read from the primary comparison alone, after Holm: **yes** when it is called
   in the expected direction **and** its whole (Holm-level) interval is clear of ± the declared minimum
   effect — an effect that matters is shown, not only one above 0; **no** when the opposite direction is
   called, or when its whole interval lies within ± the minimum effect; **inconclusive** otherwise
   (not called with the interval past the margin, or called with the interval reaching inside it), with
   the reason printed. A conjunction is yes when every pair is, no when any is. Every other comparison
   in the write-up is reported, not used.
3. **Intervals that cover the seeds and the test data.** A paired difference `a − b` is computed per seed
   on the whole test region (seeds are paired: the same seed gives both arms the same initialisation and
   data order). Its interval is the Student-t interval over seeds; where the task scores its test region
   as K separate blocks (per-block sums, artifact `extrapolation/blocks.csv`), also a seed × block
   bootstrap (10,000 replicates; seeds and blocks drawn with replacement, the same block draw for every
   seed and arm, blocks kept whole), and the interval used is the **union** of the two (p-value: the
   larger). Every table says which ("Student t over 5 seeds" or "… ∪ seed × block bootstrap (K blocks)").
   Seeds: 5 by default (`CLAIM_SEEDS`); `ARGS=--quick` uses 3, half the training steps and leaves out the
   experiments marked `quick: false` (the real-data periodic ones and the 1,200-step retrieval family),
   and the table says its verdicts are provisional.
4. **Holm–Bonferroni within each experiment.** All paired calls one experiment makes (the primary among
   them) are adjusted together; a difference is *called* only when its Holm-adjusted p is below 0.05, and
   its interval is shown at the level Holm tested it at (1 − 0.05/(m − rank)), so a called difference's
   interval always excludes 0. Direction is read from the interval's side of 0 — no rule reads a mean.
5. **A gate, declared per claim.** **Every arm the primary compares** must beat the position-free
   control (NoPE, or the control the config names) at the gate's length (the primary's, or L₀ where
   the claim is about longer lengths): each arm's gain has its lower 95 % bound at or above the
   declared `min_gain`, and the weakest arm decides. An arm the claim itself predicts to carry no usable
   position (control periods, an untrained reference, the arm content is said to overwrite) is left out
   only by name, with the reason (`exclude`); a primary over pooled arms names its components (`arms`).
   Where declared (`baseline_gain`), every gated arm must also beat the task's trivial baseline (claim
   3c: seasonal naive). The primary's 95 % interval must be at most `max_width` wide (of a
   conjunction: its widest pair). A testbed that misses any of these (or did not measure it) makes the
   verdict **inconclusive** ("gate missed: …"), the rule's own verdict shown beside it. The power column
   is the weakest arm's gain / the half-width of its interval (reported, not thresholded). A claim with
   no position-free arm says why (`control: null`) and is gated on the width alone. Claims that train
   nothing or measure an exact identity (7, 8, 10) are exempt and say so.
6. **Retained gain, guarded.** retained(L) = mean gain(L) / mean gain(L₀) (a ratio of means over seeds and
   blocks, not a mean of per-seed ratios), with a 95 % paired bootstrap interval (numerator and denominator
   resampled together). It is defined only when the gain at L₀ has its lower 95 % bound above 0 **and** above
   the minimum effect — 0.01 bits/base for the LM, 0.01 for accuracy and AUROC, 1 % of the trivial
   baseline's value for other metrics (MSE) (`MIN_EFFECT`, `MIN_RELATIVE_EFFECT`) — otherwise "undefined",
   with the reason. Beside it, at every length, the absolute paired difference from the no-position
   condition (NoPE, scheme `none`) where the experiment has one.
"""


def power_cell(r: ClaimResult) -> str:
    """The claim's power over its position-free control (gain / half-width of its interval) and whether
    the declared gate passed, or why there is none."""
    if r.gate.startswith("no gate"):
        return "— (exempt)"
    ratio = "—" if r.power is None else "∞" if math.isinf(r.power) else f"{r.power:.3g}"
    return f"{ratio}; gate {'passed' if r.gate_failed == '' else 'missed'}"


def holds_cell(r: ClaimResult) -> str:
    """``**holds**``, with the rule's own verdict where the gate overrode it, and the reason of an
    inconclusive one."""
    out = f"**{r.holds}**"
    if r.raw_holds and r.raw_holds != r.holds:
        out += f" (rule alone: {r.raw_holds})"
    if r.holds == "inconclusive" and r.why:
        out += f" — {r.why}"
    return out


def git_state(root: Path | None = None, full: bool = False) -> tuple[str, bool]:
    """(short — ``full``: whole — commit of ``root``'s HEAD, whether its tree has changes — tracked or
    untracked, ignored files aside); ``("", False)`` outside a git checkout."""
    git = ["git", "-C", str(root or ROOT)]
    try:
        sha = subprocess.run(git + ["rev-parse", *([] if full else ["--short"]), "HEAD"], capture_output=True,
                             text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(git + ["status", "--porcelain"], capture_output=True, text=True,
                               timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "", False
    return sha, bool(dirty)


DRAFT = "DRAFT (dirty tree)"


def started(root: Path | None = None) -> str:
    """When and where a run started: UTC time and the git commit of ``root`` at that moment, marked
    :data:`DRAFT` when the tree had uncommitted changes (only ``--allow-dirty`` runs one)."""
    sha, dirty = git_state(root)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = (f" at commit {sha}" + (f" + uncommitted changes — {DRAFT}" if dirty else "")) if sha else ""
    return f"Run started {when}{commit}, load average {os.getloadavg()[0]:.2f}."


def provenance(start: str = "") -> str:
    """``start`` (:func:`started`, recorded before anything trained), then when the run finished and
    on what: UTC time, CPU model and count, torch."""

    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{start} Run finished {when} on {cpu_model()} ({os.cpu_count()} CPUs), torch "
            f"{torch.__version__}, load average {load} over the last 1 / 5 / 15 min (the run's own "
            "processes count in it).").strip()


def summary_table(
    results: list[ClaimResult], wall: float, cpu: float, smoke: bool, factor: float = 1.0, threads: int = 1,
    quick: bool = False, jobs: int = 1, skipped: list[str] | None = None, where: str = "",
    pilot: list[int] | None = None,
) -> str:
    """One row per claim — its power, its primary comparison (Holm-adjusted), its verdict, command
    and wall / CPU seconds — then the suite's totals and ``where`` (:func:`provenance`)."""
    head = ["#", "claim", "setup", "measured (mean ± 95 % CI over seeds)", "power",
            "primary comparison (Holm-adjusted)", "holds?", "command", "wall s / CPU s"]
    rows = [[r.number, r.claim, r.setup, r.measured, power_cell(r), r.primary or "—", holds_cell(r),
             f"`{r.command}`", f"{r.wall_s:.0f} / {r.cpu_s:.0f}"] for r in results]
    note = (
        f"\nSuite: {len(results)} experiment(s), {threads} torch thread(s), {jobs} worker process(es), "
        f"wall {wall:.0f} s, "
        f"CPU {cpu:.0f} s (idle estimate CPU / {factor} = {cpu / factor:.0f} s)"
        + (" — SMOKE RUN: tiny budgets, the numbers mean nothing" if smoke else "")
        + (f" — PILOT RUN on seeds {' '.join(map(str, pilot))}: sizing only, not a reported result"
           if pilot else "")
        + (f" — QUICK RUN: {QUICK_SEEDS} seeds instead of {len(CLAIM_SEEDS)}, {QUICK_STEPS:.0%} of the "
           "training steps" + (f", not run: {', '.join(skipped)}" if skipped else "")
           + "; verdicts provisional (an inconclusive one says nothing)" if quick else "")
        + "." + (f" {where}" if where else "") + "\n"
    )
    draft = f"**{DRAFT}: not a published run.**\n\n" if DRAFT in where else ""
    return draft + md_table(head, rows) + note


def claims_markdown(
    results: list[ClaimResult],
    figures_dir: Path | None,
    table: str | None = None,
    relative_to: Path | None = None,
    method: str = METHOD,
    changes: str = CHANGES,
) -> str:
    """The table (if given), preceded by the verdict rules (``method``) and what changed since the last
    published run (``changes``), and each experiment's details, figures linked relative to ``relative_to``."""
    parts = []
    if table is not None:
        parts += [
            "# Claims of the literature, measured\n",
            "Every row is one experiment of `make experiments` (configs in `configs/experiments/`, "
            "runner `python -m pipelines.studies.claims`), logged to MLflow experiment `posenc-claims` "
            "(one parent run per experiment, one child run per trained model). Each claim declares one "
            "primary comparison before the run; every paired call of an experiment is Holm-adjusted "
            "with the others and the verdict reads the primary one's interval: yes, no (the opposite "
            "called, or the interval within ± the declared minimum effect; a yes also needs the interval "
            "clear of it) or inconclusive (with the reason); a trained claim whose testbed misses its "
            "declared gate is inconclusive (below: how "
            "a verdict is called). Budget, cost plan "
            "and `--jobs`: [claims_budget.md](claims_budget.md).\n",
            method,
            changes,
            table,
        ]
    for r in results:
        parts.append(
            f"\n## {r.number}. {r.name}\n\n**Claim.** {r.claim}\n\n**Setup.** {r.setup}\n\n"
            f"**Measured.** {r.measured}\n\n**Primary comparison.** {r.primary or '—'}\n\n"
            f"**Power.** {r.power_text or 'not measured'}\n\n"
            f"**Gate.** {r.gate or 'none declared'} — "
            f"{'passed' if r.gate_failed == '' else r.gate_failed or 'not measured'}\n\n"
            f"**Holds?** {holds_cell(r).replace('**', '')} — rule: {r.rule}"
            + (f"\n\n**Why.** {r.why}" if r.why else "") + "\n\n"
            f"Command: `{r.command}` (wall {r.wall_s:.0f} s, CPU {r.cpu_s:.0f} s).\n\n{r.details}"
        )
        for f in r.figures:
            shown = os.path.relpath(f, relative_to) if relative_to is not None else f
            parts.append(f"\n![{r.name}]({shown})\n")
    return "\n".join(parts)


def refuse_dirty(args: Any) -> None:
    """A run that trains (not ``--smoke``, ``--plan``) from a tree with uncommitted changes is refused
    unless ``--allow-dirty`` (a draft): the rules a published run reads must be the committed ones."""
    if args.smoke or args.plan or args.allow_dirty:
        return
    sha, dirty = git_state()
    if dirty:
        raise PosencError(f"the tree at {sha} has uncommitted changes: a published run reads its rules "
                          "(primaries, minimum effects, gates, budgets) from a clean commit; commit them, or "
                          f"pass --allow-dirty for a draft (marked {DRAFT!r})")


def pinned_at_start(args: Any) -> str:
    """The commit the run starts at (``""`` outside git); ``--pinned``: refused unless it is that commit
    with a clean tree."""
    sha, dirty = git_state(ROOT, full=True)
    same = bool(sha) and (sha.startswith(args.pinned or "-") or (args.pinned or "").startswith(sha))
    if args.pinned and (not same or dirty):
        raise PosencError(f"--pinned {args.pinned}: this checkout ({ROOT}) is at {sha or 'no commit'}"
                          f"{' with uncommitted changes' if dirty else ''}; a published run starts from a "
                          "clean worktree at its recorded commit (make publish-claims)")
    return sha


def recheck(args: Any, sha0: str) -> None:
    """At the end of a run that may be published (not ``--smoke``, ``--plan``, ``--allow-dirty``): the
    checkout must still be at the commit it started at, with a clean tree; otherwise no docs are written."""
    if args.smoke or args.plan or args.allow_dirty:
        return
    sha, dirty = git_state(ROOT, full=True)
    if sha != sha0 or dirty:
        raise PosencError(f"the checkout {ROOT} changed during the run (started at {sha0 or 'no commit'}, "
                          f"now {sha or 'no commit'}{' with uncommitted changes' if dirty else ''}): its "
                          "results are not a published run and no docs were written; run it from a pinned "
                          "worktree (make publish-claims)")
