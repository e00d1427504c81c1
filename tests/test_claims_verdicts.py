"""How the claims runner calls a verdict: the declared primary comparison, Holm over an experiment's
calls, the power gate in the table, the guarded retained gain — on synthetic measurements (no
training) and through the real runner with a real MLflow store."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.studies.claims.base import ClaimResult, Experiment
from pipelines.studies.claims.judge import Primary, parse_primary, primary_power
from pipelines.studies.claims.sweep import Measured, retained_table
from posenc import PosencError
from tests.helpers import workdir_with_store


class Underpowered(Experiment):
    """A stand-in claim that trains nothing but reports a small power (what a weak testbed gives)."""

    claim = "A stand-in claim measured on a weak testbed."

    def __init__(self, power: float = 3.0, holds: str = "no") -> None:
        self.power, self.holds = power, holds

    def run(self, ctx) -> ClaimResult:
        return ClaimResult(setup="synthetic", measured="gain 0.003 ± 0.001", holds=self.holds, rule="r",
                           power=self.power, power_text=f"power {self.power}", primary="a − b at L₀")


def measured(rng: np.random.Generator) -> Measured:
    """Bits/base of three conditions over 5 seeds at 64 and 128: ``good`` beats ``none`` by 0.05 at
    every length, ``same`` is ``none`` plus noise; the trivial baseline is 2.0."""
    m = Measured("bits_per_base", False, 64, [64, 128], baseline=2.0, baseline_name="order-0 Markov",
                 seeds=[0, 1, 2, 3, 4])
    none = {64: 1.95 + rng.normal(0, 0.002, 5), 128: 1.97 + rng.normal(0, 0.002, 5)}
    m.values = {"none": {n: list(v) for n, v in none.items()},
                "good": {n: list(v - 0.05 + rng.normal(0, 0.001, 5)) for n, v in none.items()},
                "same": {n: list(v + rng.normal(0, 0.002, 5)) for n, v in none.items()}}
    return m


def test_primary_is_parsed_or_refused_in_one_line():
    assert parse_primary({"a": "x", "b": "y"}, "c.yaml") == Primary("x", "y")
    assert parse_primary({"a": "x", "b": "y", "length": 128, "expect": "differ"}, "c.yaml").length == 128
    assert parse_primary("median R² of the fit", "c.yaml") == "median R² of the fit"
    for bad in ({"a": "x"}, {"a": "x", "b": "y", "length": 0}, {"a": "x", "b": "y", "expect": "up"}, 3):
        with pytest.raises(PosencError, match="c.yaml: primary"):
            parse_primary(bad, "c.yaml")


def test_measured_verdict_reads_the_primary_after_holm():
    m = measured(np.random.default_rng(0))
    pairs = [(c, "none", n) for c in ("good", "same") for n in (64, 128)]
    j = m.judge(pairs, Primary("good", "none"))
    assert j.primary.sign == 1 and j.primary.m == 4 and j.primary.p_adj >= j.primary.p
    assert Primary("good", "none").verdict(j.primary) == "yes"
    assert Primary("same", "none", expect="better").verdict(j.calls[("same", "none", 64)]) == "no"
    table = j.table("bits_per_base")
    assert "Holm–Bonferroni over the 4 defined of 4" in table and "(primary)" in table
    with_missing = m.judge([("same", "none", 128)], Primary("good", "none"))  # the primary is always a member
    assert ("good", "none", 64) in with_missing.calls and with_missing.primary.m == 2


def test_power_is_read_from_the_stronger_arm_of_the_primary():
    """Claim 12's case: arm a at the trivial baseline, arm b far above it — the testbed is powered (a's
    failure is measured), so the gate must not read a alone."""
    m = measured(np.random.default_rng(2))
    m.baseline = 1.951  # "none" (arm a below) now sits at the trivial baseline; "good" is 0.05 past it
    weak, strong = m.gain_at_train("none"), m.gain_at_train("good")
    arm, ratio, g = primary_power({"none": weak, "good": strong})
    assert arm == "good" and g is strong and ratio > 10
    assert primary_power({"none": weak, "good": None})[0] == "none"  # only one arm measured
    assert primary_power({"none": None}) is None


def test_power_and_guarded_retained_gain_of_measured():
    m = measured(np.random.default_rng(1))
    g = m.gain_at_train("good")
    assert g.mean == pytest.approx(0.1, abs=0.005) and "Student t over 5 seeds" == g.method
    r = m.retained_guarded("good", 128)
    assert r.defined and r.lo <= 0.8 <= r.hi  # gain 0.08 of 0.10 kept at 128 (truth 0.8)
    weak = m.retained_guarded("none", 128)
    assert weak.defined  # none's gain 0.05 > 0.01 with a tight interval
    m.baseline = 1.955  # now none's gain at L0 is ~0.005: below the 0.01 bits/base minimum effect
    assert not m.retained_guarded("none", 128).defined
    text = retained_table(m, ["condition", "64", "128"], "none")
    assert "undefined" in text and "Δ none -0.05" in text and "minimum effect" in text


def test_an_underpowered_claim_is_reported_inconclusive(tmp_path, monkeypatch):
    from pipelines.studies.claims.runner import run

    monkeypatch.setenv("POSENC_TRUSTED_MODULES", "tests")  # the stand-in claim lives in this module
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "weak.yaml").write_text(
        "claim: '1'\nprimary: {a: good, b: none}\nclass_path: tests.test_claims_verdicts.Underpowered\n"
        "init_args: {power: 3.0, holds: 'no'}\n")
    (folder / "strong.yaml").write_text(
        "claim: '2'\nprimary: {a: good, b: none}\nclass_path: tests.test_claims_verdicts.Underpowered\n"
        "init_args: {power: 12.0, holds: 'no'}\n")
    with workdir_with_store(tmp_path):
        results = run(["--configs", str(folder), "--out", "res", "--docs", "docs/claims.md", "--quick"])
    weak, strong = results
    assert (weak.holds, weak.raw_holds) == ("inconclusive (underpowered)", "no")
    assert strong.holds == "no"  # power 12 ≥ 10: the rule's verdict stands
    table = (tmp_path / "res/claims.md").read_text()
    assert "**inconclusive (underpowered)** (rule alone: no)" in table and "| 3 |" in table
    assert "QUICK RUN: 3 seeds instead of 5" in table and "power" in table.splitlines()[0]
    doc = (tmp_path / "docs/claims.md").read_text()
    assert "**Power.** power 3.0" in doc and "**Primary comparison.** a − b at L₀" in doc


def test_a_config_without_a_primary_is_refused_before_anything_runs(tmp_path, monkeypatch):
    from pipelines.studies.claims.runner import build

    monkeypatch.setenv("POSENC_TRUSTED_MODULES", "tests")
    bad = tmp_path / "bad.yaml"
    bad.write_text("claim: '1'\nclass_path: tests.test_claims_verdicts.Underpowered\n")
    with pytest.raises(PosencError, match="bad.yaml: no 'primary'"):
        build(bad)


def test_gate_leaves_exempt_claims_and_flags_unmeasured_power():
    from pipelines.studies.claims.runner import gated

    class Exact(Underpowered):
        power_exempt = "exact identity"

    r = ClaimResult(setup="", measured="", holds="yes", rule="")
    gated(r, Exact())
    assert r.holds == "yes" and r.power_text == "no power gate: exact identity"
    r = ClaimResult(setup="", measured="", holds="yes", rule="")
    gated(r, Underpowered())
    assert r.holds == "inconclusive (underpowered)" and r.power_text == "power not measured"
