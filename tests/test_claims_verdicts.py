"""How the claims runner calls a verdict: the declared primary comparison and gate, Holm over an
experiment's calls, the three-way verdict and the gate in the table, the guarded retained gain — on
synthetic measurements (no training) and through the real runner with a real MLflow store."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.studies.claims.base import ClaimResult, Experiment
from pipelines.studies.claims.gates import Gate, measure_gate, parse_gate
from pipelines.studies.claims.judge import Primary, parse_primary
from pipelines.studies.claims.sweep import Measured, retained_table
from pipelines.studies.verdicts import gain
from posenc import PosencError
from tests.helpers import workdir_with_store


class Underpowered(Experiment):
    """A stand-in claim that trains nothing but reports its gate as a weak testbed would."""

    claim = "A stand-in claim measured on a weak testbed."

    def __init__(self, gate_failed: str = "gain too small", holds: str = "no") -> None:
        self.gate_failed, self.holds = gate_failed, holds

    def run(self, ctx) -> ClaimResult:
        return ClaimResult(setup="synthetic", measured="gain 0.003 ± 0.001", holds=self.holds, rule="r",
                           power=3.0, power_text="power 3.0", primary="a − b at L₀",
                           gate=ctx.gate.text(), gate_failed=self.gate_failed)


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


def test_primary_and_gate_are_parsed_or_refused_in_one_line():
    want = Primary("x", "y", min_effect=0.05)
    assert parse_primary({"a": "x", "b": "y", "min_effect": 0.05}, "c.yaml") == want
    got = parse_primary({"a": "x", "b": "y", "length": 128, "expect": "differ", "min_effect": 1}, "c.yaml")
    assert got.length == 128 and got.min_effect == 1.0
    assert parse_primary("median R² of the fit", "c.yaml") == "median R² of the fit"
    for bad in ({"a": "x"}, {"a": "x", "b": "y"}, {"a": "x", "b": "y", "min_effect": -1}, {"a": [], "b": "y",
                "min_effect": 0},
                {"a": "x", "b": "y", "length": 0, "min_effect": 0}, {"a": "x", "b": "y", "expect": "up"}, 3):
        with pytest.raises(PosencError, match="c.yaml: primary"):
            parse_primary(bad, "c.yaml")
    both = parse_primary({"a": ["x", "z"], "b": "y", "min_effect": 0.05}, "c.yaml")  # a conjunction
    assert both.pairs() == [("x", "y"), ("z", "y")] and both.labels() == ["x", "y", "z"]
    assert "x − y and z − y" in both.text() and "every one of" in both.rule()
    gate = parse_gate({"control": "nope", "min_gain": 0.2, "max_width": 0.5, "length": 32}, "c.yaml")
    assert gate == Gate(0.5, "nope", 0.2, 32) and "gain over nope ≥ 0.2" in gate.text()
    assert gate.gated(want) == ["x", "y"] and gate.gated(both) == ["x", "y", "z"]  # every arm compared
    left_out = parse_gate({"control": "nope", "min_gain": 0.2, "max_width": 0.5, "exclude": {"y": "by claim"},
                           "baseline_gain": 2000}, "c.yaml")
    assert left_out.gated(want) == ["x"] and "not gated: y (by claim)" in left_out.text(["x"])
    assert left_out.baseline_gain == 2000 and "trivial baseline ≥ 2000" in left_out.text(["x"])
    pooled = parse_gate({"control": "nope", "min_gain": 0.2, "max_width": 0.5, "arms": ["p", "q"]}, "c.yaml")
    assert pooled.gated(want) == ["p", "q"]
    assert parse_gate({"control": None, "why": "no NoPE arm", "max_width": 1}, "c.yaml").control is None
    for bad in ({"control": "nope", "max_width": 0.5}, {"control": None, "max_width": 1}, {"max_width": 1},
                {"control": "nope", "min_gain": 0.1, "max_width": "wide"},
                {"control": "nope", "min_gain": 0.1, "max_width": 1, "arm": "x"},  # the old single arm
                {"control": "nope", "min_gain": 0.1, "max_width": 1, "exclude": {"y": ""}},
                {"control": "nope", "min_gain": 0.1, "max_width": 1, "arms": "x"}):
        with pytest.raises(PosencError, match="c.yaml: gate"):
            parse_gate(bad, "c.yaml")


def test_measured_verdict_reads_the_primary_after_holm():
    m = measured(np.random.default_rng(0))
    pairs = [(c, "none", n) for c in ("good", "same") for n in (64, 128)]
    j = m.judge(pairs, Primary("good", "none"))
    assert j.primary.sign == 1 and j.primary.m == 4 and j.primary.p_adj >= j.primary.p
    assert Primary("good", "none").verdict(j.primary)[0] == "yes"
    assert Primary("good", "none", expect="worse").verdict(j.primary)[0] == "no"  # the opposite is called
    same = j.calls[("same", "none", 64)]  # not called, interval within ±0.01 bits
    assert Primary("same", "none", min_effect=0.01).verdict(same)[0] == "no"
    verdict, why = Primary("same", "none", min_effect=0.0001).verdict(same)
    assert verdict == "inconclusive" and "reaches past ±0.0001" in why
    table = j.table("bits_per_base")
    assert "Holm–Bonferroni over the 4 defined of 4" in table and "(primary)" in table
    with_missing = m.judge([("same", "none", 128)], Primary("good", "none"))  # the primary is always a member
    assert ("good", "none", 64) in with_missing.calls and with_missing.primary.m == 2


def test_the_gate_reads_every_arm_and_the_weaker_one_decides():
    """Made-up numbers in which only the weaker arm misses: ``good`` is far past the control, ``same`` sits at
    it. Gated on ``good`` alone the testbed passes; over both arms the primary compares (good − same) it
    fails, and the reason names ``same`` only (claim 4a's case: a half-trained sinusoid beside RoPE)."""
    m = measured(np.random.default_rng(2))
    primary = m.stat("good", "same", 64)
    r = ClaimResult(setup="", measured="", holds="yes", rule="")
    gate = Gate(0.5, "none", 0.04)
    measure_gate(r, gate, {"good": _gain(m, "good", "none")}, primary)
    assert r.gate_failed == "" and r.power > 10 and "gain of good over none" in r.power_text
    arms = Primary("good", "same").labels()
    measure_gate(r, gate, {a: _gain(m, a, "none") for a in gate.gated(Primary("good", "same"))}, primary)
    assert arms == ["good", "same"] and "the gain of same over none" in r.gate_failed
    assert "good over" not in r.gate_failed and "lower bound below 0.04" in r.gate_failed
    assert "gain of same over none" in r.power_text and "the weakest of 2 arms" in r.power_text
    measure_gate(r, Gate(0.001, "none", 0.04), {"good": _gain(m, "good", "none")}, primary)
    assert "wider than 0.001" in r.gate_failed
    measure_gate(r, gate, {"good": _gain(m, "good", "none"), "same": None}, primary)
    assert r.gate_failed == "the gain of same over none not measured"
    measure_gate(r, Gate(0.5, None, 0.0, why="no NoPE arm"), {}, primary)
    assert r.gate_failed == ""  # no control declared: the width alone


def test_the_gate_against_the_trivial_baseline_reads_every_gated_arm():
    """Claim 3c's second gate: each gated arm over the task's trivial baseline (seasonal naive there)."""
    m = measured(np.random.default_rng(3))  # trivial 2.0; good ≈ 1.90, none ≈ 1.95
    gate = Gate(0.5, "same", 0.0, baseline_gain=0.08)
    r = ClaimResult(setup="", measured="", holds="yes", rule="")
    trivial = {a: gain(m.arm(a, 64), m.trivial_arm(), False) for a in ("good", "none")}
    measure_gate(r, gate, {"good": _gain(m, "good", "same"), "none": _gain(m, "none", "same")},
                 m.stat("good", "none", 64), trivial, baseline_name="order-0 Markov")
    assert "the gain of none over order-0 Markov" in r.gate_failed
    assert "good over order-0" not in r.gate_failed


def test_a_conjunction_of_primaries_is_yes_only_when_every_member_is():
    m = measured(np.random.default_rng(4))
    both = Primary("good", "none", more=(("same", "none"),), min_effect=0.01)
    j = m.judge([], both)
    assert j.primary_keys == [("good", "none", 64), ("same", "none", 64)]
    verdict, why = both.verdict(j.primary_calls)
    assert verdict == "no" and why.startswith("same − none")  # same is within ±0.01 of none: no
    assert both.verdict([j.primary_calls[0]] * 2)[0] == "yes"
    assert both.verdict([j.primary_calls[0], None])[0] == "inconclusive"
    assert "good − none at 64" in j.summary() and "same − none at 64" in j.summary()


def _gain(m: Measured, arm: str, control: str):
    return gain(m.arm(arm, 64), m.arm(control, 64), m.higher_is_better)


def test_power_and_guarded_retained_gain_of_measured():
    m = measured(np.random.default_rng(1))
    g = gain(m.arm("good", 64), m.trivial_arm(), False)
    assert g.mean == pytest.approx(0.1, abs=0.005) and "Student t over 5 seeds" == g.method
    r = m.retained_guarded("good", 128)
    assert r.defined and r.lo <= 0.8 <= r.hi  # gain 0.08 of 0.10 kept at 128 (truth 0.8)
    weak = m.retained_guarded("none", 128)
    assert weak.defined  # none's gain 0.05 > 0.01 with a tight interval
    m.baseline = 1.955  # now none's gain at L0 is ~0.005: below the 0.01 bits/base minimum effect
    assert not m.retained_guarded("none", 128).defined
    text = retained_table(m, ["condition", "64", "128"], "none")
    assert "undefined" in text and "Δ none -0.05" in text and "minimum effect" in text


def test_a_claim_that_misses_its_gate_is_reported_inconclusive_with_the_reason(tmp_path, monkeypatch):
    from pipelines.studies.claims.runner import run

    monkeypatch.setenv("POSENC_TRUSTED_MODULES", "tests")  # the stand-in claim lives in this module
    folder = tmp_path / "configs"
    folder.mkdir()
    head = ("primary: {a: good, b: none, min_effect: 0.01}\n"
            "gate: {control: none, min_gain: 0.1, max_width: 1}\n"
            "class_path: tests.test_claims_verdicts.Underpowered\n")
    weak = "init_args: {gate_failed: gain too small, holds: 'no'}\n"
    (folder / "weak.yaml").write_text(f"claim: '1'\n{head}{weak}")
    (folder / "strong.yaml").write_text(f"claim: '2'\n{head}init_args: {{gate_failed: '', holds: 'no'}}\n")
    with workdir_with_store(tmp_path):
        results = run(["--configs", str(folder), "--out", "res", "--docs", "docs/claims.md", "--quick",
                       "--allow-dirty"])
    weak, strong = results
    assert (weak.holds, weak.raw_holds, weak.why) == ("inconclusive", "no", "gate missed: gain too small")
    assert strong.holds == "no"  # the gate passed: the rule's verdict stands
    table = (tmp_path / "res/claims.md").read_text()
    assert "**inconclusive** (rule alone: no) — gate missed: gain too small" in table
    assert "3; gate missed" in table and "3; gate passed" in table
    head = next(line for line in table.splitlines() if line.startswith("| # |"))
    assert "QUICK RUN: 3 seeds instead of 5" in table and "power" in head
    doc = (tmp_path / "docs/claims.md").read_text()
    assert "**Power.** power 3.0" in doc and "**Primary comparison.** a − b at L₀" in doc
    assert "**Gate.** gain over none ≥ 0.1" in doc


def test_a_config_without_a_primary_is_refused_before_anything_runs(tmp_path, monkeypatch):
    from pipelines.studies.claims.runner import build

    monkeypatch.setenv("POSENC_TRUSTED_MODULES", "tests")
    bad = tmp_path / "bad.yaml"
    bad.write_text("claim: '1'\nclass_path: tests.test_claims_verdicts.Underpowered\n")
    with pytest.raises(PosencError, match="bad.yaml: no 'primary'"):
        build(bad)
    bad.write_text("claim: '1'\nprimary: {a: good, b: none, min_effect: 0.01}\n"
                   "class_path: tests.test_claims_verdicts.Underpowered\n")
    with pytest.raises(PosencError, match="bad.yaml: no 'gate'"):
        build(bad)


def test_gate_leaves_exempt_claims_and_flags_an_unmeasured_gate():
    from pipelines.studies.claims.runner import gated

    class Exact(Underpowered):
        power_exempt = "exact identity"

    r = ClaimResult(setup="", measured="", holds="yes", rule="")
    gated(r, Exact())
    assert r.holds == "yes" and r.gate == "no gate: exact identity"
    r = ClaimResult(setup="", measured="", holds="yes", rule="")
    gated(r, Underpowered())
    assert r.holds == "inconclusive" and r.why == "gate missed: the gate was not measured"


def test_a_pooled_primary_keeps_its_time_blocks():
    """Claim 4b: relative (mean) − absolute (mean) gets the seed × time-block bootstrap, like any arm."""
    from pipelines.studies.claims.trained import pool, pooled_blocks

    rng = np.random.default_rng(5)
    m = Measured("mse", False, 96, [96], seeds=[0, 1, 2])
    counts = np.full(4, 6.0)  # 4 blocks of 6 windows, the same for every arm
    for arm, level in (("rope", 100.0), ("alibi", 110.0), ("sinusoidal", 150.0), ("learned", 170.0)):
        blocks = [np.stack([counts * (level + rng.normal(0, 5, 4)), counts], axis=1) for _ in m.seeds]
        m.blocks[arm] = {96: blocks}
        m.values[arm] = {96: [float(b[:, 0].sum() / b[:, 1].sum()) for b in blocks]}
    pool(m, "relative (mean)", ["rope", "alibi"])
    pool(m, "absolute (mean)", ["sinusoidal", "learned"])
    arm = m.arm("relative (mean)", 96)
    assert arm.n_blocks == 4 and np.allclose(arm.values(), m.values["relative (mean)"][96])
    stat = m.stat("relative (mean)", "absolute (mean)", 96)
    assert "seed × block bootstrap (4 blocks)" in stat.method and stat.mean == pytest.approx(-55, abs=10)
    assert pooled_blocks((m.blocks["rope"][96][0], None)) is None  # an arm without blocks: no pooled blocks
    other = np.stack([np.full(4, 7.0) * 100, np.full(4, 7.0)], axis=1)  # other counts: not the same blocks
    assert pooled_blocks((m.blocks["rope"][96][0], other)) is None
