"""The LTSF benchmark's ``--out`` is the user's, not an attacker's (issue 56): model names are single path
components; a link, FIFO or folder planted at a name the run writes is refused in one line (never
followed, never waited on); ``--data`` inside ``--out`` under a written name is refused; ``--out`` as a
file is one line; the run lock stops a second run on the same ``--out``; a fresh run clears stale
forecasts; the ensemble is the mean of exactly its members (planted ``.npy`` files refused by name,
``--val-only`` writes no test). The real command (``pipelines.studies.ltsf.main``) throughout."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers import runs, small_csv, workdir_with_store

HEADER = ("model,horizon,seed,n_test_windows,test/mse_scaled,test/mae_scaled,val/mse_scaled,time/cpu_s,"
          "time/wall_s,chosen\n")


def bench(tmp: Path, *extra: str, out: Path | None = None, data: Path | None = None,
          baselines: tuple[str, ...] = ("naive",)) -> int:
    """``python -m pipelines.studies.ltsf`` in-process on a 1,000-row series; its exit status."""
    from pipelines.studies.ltsf.run import main

    data = data or small_csv(tmp / "series.csv")
    argv = ["--data", str(data), "--lookback", "32", "--horizons", "8", "--seeds", "0", "--baselines",
            *baselines, "--out", str(out or tmp / "out"), "--threads", "1", *extra]
    with workdir_with_store(tmp):
        try:
            main(argv)
        except SystemExit as exc:
            return int(exc.code or 0)
    return 0


def one_error(err: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def no_run_left_running(tmp: Path) -> None:
    _, found = runs(tmp)
    assert all(r.info.status != "RUNNING" for r in found), [r.info.status for r in found]


@pytest.mark.parametrize("name", ["../../x", "sub/x", ".."])
def test_a_model_name_that_is_a_path_is_refused(tmp_path, capsys, name):
    victim = tmp_path / "x-H8-seed0"
    victim.mkdir()
    (tmp_path / "m.yaml").write_text(
        "model: {class_path: pipelines.tasks.forecast.linear.DLinearForecaster, init_args: {}}\n"
        "trainer: {max_epochs: 1, callbacks: [{class_path: pipelines.studies.ltsf.fit.LTSFProtocol, "
        f"init_args: {{name: '{name}'}}}}]}}\n")
    code = bench(tmp_path, "--configs", str(tmp_path / "m.yaml"))
    line = one_error(capsys.readouterr().err)
    assert code == 2 and "m.yaml" in line and repr(name) in line and "one path component" in line, line
    assert victim.is_dir()
    _, found = runs(tmp_path)
    assert found == []


def test_links_planted_in_out_are_refused_and_never_followed(tmp_path, capsys):
    victim_file, victim_dir = tmp_path / "victim.txt", tmp_path / "victim"
    victim_file.write_text("keep me")
    (victim_dir / "old-H8-seed0").mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.md").symlink_to(victim_file)
    (out / "predictions").symlink_to(victim_dir)
    code = bench(tmp_path)
    line = one_error(capsys.readouterr().err)
    assert code == 2 and "symbolic link" in line and str(out) in line, line
    assert victim_file.read_text() == "keep me" and (victim_dir / "old-H8-seed0").is_dir()
    _, found = runs(tmp_path)
    assert found == []  # refused before the parent run


def test_resume_never_appends_through_a_link(tmp_path, capsys):
    victim = tmp_path / "victim.csv"
    victim.write_text(HEADER + "ridge,8,0,193,0.5,0.4,0.6,1.0,1.0,alpha=1\n")
    before = victim.read_text()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.csv").symlink_to(victim)
    code = bench(tmp_path, "--resume")
    line = one_error(capsys.readouterr().err)
    assert code == 2 and "results.csv" in line and "symbolic link" in line, line
    assert victim.read_text() == before


def test_a_fifo_results_csv_is_one_line_not_a_hang(tmp_path, capsys):
    """(Before, the run blocked for ever, silently: a thread with a deadline, so this test cannot.)"""
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "results.csv")
    done: list[int] = []
    worker = threading.Thread(target=lambda: done.append(bench(tmp_path, "--resume")), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert done, "the benchmark is still waiting on the FIFO after 120 s"
    line = one_error(capsys.readouterr().err)
    assert done == [2] and "results.csv is a FIFO" in line, line


def test_data_inside_out_under_a_written_name_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    data = small_csv(out / "results.csv")
    before = data.read_bytes()
    code = bench(tmp_path, data=data)
    line = one_error(capsys.readouterr().err)
    assert code == 2 and "--data" in line and "results.csv" in line, line
    assert data.read_bytes() == before


def test_an_out_that_is_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "out").write_text("not a folder")
    code = bench(tmp_path)
    line = one_error(capsys.readouterr().err)
    assert code == 2 and "out" in line and "not a folder" in line, line
    assert (tmp_path / "out").read_text() == "not a folder"


def test_a_second_run_on_one_out_is_stopped_by_the_lock(tmp_path, capsys):
    from pipelines.tracking.runlock import acquire

    out = tmp_path / "out"
    first = acquire(out)  # a live run of this process holds --out
    try:
        code = bench(tmp_path)
    finally:
        first.release()
    line = one_error(capsys.readouterr().err)
    assert code == 2 and str(out) in line and f"process {os.getpid()}" in line, line
    assert not (out / "results.csv").exists()


def test_a_fresh_run_clears_stale_forecasts(tmp_path):
    stale = tmp_path / "out" / "predictions" / "old-H8-seed0"
    stale.mkdir(parents=True)
    np.save(stale / "test.npy", np.zeros((1, 1, 1), dtype=np.float32))
    assert bench(tmp_path) == 0
    assert not (tmp_path / "out" / "predictions").exists()
    no_run_left_running(tmp_path)


# ------------------------------------------------------------------------------------- the ensemble
MEMBER = """\
model:
  class_path: pipelines.tasks.forecast.linear.DLinearForecaster
  init_args: {{kernel_size: 5, optim: {{lr: 0.001, warmup_steps: 0}}}}
