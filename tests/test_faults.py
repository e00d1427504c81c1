"""Faults: a killed run resumes into the same MLflow run with the same result; a non-finite loss
stops the run (FAILED); two runs share one sqlite store; logged configs carry no secrets; the UI
binds to loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from tests.helpers import (
    FAULT,
    ROOT,
    final_metrics,
    migrated_store,
    run_cli_in,
    runs,
    tiny_setup,
    write_fasta,
)


# ----------------------------------------------------------------------------------- resume
def test_stopped_run_resumes_into_same_run_with_same_metrics(tmp_path, monkeypatch, capsys):
    """A run stopped by SIGTERM at step 9 (mid-epoch 2; last checkpoint at step 8) is KILLED, its
    checkpoints load with ``weights_only=True``; the same command again resumes it — same MLflow run
    id — and ends with the metrics of a clean run."""
    clean, broken = tmp_path / "clean", tmp_path / "broken"
    for d in (clean, broken):
        d.mkdir()
        tiny_setup(d)
    args = ["fit", "--config", "tiny.yaml", *FAULT, "--trainer.callbacks.how=term"]
    assert run_cli_in(clean, args)[0] == 0
    monkeypatch.setenv("POSENC_FAULT", "1")
    assert run_cli_in(broken, args)[0] == 128 + signal.SIGTERM
    client, (stopped,) = runs(broken)
    assert stopped.info.status == "KILLED"
    ckpts = list((broken / "outputs").rglob("*.ckpt"))
    assert {p.name for p in ckpts} == {"best.ckpt", "last.ckpt"}
    for path in ckpts:  # RNG and loader states included: still no pickled objects
        assert "state_dict" in torch.load(path, weights_only=True, map_location="cpu")
    monkeypatch.delenv("POSENC_FAULT")
    capsys.readouterr()
    assert run_cli_in(broken, args)[0] == 0
    assert f"resuming MLflow run {stopped.info.run_id}" in capsys.readouterr().err
    (_, (resumed,)), (_, (reference,)) = runs(broken), runs(clean)
    assert resumed.info.run_id == stopped.info.run_id and resumed.info.status == "FINISHED"
    assert final_metrics(resumed) == final_metrics(reference)
    assert "test/bits_per_base" in final_metrics(resumed)
    assert not (broken / "outputs/runs").exists() or not any((broken / "outputs/runs").iterdir())


def _cli(tmp: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "POSENC_FAULT"}
    env = {**base, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
           **(env or {})}
    return subprocess.run([sys.executable, "-m", "pipelines.train", "fit", "--config", "tiny.yaml", *extra],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_sigkill_mid_epoch_then_same_command_resumes_exactly(tmp_path):
    """SIGKILL at step 9 in a real process; rerunning the same command finishes the same MLflow run
    with final metrics equal to an uninterrupted run's (CPU, same seed)."""
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    for d in (clean, killed):
        d.mkdir()
        tiny_setup(d)
    extra = [*FAULT, "--trainer.callbacks.how=kill"]
    done = _cli(clean, *extra)
    assert done.returncode == 0, done.stderr[-2000:]
    dead = _cli(killed, *extra, env={"POSENC_FAULT": "1"})
    assert dead.returncode == -signal.SIGKILL, dead.stderr[-2000:]
    (run_json,) = (killed / "outputs/runs").glob("*/run.json")
    run_id = json.loads(run_json.read_text())["run_id"]
    assert runs(killed)[1][0].info.status == "RUNNING"  # nobody could mark it: the process was killed
    again = _cli(killed, *extra)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming MLflow run {run_id}" in again.stderr
    (_, (resumed,)), (_, (reference,)) = runs(killed), runs(clean)
    assert resumed.info.run_id == run_id and resumed.info.status == "FINISHED"
    assert final_metrics(resumed) == final_metrics(reference)


# ----------------------------------------------------------------------------------- non-finite loss
def test_non_finite_loss_stops_the_run_with_one_line_and_fails_it(tmp_path, capsys):
    tiny_setup(tmp_path)
    code, _ = run_cli_in(tmp_path, ["fit", "--config", "tiny.yaml", "--model.init_args.lr=1e30",
                                "--trainer.gradient_clip_val=null", "--model.init_args.warmup_steps=0"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2, err[-2000:]
    assert len(lines) == 1 and "training loss is" in lines[0] and "Traceback" not in err, err[-2000:]
    _, (run,) = runs(tmp_path)
    assert run.info.status == "FAILED"


def test_failed_run_guard_marks_running_run_failed(tmp_path):
    """Independently of Lightning's logger.finalize: a RUNNING run becomes FAILED on an exception."""
    from lightning.pytorch.loggers import MLFlowLogger

    from pipelines.tracking.failure import mark_runs_failed

    db = migrated_store(tmp_path / "mlflow.db")
    logger = MLFlowLogger(experiment_name="t", tracking_uri=f"sqlite:///{db}")
    trainer = L.Trainer(logger=logger, accelerator="cpu", enable_progress_bar=False)
    run_id = logger.run_id
    assert logger.experiment.get_run(run_id).info.status == "RUNNING"
    assert mark_runs_failed(trainer) == [run_id]
    assert logger.experiment.get_run(run_id).info.status == "FAILED"


# ----------------------------------------------------------------------------------- concurrency
@pytest.mark.slow
def test_two_runs_write_one_sqlite_store_concurrently(tmp_path):
    store = tmp_path / "shared.db"
    dirs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        tiny_setup(tmp_path / name)
        dirs.append(tmp_path / name)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{store}"}
    procs = [subprocess.Popen([sys.executable, "-m", "pipelines.train", "fit", "--config", "tiny.yaml",
                               f"--seed_everything={i}"], cwd=d, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i, d in enumerate(dirs)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    _, found = runs(tmp_path, "shared.db")
    assert len(found) == 2 and {r.info.status for r in found} == {"FINISHED"}
    assert all("test/bits_per_base" in r.data.metrics for r in found)


# ----------------------------------------------------------------------------------- safety
def test_logged_config_has_no_home_path_or_secret(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    tiny_setup(tmp_path)
    fasta = write_fasta(home / "data" / "g.fa")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("POSENC_TEST_API_TOKEN", "tok-8c1f3e9a")
    code, _ = run_cli_in(tmp_path, ["fit", "--config", "tiny.yaml", f"--data.init_args.fasta={fasta}",
                                "--trainer.max_epochs=1", "--test_after_fit=false",
                                "--trainer.logger.init_args.run_name=run-tok-8c1f3e9a"])
    assert code == 0
    client, (run,) = runs(tmp_path)
    text = Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))).read_text()
    assert "~/data/g.fa" in text
    assert str(home) not in text and "tok-8c1f3e9a" not in text


def test_scrub_text_hides_url_credentials():
    from pipelines.console.scrub import scrub_text

    assert scrub_text("tracking_uri: https://alice:pw123@mlflow.example/x") == \
        "tracking_uri: https://***@mlflow.example/x"


def test_make_ui_binds_loopback_unless_asked():
    def dry(*extra: str) -> str:
        out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "ui", *extra], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return next(ln for ln in out.replace("\\\n", " ").splitlines() if "pipelines.tracking.server" in ln)

    assert "--host 127.0.0.1" in dry()
    assert "--host 0.0.0.0" in dry("UI_HOST=0.0.0.0")
