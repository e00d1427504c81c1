"""The claims write-up is generated, never edited: a run that writes docs (``--docs docs/claims.md``)
stores its results beside the write-up (``docs/claims_results/``: one JSON per experiment, in run order,
and ``suite.json`` with the run's totals, provenance and the verdict rules it ran under), then writes
``docs/claims.md`` — and the claims block of ``docs/results.md`` between its markers — from what it
stored. ``tests/test_claims_docs.py`` regenerates both from the stored results and compares.

Usage::

    python -m pipelines.studies.claims.render --docs docs/claims.md           # rewrite from stored results
    python -m pipelines.studies.claims.render --docs docs/claims.md --check   # exit 1 if they differ
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from pipelines.console import user_errors_exit
from pipelines.studies.claims.base import ClaimResult
from pipelines.studies.claims.changes import CHANGES
from pipelines.studies.claims.report import DRAFT, METHOD, claims_markdown, power_cell, summary_table
from pipelines.studies.tables import md_table
from posenc import PosencError

STORED = "claims_results"  # the folder beside the write-up that holds the run's results
SUITE = "suite.json"
BEGIN = "<!-- claims table: generated from docs/claims_results by the claims run; do not edit -->"
END = "<!-- end of the generated claims table -->"
TABLE_KEYS = ("wall", "cpu", "smoke", "factor", "threads", "quick", "jobs", "skipped", "where", "pilot")


def store(docs: Path, results: Sequence[ClaimResult], suite: dict[str, Any]) -> Path:
    """Write ``results`` (run order) and ``suite`` (:data:`TABLE_KEYS`, plus the rules text the run ran
    under) to ``docs.parent/claims_results``, replacing a previous run's files there."""
    folder = docs.parent / STORED
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    for i, r in enumerate(results):
        (folder / f"{i:02d}_{r.name}.json").write_text(json.dumps(asdict(r), indent=1, default=str) + "\n")
    meta = {k: suite[k] for k in TABLE_KEYS} | {"method": METHOD, "changes": CHANGES}
    (folder / SUITE).write_text(json.dumps(meta, indent=1) + "\n")
    return folder


def load(folder: Path) -> tuple[list[ClaimResult], dict[str, Any]]:
    """The stored results (run order) and suite of :func:`store`."""
    if not (folder / SUITE).is_file():
        raise PosencError(f"{folder}: no stored claims run ({SUITE} missing): run `make experiments "
                          "ARGS=\"--docs docs/claims.md\"` (published: make publish-claims)")
    known = {f.name for f in fields(ClaimResult)}
    results = []
    for path in sorted(folder.glob("[0-9][0-9]_*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not {"setup", "measured", "holds", "rule"} <= set(data):
            raise PosencError(f"{path}: not a stored claim result (setup, measured, holds, rule)")
        results.append(ClaimResult(**{k: v for k, v in data.items() if k in known}))
    return results, json.loads((folder / SUITE).read_text())


def claims_doc(results: Sequence[ClaimResult], suite: dict[str, Any]) -> str:
    """The text of ``docs/claims.md`` for a stored run."""
    table = summary_table(list(results), **{k: suite[k] for k in TABLE_KEYS})
    return claims_markdown(list(results), figures_dir=None, table=table, method=suite["method"],
                           changes=suite["changes"])


def brief_holds(r: ClaimResult) -> str:
    """The verdict and, for an inconclusive one, what kind."""
    moved = r.raw_holds and r.raw_holds != r.holds
    out = f"**{r.holds}**" + (f" (rule alone: {r.raw_holds})" if moved else "")
    if r.holds == "inconclusive":
        why = r.why or ""
        kind = ("gate missed" if why.startswith("gate missed") else
                "called, not clear of ±min effect" if "reaches inside" in why else
                "not called, CI past ±min effect" if "reaches past" in why else why.split(":")[0])
        out += f" ({kind})" if kind else ""
    return out


def results_block(results: Sequence[ClaimResult], suite: dict[str, Any]) -> str:
    """The claims section of ``docs/results.md`` (between :data:`BEGIN` and :data:`END`)."""
    rows = [[r.number, (r.short or r.claim.split(". ")[0]) + (f" — the data: {r.headline}" if r.headline
                                                                else ""),
             r.primary or "—", power_cell(r), brief_holds(r)] for r in results]
    draft = f"**{DRAFT}: not a published run.** " if DRAFT in suite["where"] else ""
    text = (
        f"{draft}{len(results)} experiments for the claims of the five source texts, one primary comparison "
        "per claim declared in its config before the run, Holm within each experiment, and three-way "
        "verdicts: \"yes\" when the claimed direction is called and the interval is clear of ± the claim's "
        "declared minimum effect, \"no\" when the opposite is called or the whole interval lies within it, "
        "\"inconclusive\" otherwise — also when the declared gate is missed (every arm the primary compares "
        "over the position-free control, and the primary's interval width; rules in [claims.md](claims.md)). "
        f"Generated by the run from its stored results (`docs/claims_results/`): {suite['where']} "
        f"`make experiments` with `--jobs {suite['jobs']}`: wall {suite['wall'] / 60:.1f} min, "
        f"{suite['cpu']:,.0f} CPU s "
        f"(idle estimate CPU / {suite['factor']} = {suite['cpu'] / suite['factor'] / 60:.1f} min). Each "
        "experiment runs alone with `make experiments ONLY=<name>`. Full tables, figures and the gate of "
        "every claim: [docs/claims.md](claims.md); budget: [docs/claims_budget.md](claims_budget.md); the "
        "synthetic testbeds: [docs/synthetic.md](synthetic.md). MLflow experiment `posenc-claims`.\n\n")
    head = ["#", "claim", "primary comparison (Holm-adjusted 95 % CI)", "power", "holds?"]
    return f"{BEGIN}\n{text}{md_table(head, rows)}{END}"


def with_block(page: str, block: str, where: str = "docs/results.md") -> str:
    """``page`` with the text between :data:`BEGIN` and :data:`END` replaced by ``block``."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise PosencError(f"{where}: needs one generated claims block ({BEGIN!r} … {END!r})")
    return page[:page.index(BEGIN)] + block + page[page.index(END) + len(END):]


def render_docs(docs: Path, check: bool = False) -> list[Path]:
    """Write (``check``: compare) ``docs`` and the claims block of ``results.md`` beside it from the
    stored run; returns the files that differ (``check``) or were written."""
    results, suite = load(docs.parent / STORED)
    want = {docs: claims_doc(results, suite)}
    page = docs.parent / "results.md"
    if page.is_file() and BEGIN in page.read_text():
        want[page] = with_block(page.read_text(), results_block(results, suite), str(page))
    changed = [p for p, text in want.items() if not p.is_file() or p.read_text() != text]
    if not check:
        for p in changed:
            p.write_text(want[p])
    return changed


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m pipelines.studies.claims.render",
                                description=__doc__.splitlines()[0])
    p.add_argument("--docs", default="docs/claims.md",
                   help="the write-up (its stored run: claims_results/ beside it)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the docs differ from the stored run")
    args = p.parse_args(argv)
    with user_errors_exit():
        changed = render_docs(Path(args.docs), args.check)
    for path in changed:
        print(f"{'differs from the stored run' if args.check else 'written'}: {path}")
    if args.check and changed:
        sys.exit(1)


if __name__ == "__main__":
    main()

