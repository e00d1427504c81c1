"""``python -m pipelines.studies.compare``: seeds by default, statistics read back from MLflow (means with
Student-t intervals, paired differences and their calls, retained gain), finished children reused,
fair setups (comparison overrides), skipped schemes."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipelines.eval.extrapolation import TRAINED
from pipelines.studies.compare.runs import ChildRun, TaskInfo
from tests.helpers import store_client, workdir_with_store, write_fasta

ROOT = Path(__file__).resolve().parents[1]
T975_DF2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # Student t, 2 degrees of freedom, closed form


# ----------------------------------------------------------------------------- statistics, by hand
def hand_children() -> list[ChildRun]:
    """Four schemes × seeds 0 1 2 of a lower-is-better loss at 10 (= L₀), 20, 40; trivial baseline 2.0."""
    info = TaskInfo("toy", "loss", False, 10, [10, 20, 40], "tokens", "position", "coin")
    curves = {
        "A": [(1.0, 1.0, 1.5), (1.1, 1.1, 1.55), (1.2, 1.2, 1.6)],  # keeps half its gain at 40
        "B": [(0.88, 1.1, 2.0), (1.0, 1.0, 2.1), (1.12, 1.3, 2.2)],  # −0.1 at 10, ±0.1 at 20, worse at 40
        "C": [(2.05, 2.0, 2.0), (1.98, 2.0, 2.0), (2.1, 2.0, 2.0)],  # no better than the baseline
        "D": [(1.9, 1.9, 1.9), (2.05, 2.0, 2.0), (1.95, 2.0, 2.0)],  # a gain the seeds cannot separate from 0
    }
    return [ChildRun(s, seed, f"{s}{seed}", "trained", trivial=2.0, info=info,
                     curves={TRAINED: dict(zip(info.lengths, per_seed[seed], strict=True))})
            for seed in range(3) for s, per_seed in curves.items()]


def t2_p(t: float) -> float:
    """Two-sided p-value of Student t with 2 degrees of freedom (closed form: 1 − |t|/√(2 + t²))."""
    return 1 - abs(t) / math.sqrt(2 + t * t)


def test_statistics_of_a_comparison_against_hand_computed_values(tmp_path):
    from pipelines.studies.compare.report import markdown, write_csvs
    from pipelines.studies.compare.stats import compare

    cmp = compare(hand_children(), reference="A")
    a, b, c, d = cmp.rows
    assert [r.label for r in cmp.rows] == ["A", "B", "C", "D"] and cmp.seeds == [0, 1, 2]
    # A at 10: 1.0 1.1 1.2 → mean 1.1, s = 0.1, half-width t·s/√3
    assert a.metric[10].mean == pytest.approx(1.1)
    assert a.metric[10].half == pytest.approx(T975_DF2 * 0.1 / 3**0.5)
    # B − A per seed at 10: −0.12 −0.10 −0.08 → mean −0.1, s = 0.02, t = −5√3
    assert b.diff[10].mean == pytest.approx(-0.1)
    assert b.diff[10].half == pytest.approx(T975_DF2 * 0.02 / 3**0.5)
    # Holm over the 9 calls (B, C, D × 3 lengths): B at 10 has the 8th smallest p; its adjusted p is
    # 2·p (the running maximum of the 7 smaller ones, 5·p(C at 20) ≈ 0.020, is below it); it is tested at
    # level 1 − 0.05/2, where t(0.9875, 2) = 0.975/√(2·0.9875·0.0125)
    assert b.holm[10].p == pytest.approx(t2_p(5 * 3**0.5))
    assert b.holm[10].p_adj == pytest.approx(2 * t2_p(5 * 3**0.5)) and b.holm[10].m == 9
    half = 0.975 / math.sqrt(2 * 0.9875 * 0.0125) * 0.02 / 3**0.5
    assert (b.holm[10].lo, b.holm[10].hi) == pytest.approx((-0.1 - half, -0.1 + half))
    assert b.calls == {10: 1, 20: 0, 40: -1} and a.diff[10] is None  # +0.1 −0.1 +0.1 at 20: not called
    # gain over 2.0 at L0: A 1.0 0.9 0.8 (power 0.9 / (t·0.1/√3)); retained gain = ratio of mean gains:
    # A keeps exactly half at 40 on every seed → [0.5, 0.5], ratio 20; B keeps 2.6/3.0 < 0.9 at 20
    assert a.gain.mean == pytest.approx(0.9) and a.power == pytest.approx(0.9 / (T975_DF2 * 0.1 / 3**0.5))
    assert (a.retained[40].mean, a.retained[40].lo, a.retained[40].hi) == pytest.approx((0.5, 0.5, 0.5))
    assert a.ratio == 20 and b.ratio == 10 and b.retained[20].mean == pytest.approx(2.6 / 3.0)
    # C (gain −0.043) and D (gain 0.033, interval holds 0): retained gain undefined, the guard says why
    assert c.ratio is None and "minimum effect 0.02" in c.no_ratio and not c.retained[20].defined
    assert d.ratio is None and d.gain.interval()[0] < 0 < d.gain.mean
    md = markdown(cmp)
    assert "| A | 3 | 1.1000 ± 0.2484 |" in md and "Holm–Bonferroni over the 9 calls" in md
    b_line = next(line for line in md.splitlines() if line.startswith("| B | -0.1000 ["))
    assert [sym for sym in "▲·▼" if sym in b_line] == ["▲", "·", "▼"]
    assert b_line.index("▲") < b_line.index("·") < b_line.index("▼") and "p_adj 0.026" in b_line
    assert ("| A | +0.9000 [+0.6516, +1.1484] | 3.62 | 1.00 [1.00, 1.00] | 0.50 [0.50, 0.50] | 2× (L=20) |"
            in md)
    wide = pd.read_csv(write_csvs(cmp, tmp_path)[0]).set_index("scheme")
    assert wide.loc["B", "diff_L10"] == pytest.approx(-0.1) and wide.loc["B", "call_L40"] == -1
    assert wide.loc["B", "p_holm_L10"] == pytest.approx(2 * t2_p(5 * 3**0.5))
    assert wide.loc["A", "lo_L10"] == pytest.approx(1.1 - T975_DF2 * 0.1 / 3**0.5)
    assert wide.loc["A", "max_length"] == 20 and wide.loc["C", "no_ratio"].startswith("gain over the trivial")


def test_every_row_shows_its_paired_difference_from_nope(tmp_path):
    from pipelines.studies.compare.report import markdown
    from pipelines.studies.compare.stats import compare

    children = hand_children()
    for child in children:
        child.scheme = "none" if child.scheme == "A" else child.scheme
    cmp = compare(children, reference="B")  # the reference is not NoPE: Δ none is still shown
    none, b = cmp.rows[0], cmp.rows[1]
    assert none.nope == {10: None, 20: None, 40: None}
    assert b.nope[10].mean == pytest.approx(-0.1) and b.nope[40].mean == pytest.approx(0.55)
    b_line = next(line for line in markdown(cmp).splitlines() if line.startswith("| B | +1.0000"))
    assert "; Δ none +0.0333 [" in b_line and "; Δ none +0.5500 [" in b_line


def test_block_sums_round_trip_through_mlflow(tmp_path):
    import numpy as np

    from pipelines.eval.extrapolation import Extrapolation, LengthResult
    from pipelines.eval.report import write_tables
    from pipelines.studies.compare.runs import _blocks

    blocks = np.array([[10.0, 5.0], [12.0, 6.0], [7.5, 4.0]])  # (K, 2) bits and bases per block
    result = Extrapolation("dna_lm", "bits_per_base", False, 10, "tokens", "position", "rope",
                           trivial=2.0, trivial_name="order-0 Markov", trivial_blocks=blocks * [1.1, 1.0])
    result.cells = [LengthResult(TRAINED, 10, float(blocks[:, 0].sum() / blocks[:, 1].sum()), blocks=blocks),
                    LengthResult(TRAINED, 20, None, status="undefined")]
    written = write_tables(result, tmp_path / "out")
    assert (tmp_path / "out" / "blocks.csv") in written
    client = store_client(tmp_path)
    run = client.create_run(client.create_experiment("blocks")).info.run_id
    client.log_artifacts(run, str(tmp_path / "out"), "extrapolation")
    found, trivial = _blocks(client, ChildRun("rope", 0, run, "trained"))
    assert np.array_equal(found[TRAINED][10], blocks) and 20 not in found[TRAINED]
    assert np.allclose(trivial, blocks * [1.1, 1.0])
    empty = client.create_run(client.get_experiment_by_name("blocks").experiment_id).info.run_id
    assert _blocks(client, ChildRun("rope", 0, empty, "trained")) == ({}, None)  # older runs: no blocks


# ----------------------------------------------------------------------------- fair setups
def test_comparison_overrides_give_learned_exactly_the_trained_positions():
    from pipelines.studies.compare.run import overrides

    dna, ts = ROOT / "configs/compare_dna_lm.yaml", ROOT / "configs/compare_ts.yaml"
    assert overrides([str(dna)], "learned") == [ROOT / "configs/compare_dna_lm_learned.yaml"]
    assert overrides([str(ts)], "periodic_rope") == [ROOT / "configs/compare_ts_periodic_rope.yaml"]
    assert overrides([str(dna)], "rope") == []

    def max_len(path: Path) -> int:
        return yaml.safe_load(path.read_text())["model"]["init_args"]["pe"]["init_args"]["max_len"]

    from datamodules import DNADataModule, TimeSeriesDataModule
    from tests.helpers import flatten

    data = flatten(yaml.safe_load(dna.read_text())["data"]["init_args"], DNADataModule)
    assert max_len(ROOT / "configs/compare_dna_lm_learned.yaml") == data["seq_len"]
    data = flatten(yaml.safe_load(ts.read_text())["data"]["init_args"], TimeSeriesDataModule)  # + the query
    assert max_len(ROOT / "configs/compare_ts_learned.yaml") == data["lookback"] // data["patch_len"] + 1


def test_child_key_ignores_summary_options_but_not_the_setup(tmp_path):
    from pipelines.studies.compare.runs import child_key

    def layer(name: str, **init_args) -> Path:
        cfg = {"data": {"init_args": {"seq_len": 64}}, "trainer": {"callbacks": [
            {"class_path": "pipelines.ExtrapolationEval", "init_args": {"factors": [1, 2], **init_args}}]}}
        (tmp_path / name).write_text("# a comment\n" + yaml.safe_dump(cfg))
        return tmp_path / name

    base = child_key([layer("a.yaml")], [])
    assert child_key([layer("b.yaml", tolerance=0.05, retain=0.8, baselines=True)], []) == base
    assert child_key([layer("c.yaml", factors=[1, 4])], []) != base
    assert child_key([layer("a.yaml")], [{"class_path": "x"}]) != base


# ----------------------------------------------------------------------------- tiny runs
def tiny_overlay(tmp: Path) -> Path:
    """compare_dna_lm.yaml shrunk to seconds: synthetic genome, tiny model, a few steps, 1×–4×; no model
    registered (the comparison never reads the registry: ~1 CPU s per child saved)."""
    fasta = write_fasta(tmp / "g.fa", n=8000)
    cfg = {
        "trainer": {"max_epochs": 1, "limit_val_batches": 2},
        "register": {"register": False},
        "model": {"init_args": {"d_model": 16, "n_heads": 2, "n_layers": 1}},
        "data": {
            "init_args": {
                "fasta": str(fasta),
                "seq_len": 32,
                "batch_size": 4,
                "samples_per_epoch": 16,
                "eval_lengths": [32, 64, 128],
                "eval_tokens": 256,
            }
        },
    }
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def compare_args(tmp: Path, *extra: str) -> list[str]:
    return ["--config", str(ROOT / "configs/compare_dna_lm.yaml"), "--config", str(tmp / "tiny.yaml"),
            "--factors", "1", "2", *extra]


def parents_and_children(tmp: Path):
    c = store_client(tmp)
    runs = c.search_runs([c.get_experiment_by_name("posenc-compare").experiment_id])
    parents = sorted((r for r in runs if r.data.tags.get("posenc.compare") == "parent"),
                     key=lambda r: r.info.start_time)
    children = [r for r in runs if r.data.tags.get("posenc.compare") != "parent"]
    return c, parents, children


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """Default seeds for alibi, rope and a scheme the task cannot build (6 tiny children), whose sweeps
    skip ``extrapolation.png`` (``POSENC_FIGURES=0``: ~1 CPU s each; test_extrapolation checks the
    figure); the comparison's own figures are drawn."""
    from pipelines.studies.compare.run import main

    tmp = tmp_path_factory.mktemp("compare")
    tiny_overlay(tmp)
    broken = tmp / "broken.yaml"
    broken.write_text(yaml.safe_dump({"model": {"init_args": {"pe": {
        "class_path": "posenc.Learned", "init_args": {"max_len": 0}}}}}))
    with workdir_with_store(tmp), pytest.MonkeyPatch.context() as mp:
        mp.setenv("POSENC_FIGURES", "0")
        main(compare_args(tmp, "--schemes", "alibi", "rope", str(broken), "--out", "first"))
    return tmp


