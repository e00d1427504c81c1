"""The claims write-up is generated, never edited (issue 54): docs/claims.md and the claims block of
docs/results.md are what the generator writes from the run's stored results (docs/claims_results/), and
the primaries the docs name are the ones the configs declare."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipelines.studies.claims.base import ClaimResult
from pipelines.studies.claims.judge import Primary, parse_primary
from pipelines.studies.claims.render import BEGIN, END, STORED, SUITE, load, render_docs, store
from pipelines.studies.claims.runner import experiment_configs, read_config, write_docs
from tests.helpers import ROOT

DOCS = ROOT / "docs"


def declared() -> dict[str, Primary | str]:
    """Claim number → the primary its config declares."""
    return {str(read_config(p)["claim"]): parse_primary(read_config(p)["primary"], str(p))
            for p in experiment_configs().values()}


def fake_results(tmp_path: Path) -> list[ClaimResult]:
    fig = tmp_path / "made.png"
    fig.write_bytes(b"\x89PNG")
    one = ClaimResult(setup="s", measured="m 1.0 ± 0.1", holds="yes", rule="r", name="one", claim="A claim.",
                      number="1", short="a claim", primary="a − b at 32: +0.5 [0.4, 0.6], p_adj 0.01 (Holm "
                      "over 2)", gate="g", gate_failed="", command="make experiments ONLY=one", wall_s=1.0,
                      cpu_s=2.0, figures=[str(fig)], power=9.0)
    two = ClaimResult(setup="s", measured="m", holds="inconclusive", rule="r", name="two", claim="B.",
                      number="2", why="gate missed: too wide", raw_holds="yes", gate="g",
                      gate_failed="too wide", headline="what the data show",
                      command="make experiments ONLY=two", wall_s=1.0, cpu_s=1.0)
    return [one, two]


SUITE_ARGS = dict(wall=60.0, cpu=100.0, smoke=False, factor=1.9, threads=1, quick=False, jobs=2, skipped=[],
                  where="Run started 2026-01-01 00:00 UTC at commit abc1234.", pilot=None)


def test_the_write_up_round_trips_and_a_hand_edit_is_found(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "results.md").write_text(f"# Results\n\nabove\n\n{BEGIN}\nold table\n{END}\n\nbelow\n")
    write_docs(docs / "claims.md", fake_results(tmp_path), SUITE_ARGS)
    assert render_docs(docs / "claims.md", check=True) == []  # the run wrote what the generator writes
    assert (docs / STORED / SUITE).is_file() and (docs / "figures" / "claims_made.png").is_file()
    page = (docs / "results.md").read_text()
    assert "old table" not in page and page.startswith("# Results\n\nabove") and page.endswith("below\n")
    assert "| 2 | B. — the data: what the data show |" in page and "(rule alone: yes) (gate missed)" in page
    results, suite = load(docs / STORED)
    assert [r.name for r in results] == ["one", "two"] and results[0].figures == ["figures/claims_made.png"]
    assert "![one](figures/claims_made.png)" in (docs / "claims.md").read_text()
    edited = (docs / "claims.md").read_text().replace("**yes**", "**no**", 1)  # one line edited by hand
    (docs / "claims.md").write_text(edited)
    assert render_docs(docs / "claims.md", check=True) == [docs / "claims.md"]
    store(docs / "claims.md", results[:1], SUITE_ARGS)  # a later run with fewer experiments
    assert [r.name for r in load(docs / STORED)[0]] == ["one"]  # the earlier run's files are gone


def test_the_published_write_up_is_what_the_generator_writes_from_the_stored_run():
    """docs/claims.md and docs/results.md's claims block, regenerated from docs/claims_results/."""
    if not (DOCS / STORED / SUITE).is_file():
        pytest.skip("no stored published run yet: the next `make publish-claims` stores one (issue 54)")
    assert render_docs(DOCS / "claims.md", check=True) == []


def test_the_stored_run_judged_the_primaries_the_configs_declare():
    """Every config's claim has a stored result whose primary is the config's (each pair, its length): a
    config changed after the run, without a new published run, fails here."""
    if not (DOCS / STORED / SUITE).is_file():
        pytest.skip("no stored published run yet: the next `make publish-claims` stores one (issue 54)")
    results = {r.number: r for r in load(DOCS / STORED)[0]}
    want = declared()
    assert set(results) == set(want)
    for number, primary in want.items():
        if isinstance(primary, Primary):
            for a, b in primary.pairs():
                at = f" at {primary.length}:" if primary.length else " at "
                assert f"{a} − {b}{at}" in results[number].primary, number


def synthetic_rows() -> dict[str, str]:
    """docs/synthetic.md's "What uses them" table: claim number → its primary-comparison cell."""
    text = (DOCS / "synthetic.md").read_text()
    table = text[text.index("## What uses them"):]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.match(r"^\d+[a-z]? ", cells[0]):
            rows[cells[0].split()[0]] = cells[2]
    return rows


def test_the_primaries_docs_synthetic_md_names_are_the_configs():
    rows, want = synthetic_rows(), declared()
    assert len(rows) >= 15 and set(rows) <= set(want)
    for number, cell in rows.items():
        primary = want[number]
        text = primary.brief() if isinstance(primary, Primary) else primary.split(":")[0]
        assert text in cell, f"claim {number}: docs/synthetic.md says {cell!r}, the config {text!r}"


def test_no_page_keeps_a_retired_claims_rule():
    """The claims' old power gate (≥ 10) and the old 19a/19b rows appear on no documentation page."""
    for page in [*DOCS.glob("*.md"), ROOT / "README.md"]:
        if page.name == "claims.md":  # generated: it changes with the next published run only
            continue
        text = page.read_text()
        assert not re.search(r"claims (need|gate of|' gate of) (≥ )?10", text), page.name
        assert "both_sides_long" not in text, page.name
