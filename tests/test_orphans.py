"""No orphan after ``kill -9`` (issue 56): the real ``--jobs 2`` commands (the LTSF benchmark, the
claims runner) killed with SIGKILL — while their workers train, or while the workers are still starting
— leave neither a worker nor multiprocessing's resource tracker behind. A worker's SIGTERM (the kernel's
parent-death signal) used to become a ``Terminated`` exception inside the training, which the pool worker
reported and then waited on its queue for ever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, small_csv
from tests.hostile import alive, command_of, process_children

#: a tiny PatchTST that trains for as long as the test needs (no early stopping)
ENDLESS_MODEL = """\
model:
  class_path: pipelines.tasks.forecast.patchtst.PatchTSTForecaster
  init_args: {patch_len: 16, patch_stride: 8, d_model: 16, n_heads: 2, n_layers: 2, d_ff: 32, lr: 0.001,
              pe: {class_path: posenc.Learned, init_args: {max_len: 8}}}
data: {init_args: {batch_size: 16, samples_per_epoch: 64}}
trainer:
  max_epochs: 100000
  callbacks: [{class_path: pipelines.studies.ltsf.fit.LTSFProtocol, init_args: {name: endless}}]
"""
GONE_WITHIN_S = 20.0


class Command:
    """A real command in its own process, its stderr collected line by line."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
               "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"}
        self.proc = subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, ready, what: str, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.proc.poll() is None, f"the command ended before {what}: {''.join(self.lines)[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} in {timeout:.0f} s: {''.join(self.lines)[-3000:]}"
            time.sleep(0.2)

    def workers(self) -> list[int]:
        return [p for p in process_children(self.proc.pid) if "spawn_main" in command_of(p)]

    def kill_and_check(self) -> None:
        """SIGKILL the command; every process it had started (workers, resource tracker) must be gone."""
        kids = process_children(self.proc.pid)
        assert any("resource_tracker" in command_of(p) for p in kids), [command_of(p) for p in kids]
        try:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
            deadline = time.monotonic() + GONE_WITHIN_S
            while any(alive(p) for p in kids) and time.monotonic() < deadline:
                time.sleep(0.2)
            left = [f"{p}: {command_of(p)[:120]}" for p in kids if alive(p)]
            assert not left, f"still running {GONE_WITHIN_S:.0f} s after the parent's SIGKILL: {left}"
        finally:
            for p in kids:
                if alive(p):
                    os.kill(p, signal.SIGKILL)


def ltsf(tmp: Path) -> Command:
    (tmp / "endless.yaml").write_text(ENDLESS_MODEL)
    data = small_csv(tmp / "series.csv")
    return Command(["-m", "pipelines.studies.ltsf", "--data", str(data), "--lookback", "32",
                    "--horizons", "8", "--seeds", "0", "1", "--configs", str(tmp / "endless.yaml"),
                    "--baselines", "naive", "--jobs", "2", "--out", str(tmp / "out")], tmp)


def training(cmd: Command, n: int = 2):
    return lambda: sum("[sweep] training" in line for line in cmd.lines) >= n


@pytest.mark.slow  # three interpreters that import torch, two of them training (~40 s)
def test_kill_9_of_an_ltsf_jobs_parent_leaves_no_worker(tmp_path):
    cmd = ltsf(tmp_path)
    cmd.wait_for(training(cmd), "two workers training")
    time.sleep(2)  # inside the training loop
    cmd.kill_and_check()


@pytest.mark.slow  # (~20 s)
def test_kill_9_of_an_ltsf_jobs_parent_while_its_workers_start_leaves_no_worker(tmp_path):
    cmd = ltsf(tmp_path)
    cmd.wait_for(lambda: len(cmd.workers()) >= 2, "two workers started", timeout=300)
    cmd.kill_and_check()


@pytest.mark.slow  # the claims runner with two workers training real children (~60 s)
def test_kill_9_of_a_claims_jobs_parent_leaves_no_worker(tmp_path):
    cmd = Command(["-m", "pipelines.studies.claims", "--only", "order_task", "--jobs", "2", "--allow-dirty",
                   "--out", str(tmp_path / "out")], tmp_path)
    cmd.wait_for(training(cmd), "two workers training")
    time.sleep(2)
    cmd.kill_and_check()