data: {{init_args: {{batch_size: 32, samples_per_epoch: 64}}}}
trainer:
  max_epochs: 1
  callbacks: [{{class_path: pipelines.studies.ltsf.fit.LTSFProtocol, init_args: {{name: {name}}}}}]
"""


def members(tmp: Path, *names: str) -> list[str]:
    out = []
    for name in names:
        (tmp / f"{name}.yaml").write_text(MEMBER.format(name=name))
        out.append(str(tmp / f"{name}.yaml"))
    return out


def plant(out: Path, model: str, *splits: str) -> None:
    folder = out / "predictions" / f"{model}-H8-seed0"
    folder.mkdir(parents=True, exist_ok=True)
    for split in splits:
        np.save(folder / f"{split}.npy", np.zeros((1, 1, 1), dtype=np.float32))


@pytest.mark.slow  # two tiny trainings (~20 s)
def test_a_val_only_ensemble_scores_no_test_from_files_it_did_not_write(tmp_path):
    out = tmp_path / "out"
    for m in ("a", "b"):
        plant(out, m, "test")  # an earlier run's (or anyone's) test forecasts
    code = bench(tmp_path, "--configs", *members(tmp_path, "a", "b"), "--ensemble", "a", "b", "--val-only",
                 baselines=())
    assert code == 0
    rows = pd.read_csv(out / "results.csv").set_index("model")
    assert np.isfinite(rows.loc["a+b", "val/mse_scaled"]) and np.isnan(rows.loc["a+b", "test/mse_scaled"])


@pytest.mark.slow  # one tiny training (~10 s)
def test_a_planted_member_forecast_is_refused_by_name(tmp_path, capsys):
    """``--resume`` with member ``a`` done: its saved forecasts are checked against the split's windows
    (shape, dtype, finite) before they are averaged; a planted (1, 1, 1) array is one line naming it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text(HEADER + "a,8,0,193,0.5,0.4,0.6,1.0,1.0,x\n")
    plant(out, "a", "val", "test")
    code = bench(tmp_path, "--configs", *members(tmp_path, "a", "b"), "--ensemble", "a", "b", "--resume",
                 baselines=())
    line = one_error(capsys.readouterr().err)
    assert code == 2 and str(out / "predictions" / "a-H8-seed0") in line and "shape" in line, line
    assert "a+b" not in (out / "results.csv").read_text()
    no_run_left_running(tmp_path)
