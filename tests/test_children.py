"""Workers die with their parent (issue 42): a claims ``--jobs`` worker and a compare child stop when
the process that started them is stopped (SIGTERM) or killed (SIGKILL). Real processes throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import ROOT

#: a parent that starts one real claims worker (``ChildPool``, spawned, with its initializer) busy for
#: ten minutes, prints the worker's PID and waits
POOL_PARENT = """
import os, sys, time
from pipelines.studies.claims.jobs import ChildPool
pool = ChildPool(1)._pool()
print(pool.submit(os.getpid).result(), flush=True)
pool.submit(time.sleep, 600)
time.sleep(600)
"""
#: a parent that starts a child as ``run_in_subprocess`` does (its environment names the parent) and
#: the child's first step as ``python -m pipelines.eval.sweep_child`` takes it
CHILD_PARENT = """
import subprocess, sys, time
from pipelines.children import child_environment
code = ("from pipelines.children import die_with_parent_from_env as d; d(); import time; "
        "print('ready', flush=True); time.sleep(600)")
child = subprocess.Popen([sys.executable, "-c", code], env=child_environment(), stdout=subprocess.PIPE,
                         text=True)
child.stdout.readline()
print(child.pid, flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start_parent(script: str) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    line = parent.stdout.readline().strip()
    assert line.isdigit(), f"the parent printed {line!r}"
    return parent, int(line)


@pytest.mark.slow  # two interpreters that import torch (~10 s)
@pytest.mark.parametrize("script", [POOL_PARENT, CHILD_PARENT], ids=["claims-worker", "compare-child"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_worker_stops_when_its_parent_is_stopped_or_killed(script, signum):
    parent, worker = start_parent(script)
    try:
        assert running(worker)
        parent.send_signal(signum)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while running(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not running(worker), f"worker {worker} still runs after its parent got {signum.name}"
    finally:
        parent.kill()
        if running(worker):
            os.kill(worker, signal.SIGKILL)


def test_die_with_parent_stops_a_child_whose_parent_is_already_gone():
    """The race between the start and the ``prctl``: a parent PID that is not ours any more stops us."""
    code = ("import os, signal, sys; from pipelines.children import die_with_parent; "
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143)); die_with_parent(os.getppid() + 1); "
            "import time; time.sleep(60)")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=120, capture_output=True, text=True)
    assert done.returncode == 143, done.stderr[-2000:]