@pytest.fixture(scope="module")
def compared_again(compared):
    """Then rope again with 4 seeds, in the same store (one more child)."""
    from pipelines.studies.compare.run import main

    with workdir_with_store(compared):
        main(compare_args(compared, "--schemes", "rope", "--seeds", "0", "1", "2", "3", "--out", "second"))
    return compared


def test_compare_runs_three_paired_seeds_by_default_and_shows_ci_and_calls(compared):
    c, parents, children = parents_and_children(compared)
    first = parents[0].info.run_id
    mine = [r for r in children if r.data.tags["mlflow.parentRunId"] == first]
    pairs = sorted((r.data.tags["posenc.compare.scheme"], r.data.tags["posenc.compare.seed"]) for r in mine)
    assert pairs == [(s, str(seed)) for s in ("alibi", "rope") for seed in range(3)]  # broken: never trained
    for r in mine:  # swept at every length (step = length), marked complete, and the trivial baseline beside
        steps = [m.step for m in c.get_metric_history(r.info.run_id, "extrapolation/bits_per_base_by_length")]
        assert steps == [32, 64] and r.data.tags["posenc.compare.complete"] == "true"
        assert "extrapolation/trivial_baseline" in r.data.metrics
    # the (slower) reference baselines: scored once, by the first child trained, shown in the table
    assert sum("extrapolation/baseline/markov_best" in r.data.metrics for r in mine) == 1
    assert {a.path for a in c.list_artifacts(first)} >= {
        "comparison.md", "comparison.csv", "comparison_long.csv", "comparison.png"}
    md = (compared / "first" / "comparison.md").read_text()
    assert "Seeds 0 1 2" in md and "95 % Student-t" in md and "; markov_best " in md
    assert "| alibi | 3 | " in md and " ± " in md.split("| alibi | 3 | ")[1].splitlines()[0]
    assert "#### Difference from `alibi`" in md and "| rope+yarn | " in md
    rope_diff = next(line for line in md.splitlines() if line.startswith("| rope | +") or
                     line.startswith("| rope | -"))
    assert any(sym in rope_diff for sym in "▲▼·")
    assert "#### Retained gain over the trivial baseline (order-0 Markov)" in md
    assert ("Skipped (the task cannot run them): `broken`: Learned max_len must be a positive integer, "
            "got 0") in md
    table = pd.read_csv(compared / "first" / "comparison.csv")
    # the study config's variants: every scheme with a local window of L0, RoPE with PI / NTK / YaRN
    assert list(table.scheme) == ["alibi", "alibi+window", "rope", "rope+pi", "rope+ntk", "rope+yarn",
                                  "rope+window"]
    assert table[["mean_L32", "lo_L32", "hi_L32", "mean_L64"]].notna().all().all()
    assert (table.lo_L32 < table.mean_L32).all() and (table.mean_L32 < table.hi_L32).all()
    steps = [m.step for m in c.get_metric_history(first, "rope/yarn/bits_per_base_by_length")]
    assert steps == [32, 64] and c.get_run(first).info.status == "FINISHED"
    skipped = c.get_run(first).data.tags["posenc.compare.skipped"]
    assert "broken: Learned max_len must be a positive integer" in skipped


