"""Runs and their locks: a second process never writes into a live run, a stale lock (dead PID,
reused PID, another host's old heartbeat) is taken over, a FAILED run is never resumed and stays
FAILED, SIGTERM stops a run mid-step and marks it KILLED. Real processes, real lock files and a real
sqlite MLflow store."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import FAULT, ROOT, migrated_store, run_cli_in, runs, tiny_setup


def _sleeper(seconds: int = 120) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_lock(run_dir: Path, pid: int, host: str | None = None, ticks: int | None = None, **over) -> Path:
    """A lock as this machine writes one (host, machine id, boot id, PID namespace), fields overridden."""
    from pipelines.tracking.runlock import machine_identity

    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "run.lock"
    if ticks is None and pid > 0 and Path(f"/proc/{pid}").exists():
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    info = {"pid": pid, **machine_identity(), "ticks": ticks, "started": "2026-01-01T00:00:00+00:00",
            "token": "theirs", **over}
    path.write_text(json.dumps({**info, "host": host or socket.gethostname()}))
    return path


# ----------------------------------------------------------------------------------- the lock file
def test_a_live_process_keeps_its_lock(tmp_path):
    from pipelines.tracking.runlock import RunLocked, acquire

    holder = _sleeper()
    try:
        path = _write_lock(tmp_path / "run", holder.pid)
        before = path.read_text()
        with pytest.raises(RunLocked, match=f"process {holder.pid} on {socket.gethostname()}"):
            acquire(tmp_path / "run")
        assert path.read_text() == before
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_dead_process_is_taken_over_and_released(tmp_path, capsys):
    from pipelines.tracking.runlock import acquire

    pid = _dead_pid()
    path = _write_lock(tmp_path / "run", pid)
    lock = acquire(tmp_path / "run")
    assert f"process {pid} is no longer running" in capsys.readouterr().err
    held = json.loads(path.read_text())
    assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()
    lock.release()
    assert not path.exists() and not (tmp_path / "run").exists()


def test_a_reused_pid_does_not_keep_a_dead_runs_lock(tmp_path):
    """The PID is alive but its process started at another time than the lock's holder."""
    from pipelines.tracking.runlock import acquire

    other = _sleeper()
    try:
        stat = Path(f"/proc/{other.pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        _write_lock(tmp_path / "run", other.pid, ticks=ticks + 1)
        acquire(tmp_path / "run").release()
    finally:
        other.kill()
        other.wait()


def test_another_hosts_lock_is_live_until_its_heartbeat_is_old_or_the_user_says(tmp_path):
    from pipelines.tracking.runlock import STALE_AFTER_S, RunLocked, acquire

    path = _write_lock(tmp_path / "run", 1, host="some-other-node")
    with pytest.raises(RunLocked, match="some-other-node"):
        acquire(tmp_path / "run")
    acquire(tmp_path / "run", take_over=True).release()
    path = _write_lock(tmp_path / "run", 1, host="some-other-node")
    old = time.time() - STALE_AFTER_S - 60
    os.utime(path, (old, old))
    acquire(tmp_path / "run").release()


# ----------------------------------------------------------------------------- forged locks (issue 42)
def test_a_fifo_or_link_named_run_lock_is_one_line_not_a_hang(tmp_path):
    """A FIFO would block the read for ever; a symbolic link is never followed (its target untouched)."""
    from pipelines.tracking.runlock import NotAFile, acquire

    (tmp_path / "run").mkdir()
    os.mkfifo(tmp_path / "run" / "run.lock")
    start = time.monotonic()
    with pytest.raises(NotAFile, match="run.lock is a FIFO, not a lock file: remove it"):
        acquire(tmp_path / "run")
    assert time.monotonic() - start < 5
    (tmp_path / "run" / "run.lock").unlink()
    target = tmp_path / "precious.txt"
    target.write_text("keep")
    (tmp_path / "run" / "run.lock").symlink_to(target)
    with pytest.raises(NotAFile, match="is a symbolic link"):
        acquire(tmp_path / "run")
    assert target.read_text() == "keep"


def test_a_lock_of_another_pid_namespace_with_our_host_name_is_not_taken_over(tmp_path):
    """Same host name, but a PID namespace (a container) whose PIDs cannot be checked from here: its PID
    not running *here* says nothing, so the lock stays live and the message says how to clear it."""
    from pipelines.tracking.runlock import RunLocked, acquire

    path = _write_lock(tmp_path / "run", _dead_pid(), pid_ns="pid:[1]")
    with pytest.raises(RunLocked, match="cannot be checked from here.*--take_over_lock true"):
        acquire(tmp_path / "run")
    assert json.loads(path.read_text())["token"] == "theirs"


@pytest.mark.parametrize("missing", ["machine_id", "boot_id", "pid_ns", "ticks"])
def test_a_lock_missing_what_makes_it_checkable_counts_as_another_machines(tmp_path, missing):
    from pipelines.tracking.runlock import RunLocked, acquire

    holder = _sleeper() if missing == "ticks" else None
    try:
        pid = holder.pid if holder else _dead_pid()
        path = _write_lock(tmp_path / "run", pid)
        info = json.loads(path.read_text())
        info[missing] = None
        path.write_text(json.dumps(info))
        with pytest.raises(RunLocked, match="cannot be checked from here"):
            acquire(tmp_path / "run")
    finally:
        if holder:
            holder.kill()
            holder.wait()


def test_take_over_lock_works_on_this_host_even_for_a_lock_naming_pid_1(tmp_path, capsys):
    from pipelines.tracking.runlock import RunLocked, acquire

    _write_lock(tmp_path / "run", 1)  # PID 1 runs, with the start tick the lock names
    with pytest.raises(RunLocked, match="process 1 on"):
        acquire(tmp_path / "run")
    acquire(tmp_path / "run", take_over=True).release()
    assert "--take_over_lock true (process 1 on" in capsys.readouterr().err


def test_a_heartbeat_in_the_future_does_not_keep_a_lock_fresh(tmp_path):
    from pipelines.tracking.runlock import STALE_AFTER_S, RunLocked, acquire

    path = _write_lock(tmp_path / "run", 1, host="some-other-node")
    soon = time.time() + 120  # a clock a little ahead: still live
    os.utime(path, (soon, soon))
    with pytest.raises(RunLocked):
        acquire(tmp_path / "run")
    later = time.time() + 10 * STALE_AFTER_S
    os.utime(path, (later, later))
    acquire(tmp_path / "run").release()


def test_a_lock_written_before_this_machine_restarted_is_stale(tmp_path, capsys):
    from pipelines.tracking.runlock import acquire

    _write_lock(tmp_path / "run", 1, boot_id="00000000-0000-0000-0000-000000000000")
    acquire(tmp_path / "run").release()
    assert "this machine has restarted since" in capsys.readouterr().err


# ----------------------------------------------------------------------------------- real runs
def _env(tmp: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k != "POSENC_FAULT"}
    return {**base, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}", **extra}


LONG = ["fit", "--config", "tiny.yaml", "--trainer.max_epochs=50",
        "--trainer.callbacks+=tests.toy.faults.SlowStep", "--trainer.callbacks.step=5"]


def _wait_for(pattern: str, tmp: Path, proc: subprocess.Popen, timeout: float = 300) -> Path:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = list((tmp / "outputs").glob(pattern))
        if found:
            return found[0]
        if proc.poll() is not None:
            raise AssertionError(f"training ended early: {proc.communicate()[1][-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"no {pattern} after {timeout} s")


def test_a_fit_is_refused_while_a_live_process_holds_its_runs_lock(tmp_path, monkeypatch, capsys):
    """The fast twin of the next test: a fit stopped at step 1 leaves its run directory (run.json);
    a live process (a sleeper) holds its lock; the same command stops with one line naming the
    MLflow run and the process, and changes nothing."""
    tiny_setup(tmp_path)
    args = ["fit", "--config", "tiny.yaml", "--trainer.callbacks+=tests.toy.faults.FailAtStep",
            "--trainer.callbacks.step=1"]
    monkeypatch.setenv("POSENC_FAULT", "1")
    with pytest.raises(RuntimeError, match="injected fault"):
        run_cli_in(tmp_path, args)
    monkeypatch.delenv("POSENC_FAULT")
    (run_json,) = (tmp_path / "outputs/runs").glob("*/run.json")
    run_id = json.loads(run_json.read_text())["run_id"]
    holder = _sleeper()
    try:
        lock = _write_lock(run_json.parent, holder.pid, ticks=int(
            Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]))
        held = lock.read_text()
        capsys.readouterr()
        code, _ = run_cli_in(tmp_path, args)
        err = capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(errors) == 1, err[-3000:]
    assert f"MLflow run {run_id}" in errors[0] and f"process {holder.pid}" in errors[0]
    assert lock.read_text() == held and len(runs(tmp_path)[1]) == 1


@pytest.mark.slow  # a real training in a fresh interpreter (~20 CPU s); fast twins: the test above (the
# CLI's one line for a live lock) and test_faults' in-process SIGTERM (the handler stops the step: KILLED)
def test_a_second_fit_never_enters_a_live_run_and_sigterm_stops_it_mid_step_as_killed(tmp_path, capsys):
    """A real training (its step 5 takes minutes) holds the lock: the same command in another process
    (this test's own: the CLI in-process, so that only the first pays a fresh interpreter's imports)
    stops with one line naming the live run and changes nothing; SIGTERM then ends the first one
    mid-step (Lightning alone waits for the step to end), exit 143, its MLflow run KILLED."""
    tiny_setup(tmp_path)
    migrated_store(tmp_path / "mlflow.db")
    first = subprocess.Popen([sys.executable, "-m", "pipelines.train", *LONG], cwd=tmp_path,
                             env=_env(tmp_path, POSENC_FAULT="1"), stderr=subprocess.PIPE, text=True)
    try:
        _wait_for("runs/*/last.ckpt", tmp_path, first)  # step 4 is written: step 5 is sleeping
        lock = next((tmp_path / "outputs").glob("runs/*/run.lock"))
        held = lock.read_text()
        run_id = json.loads((lock.parent / "run.json").read_text())["run_id"]
        capsys.readouterr()
        code, _ = run_cli_in(tmp_path, LONG)  # this test's process: the CLI's one-line exit, in-process
        err = capsys.readouterr().err
        errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert code == 2 and len(errors) == 1, err[-3000:]
        assert f"MLflow run {run_id}" in errors[0] and f"process {first.pid}" in errors[0]
        assert lock.read_text() == held and len(runs(tmp_path)[1]) == 1
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=60)  # the sleeping step alone has 10 minutes to go
    finally:
        first.kill()
    assert first.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "error: stopped by signal SIGTERM" in err and "Traceback" not in err, err[-3000:]
    (_, (run,)) = runs(tmp_path)
    assert run.info.run_id == run_id and run.info.status == "KILLED"
    assert not lock.exists()


