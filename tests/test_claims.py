"""``python -m pipelines.studies.claims``: every experiment config builds, the probes' math, and a
tiny-budget smoke of the runner (parent runs in ``posenc-claims``, nested children, the table)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from pipelines.studies.claims.runner import build, experiment_configs, metric_name, read_config
from posenc import PosencError
from tests.helpers import flat_dm, workdir_with_store

CLAIMS = {"1", "2", "3a", "3b", "3c", "3d", "3e", "4a", "4b", "5", "6", "7", "8", "9", "10",
          "11", "12", "13", "14", "15", "16a", "16b", "17", "18", "19", "19b", "20"}


def test_every_experiment_config_instantiates_and_every_claim_has_one():
    configs = experiment_configs()
    claims = {str(read_config(p)["claim"]) for p in configs.values()}
    assert claims == CLAIMS
    for name, path in configs.items():
        exp = build(path)
        assert exp.claim, name
        task = getattr(exp, "task", None)
        if task is not None:
            from pipelines.studies.claims.context import resolve

            assert resolve(task).is_file()
    order = [str(read_config(p)["claim"]) for p in configs.values()]
    assert order[0] == "1" and order[-1] == "20" and order.index("10") == order.index("9") + 1  # claim order


def test_bad_experiment_config_is_one_line_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("claim: '1'\nprimary: x\ngate: {control: none, min_gain: 0.1, max_width: 0.2}\n"
                   "class_path: pipelines.studies.claims.order.OrderTask\ninit_args: {nope: 1}\n")
    with pytest.raises(PosencError, match="bad.yaml: init_args do not fit OrderTask"):
        build(bad)
    from pipelines.studies.claims.runner import main

    with pytest.raises(SystemExit) as exc:
        main(["--only", "no_such_experiment"])
    assert exc.value.code == 2


def test_metric_names_are_what_mlflow_accepts():
    assert metric_name("sinusoidal base=10000_d32 (x)") == "sinusoidal_base_10000_d32__x_"
    assert metric_name("rope/acc_L64") == "rope/acc_L64"


def test_lag_ratio_matches_the_closed_form_of_a_sinusoid():
    from pipelines.studies.claims.aliasing import lag_ratio, scheme_features

    d, lags = 16, 300
    feats = scheme_features({"class_path": "posenc.Sinusoidal", "init_args": {"base": 100.0}}, d, lags + 5)
    got = lag_ratio(feats, lags, 4)
    omega = 100.0 ** (-2.0 * np.arange(d // 2) / d)  # float64 reference: ‖PE(t)−PE(t+T)‖² = Σ 2 − 2cos(ωT)
    T = np.arange(1, lags + 1)
    want = np.sqrt((2 - 2 * np.cos(np.outer(T, omega))).sum(1) / (d / 2))
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_shape_metric_passes_its_positive_control_and_reads_pe_alone():
    from pipelines.studies.claims.rbf import (
        POSITIVE_R2,
        RBFFeatureScores,
        causal_curves,
        gaussian_fit,
        pe_alone_r2,
        positive_control_r2,
    )

    assert positive_control_r2(32, 12) >= POSITIVE_R2  # Gaussian by construction: the metric finds it
    flat = causal_curves(torch.zeros(1, 32, 32), 12)[0]  # uniform causal attention: 1/(t+1), no bump
    assert not gaussian_fit(np.arange(13.0), flat, 0.0)[1] >= POSITIVE_R2
    pe = RBFFeatureScores(32, 2, train_len=32, n_centres=64, extent=8.0, sigma=8.0, scale=1.0)
    r2 = pe_alone_r2(pe, 32, 12)
    assert len(r2) == 2 and all(x >= 0.9 for x in r2)  # q = k = PE(t) with σ = 8: a Gaussian-like kernel


def test_gaussian_fit_recovers_width_and_rejects_a_flat_line():
    from pipelines.studies.claims.rbf import gaussian_fit

    d = np.arange(33, dtype=np.float64)
    s, r2 = gaussian_fit(d, 0.3 * np.exp(-(d**2) / (2 * 5.0**2)), 0.0)
    assert s == pytest.approx(5.0, rel=1e-4) and r2 == pytest.approx(1.0, abs=1e-8)
    _, r2 = gaussian_fit(d, 0.1 + 0.01 * np.sin(d), 0.0)
    assert not r2 > 0.5


def test_order_windows_swap_is_a_label_flip_with_the_same_tokens(tmp_path):
    from pipelines.studies.claims.order_data import OrderDataModule

    with workdir_with_store(tmp_path):
        dm = flat_dm(OrderDataModule, seq_len=16, batch_size=8, samples_per_epoch=64, eval_samples=64)
    a, b = dm.pair
    batch = next(iter(dm.test_dataloader()[0]))
    x, y = batch["tokens"], batch["label"]
    assert ((x == a).sum(1) == 1).all() and ((x == b).sum(1) == 1).all()
    first_a = (x == a).float().argmax(1) < (x == b).float().argmax(1)
    assert torch.equal(first_a.long(), y)
    assert 0 < y.float().mean() < 1
    with pytest.raises(PosencError, match="two different 4-mers"):
        flat_dm(OrderDataModule, kmers=["ACGT", "ACGT"])


def smoke_configs(folder: Path) -> Path:
    """The aliasing and padding-leak configs as shipped, and claim 10's with one relative and one absolute
    scheme of its four (rope, learned: each child a tiny LM fit, ~2 CPU s; every config as shipped
    builds in test_every_experiment_config_instantiates_and_every_claim_has_one)."""
    shipped = experiment_configs()
    folder.mkdir()
    for name in ("aliasing", "padding_leak"):
        shutil.copy(shipped[name], folder)
    doc = read_config(shipped["shift_invariance"])
    args = doc["init_args"]
    args["schemes"] = {k: args["schemes"][k] for k in ("rope", "learned")}
    args["relative"] = ["rope"]
    (folder / "shift_invariance.yaml").write_text(yaml.safe_dump(doc))
    return folder


def test_smoke_runs_parents_children_and_the_table(tmp_path, monkeypatch):
    import mlflow

    from pipelines.studies.claims.runner import run

    monkeypatch.setenv("POSENC_FIGURES", "0")  # the children's extrapolation.png: ~1 CPU s each
    configs = smoke_configs(tmp_path / "experiments")
    with workdir_with_store(tmp_path):
        results = run(["--only", "aliasing", "padding_leak", "shift_invariance", "--smoke", "--out", "res",
                       "--docs", "docs/claims.md", "--configs", str(configs),
                       "--jobs", "1"])  # workers: tests/test_claims_jobs.py
        client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        exp = client.get_experiment_by_name("posenc-claims")
        runs = client.search_runs([exp.experiment_id])
    assert [r.name for r in results] == ["aliasing", "padding_leak", "shift_invariance"]  # as asked
    parents = {r.info.run_id: r for r in runs if r.data.tags.get("posenc.claims") == "parent"}
    assert len(parents) == 3
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") in parents]
    assert len(children) == 2  # one trained LM per scheme of claim 10 (here rope and learned)
    assert all(math.isfinite(p.data.metrics["cpu_s"]) for p in parents.values())
    saved = json.loads((tmp_path / "res/shift_invariance/result.json").read_text())
    assert saved["holds"] in ("yes", "no", "partly") and saved["command"].endswith("ONLY=shift_invariance")
    table = (tmp_path / "res/claims.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| # ")]
    assert "SMOKE RUN" in table and len(rows) == 3  # one row per experiment asked for
    assert "Run started " in table and "Run finished " in table and " torch " in table  # provenance
    doc = (tmp_path / "docs/claims.md").read_text()
    assert "## 8. aliasing" in doc and "figures/claims_aliasing.png" in doc


def _repo(path: Path) -> Path:
    """A git checkout with one commit."""
    import subprocess

    path.mkdir()
    for cmd in (["init", "-q"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty",
                                 "-m", "rules"]):
        subprocess.run(["git", "-C", str(path), *cmd], check=True, capture_output=True)
    return path


def test_the_start_records_the_commit_and_marks_a_dirty_tree_draft(tmp_path):
    from pipelines.studies.claims.report import DRAFT, git_state, provenance, started

    repo = _repo(tmp_path / "repo")
    sha, dirty = git_state(repo)
    assert sha and not dirty
    clean = started(repo)
    assert clean.startswith("Run started ") and f"at commit {sha}," in clean and DRAFT not in clean
    assert "load average" in clean  # how busy the host was when it started (idle: near 0)
    (repo / "rules.yaml").write_text("min_effect: 0.05\n")  # an uncommitted (untracked) rule counts
    assert git_state(repo) == (sha, True) and DRAFT in started(repo)
    assert "commit" not in started(tmp_path)  # not a git checkout: no commit claimed
    done = provenance(clean)
    assert done.startswith(clean) and "Run finished " in done and f"torch {torch.__version__}" in done


def test_a_published_run_refuses_a_dirty_tree_and_a_draft_is_marked(tmp_path, monkeypatch):
    from pipelines.studies.claims import report, runner

    repo = _repo(tmp_path / "repo")
    (repo / "rules.yaml").write_text("min_effect: 0.05\n")
    monkeypatch.setattr(report, "ROOT", repo)
    with pytest.raises(PosencError, match="uncommitted changes.*--allow-dirty"):
        report.refuse_dirty(runner.parse_args([]))
    report.refuse_dirty(runner.parse_args(["--allow-dirty"]))  # a draft may run
    report.refuse_dirty(runner.parse_args(["--smoke"]))  # a wiring check reports nothing
    table = report.summary_table([], 1.0, 1.0, False, where=report.provenance(report.started(repo)))
    assert table.startswith(f"**{report.DRAFT}: not a published run.**")


def test_a_pinned_run_starts_at_its_commit_and_rechecks_commit_and_tree_at_the_end(tmp_path, monkeypatch):
    """Issue 54: the published run's checkout may not move under it: refused at the start unless at the
    pinned commit and clean; refused at the end (no docs) if a commit landed or a file changed."""
    import subprocess

    from pipelines.studies.claims import report, runner

    repo = _repo(tmp_path / "repo")
    monkeypatch.setattr(report, "ROOT", repo)
    sha = report.git_state(repo, full=True)[0]
    args = runner.parse_args(["--pinned", sha[:9]])
    assert report.pinned_at_start(args) == sha
    report.recheck(args, sha)  # nothing moved: passes
    with pytest.raises(PosencError, match="--pinned 0000000: this checkout"):
        report.pinned_at_start(runner.parse_args(["--pinned", "0000000"]))
    (repo / "late.py").write_text("x = 1\n")  # a file lands while the run trains
    with pytest.raises(PosencError, match="changed during the run.*uncommitted changes.*no docs"):
        report.recheck(args, sha)
    with pytest.raises(PosencError, match="with uncommitted changes"):
        report.pinned_at_start(args)
    subprocess.run(["git", "-C", str(repo), "add", "late.py"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m",
                    "moved"], check=True)
    with pytest.raises(PosencError, match=f"started at {sha}, now"):
        report.recheck(args, sha)  # a commit landed: clean again, but not the run's commit
    report.recheck(runner.parse_args(["--allow-dirty"]), sha)  # a draft is not checked


@pytest.mark.slow
def test_smoke_of_every_experiment(tmp_path):
    from pipelines.studies.claims.runner import run

    with workdir_with_store(tmp_path):
        results = run(["--smoke", "--out", "res"])
    assert {r.number for r in results} == CLAIMS


def test_claim_10_shares_claim_3bs_rope_and_its_own_children_skip_the_length_sweep():
    """Issue 39's budget: the shift probe scores its own batches, so its own DNA LMs drop the task's
    1 Mb length sweep; its rope is claim 3b's child (one training), and a pilot's seed replaces 0."""
    from pipelines.studies.claims.context import Context

    configs = experiment_configs()
    probe, lm = build(configs["shift_invariance"]), build(configs["periodic_lm"])
    for pilot in (None, [100, 101]):
        ctx = Context("x", None, "", "", Path("."), pilot_seeds=pilot)
        kids = {c.label: c for c in probe.children(ctx)}
        assert {c.seed for c in kids.values()} == {0 if pilot is None else 100}
        shared = {ctx.request(c)[0] for c in lm.children(ctx)}
        assert ctx.request(kids["rope"])[0] in shared  # trained once, by claim 3b
        for label, child in kids.items():
            callbacks = ctx.request(child)[1]["overlay"].get("trainer", {}).get("callbacks")
            assert (callbacks is None) == (label == "rope"), label  # rope: the task's sweep, kept
            assert label == "rope" or callbacks == []


def test_the_published_run_is_checked_out_pinned_and_imports_its_own_code(tmp_path):
    """make publish-claims: a detached worktree at the commit (reused only while clean at it), and a
    refusal when the worktree's python would import another checkout's runner."""
    import subprocess

    from pipelines.studies.claims import publish

    repo = _repo(tmp_path / "repo")
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    tree = publish.pinned_worktree(sha, tmp_path / "wt", root=repo)
    assert publish.git("rev-parse", "HEAD", cwd=tree) == sha
    assert publish.pinned_worktree(sha, tmp_path / "wt", root=repo) == tree  # clean at sha: reused
    (tree / "stray.txt").write_text("x")
    with pytest.raises(PosencError, match="not a clean checkout"):
        publish.pinned_worktree(sha, tmp_path / "wt", root=repo)
    cmd, env = publish.command(tree, sha, quick=False)
    assert cmd[cmd.index("--pinned") + 1] == sha and "--docs" in cmd and env["PYTHONPATH"] == str(tree)
    assert "PYTHONSAFEPATH" not in env and env["MLFLOW_TRACKING_URI"].startswith("sqlite:///")
    assert "--quick" in publish.command(tree, sha, quick=True)[0]
    with pytest.raises(PosencError, match="would import"):  # the tree holds no runner: another one is found
        publish.imports_from(tree, env)