@pytest.mark.slow  # one more tiny child and a second report (~6 CPU s); fast twin: test_sweep's
# test_a_second_call_with_the_same_key_reuses_the_finished_child (the reuse the comparison relies on)
def test_more_seeds_train_only_the_new_ones(compared_again):
    compared = compared_again
    c, parents, children = parents_and_children(compared)
    second = parents[1].info.run_id
    trained = sorted(r.data.tags["posenc.compare.seed"] for r in children
                     if r.data.tags["mlflow.parentRunId"] == second)
    assert trained == ["3"]  # seeds 0 1 2 of rope were finished by the first comparison
    long_ = pd.read_csv(compared / "second" / "comparison_long.csv")
    sources = long_[long_.variant == TRAINED].groupby("seed").source.first().to_dict()
    assert sources == {0: "reused", 1: "reused", 2: "reused", 3: "trained"}
    md = (compared / "second" / "comparison.md").read_text()
    assert "Seeds 0 1 2 3:" in md and "| rope | 4 | " in md
    assert "Runs: 1 trained now, 3 reused" in md


def test_bad_options_fail_before_any_run(tmp_path, capsys):
    from pipelines.studies.compare.run import main

    for argv, msg in (
        (["--schemes", "rope", "ropee"], "unknown scheme 'ropee'"),
        (["--schemes", "rope", "alibi", "--reference", "none"], "--reference 'none' is not among --schemes"),
        (["--schemes", "rope", "--seeds", "0", "0"], "--seeds lists a seed twice"),
        (["--schemes", "rope", "--retain", "0"], "retain must be in (0, 1]"),
    ):
        with workdir_with_store(tmp_path), pytest.raises(SystemExit) as exc:
            main(["--config", str(ROOT / "configs/compare_dna_lm.yaml"), *argv])
        assert exc.value.code == 2
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists() or not store_client(tmp_path).search_experiments(
        filter_string="name = 'posenc-compare'"
    )
    assert os.getcwd() != str(tmp_path)