def test_a_failed_run_is_not_resumed_and_stays_failed(tmp_path, monkeypatch, capsys):
    tiny_setup(tmp_path)
    args = ["fit", "--config", "tiny.yaml", *FAULT]
    monkeypatch.setenv("POSENC_FAULT", "1")
    with pytest.raises(RuntimeError, match="injected fault"):
        run_cli_in(tmp_path, args)
    monkeypatch.delenv("POSENC_FAULT")
    client, (failed,) = runs(tmp_path)
    assert failed.info.status == "FAILED"
    logged = [m.step for m in client.get_metric_history(failed.info.run_id, "train/loss")]
    assert list((tmp_path / "outputs/runs").glob("*/last.ckpt"))  # there was something to resume from
    capsys.readouterr()
    assert run_cli_in(tmp_path, args)[0] == 0
    err = capsys.readouterr().err
    assert f"MLflow run {failed.info.run_id} FAILED: it is not resumed" in err and "resuming" not in err
    client, both = runs(tmp_path)
    status = {r.info.run_id: r.info.status for r in both}
    assert len(status) == 2 and status.pop(failed.info.run_id) == "FAILED"
    assert list(status.values()) == ["FINISHED"]
    assert [m.step for m in client.get_metric_history(failed.info.run_id, "train/loss")] == logged


@pytest.mark.slow  # the store stays locked past sqlite's own 20 s timeout
def test_a_run_stopped_while_another_process_locks_the_store_still_ends_killed(tmp_path):
    """Another process holds the sqlite store's write lock for 25 s (longer than sqlite waits): the
    stopping run keeps trying and ends KILLED, not RUNNING."""
    import mlflow

    from pipelines.tracking.failure import set_status_when_free

    db = migrated_store(tmp_path / "mlflow.db")
    client = mlflow.MlflowClient(f"sqlite:///{db}")
    run_id = client.create_run(client.create_experiment("x")).info.run_id
    code = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(25)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        start = time.monotonic()
        set_status_when_free(client, run_id, "KILLED", budget_s=60)
        assert time.monotonic() - start >= 20
    finally:
        holder.kill()
        holder.wait()
    assert client.get_run(run_id).info.status == "KILLED"