def test_children_with_block_sums_get_the_block_bootstrap_in_every_interval():
    import numpy as np

    from pipelines.studies.compare.stats import compare

    children = hand_children()
    counts = np.array([3.0, 5.0, 2.0, 4.0])  # bases per block, the same test blocks for every child
    shape = np.array([1.1, 0.9, 1.05, 0.95])  # per-block difficulty (count-weighted mean 0.993…)
    for c in children:  # per-block sums whose ratio gives exactly the logged metric
        curve = c.curves[TRAINED]
        c.blocks = {TRAINED: {n: np.c_[v * shape * counts * (counts.sum() / (shape * counts).sum()), counts]
                              for n, v in curve.items()}}
        c.trivial_blocks = np.c_[2.0 * counts, counts]
    cmp = compare(children, reference="A")
    b = cmp.rows[1]
    stat = b.holm[10].stat
    assert stat.replicates is not None and "seed × block bootstrap (4 blocks)" in stat.method
    assert b.diff[10].mean == pytest.approx(-0.1) and b.holm[10].stat.mean == pytest.approx(-0.1)
    lo, hi = b.holm[10].stat.interval()
    assert lo <= b.diff[10].lo and hi >= b.diff[10].hi  # the union never narrows the seeds' interval
    assert "block" in b.gain.method and cmp.rows[0].retained[40].defined
