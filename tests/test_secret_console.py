"""No secret on any console or file (issue 56): a tracking URI's password never reaches the console — the
store's error line, the run summary, the LTSF benchmark's last line, MLflow's own "View run" line — and a
password holding ``@`` is masked whole (user-info up to the last ``@`` before the host) in ``run.json``
and the logged ``config.yaml``. A dead store is retried a bounded number of times, with a line saying so
while it is."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, run_cli_in, tiny_setup

PASSWORD = "p@ss-W0rd7"
PIECES = (PASSWORD, "ss-W0rd7", "W0rd7")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leaked(text: str) -> list[str]:
    return [p for p in PIECES if p in text]


@pytest.mark.parametrize("uri", [
    f"http://alice:{PASSWORD}@tracking.lab:5000/",
    f"https://alice:{PASSWORD}@tracking.lab/api",
    f"postgresql://alice:{PASSWORD}@db.lab/mlflow",
    f"http://alice:{PASSWORD}@127.0.0.1:5000/#/experiments/1/runs/abc",
])
def test_user_info_is_masked_up_to_the_last_at_before_the_host(uri):
    from pipelines.console.scrub import scrub_text

    clean = scrub_text(f"store {uri} (see it); mail bob@lab.org")
    assert not leaked(clean) and "***@" in clean, clean
    assert clean.endswith("(see it); mail bob@lab.org")  # an address outside a URL is kept
    assert ("tracking.lab" in clean or "db.lab" in clean or "127.0.0.1" in clean)


def test_run_json_masks_a_password_holding_an_at_sign(tmp_path):
    from pipelines.tracking.resume import RUN_FILE, _atomic_json

    _atomic_json(tmp_path / RUN_FILE, {"run_id": "abc", "tracking_uri": f"http://alice:{PASSWORD}@h:5000/"})
    text = (tmp_path / RUN_FILE).read_text()
    assert not leaked(text) and "h:5000" in text


def test_a_dead_store_is_retried_briefly_with_a_line_and_no_password(tmp_path, capfd, monkeypatch):
    """Nothing listens on the port: the training CLI says it is retrying, gives up after the configured
    retries (bounded here to keep the test fast) with one line, exit 2; no password anywhere."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    tiny_setup(tmp_path)
    uri = f"http://alice:{PASSWORD}@127.0.0.1:{free_port()}/"
    started = time.monotonic()
    code, _ = run_cli_in(tmp_path, ["fit", "--config", "tiny.yaml", "--trainer.max_epochs=1",
                                    f"--trainer.logger.init_args.tracking_uri={uri}"])
    out, err = capfd.readouterr()
    assert code == 2 and time.monotonic() - started < 120
    assert not leaked(out + err), (out + err)[-3000:]
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: MLflow store http://***@127.0.0.1:"), err[-3000:]
    said = [line for line in lines if "retrying" in line and "MLFLOW_HTTP_REQUEST_MAX_RETRIES" in line]
    assert said, err[-3000:]
    assert "Traceback" not in err


def start_server(tmp: Path) -> tuple[subprocess.Popen, int]:
    port, log = free_port(), tmp / "server.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BACKEND_URI": f"sqlite:///{tmp / 'store.db'}"}
    env = {k: v for k, v in env.items() if not k.startswith(("MLFLOW_TRACKING", "MLFLOW_AUTH"))}
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "pipelines.tracking.server", "--port", str(port),
                                 "--workers", "1", "--artifacts", str(tmp / "art"), "--auth-dir",
                                 str(tmp / "auth")], cwd=tmp, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return proc, port
        except OSError:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
    raise AssertionError(log.read_text()[-3000:])


def stop_server(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow  # a real tracking server, a training and the LTSF benchmark against it (~60 s)
def test_a_password_in_the_tracking_uri_reaches_no_console_or_artifact(tmp_path):
    from tests.helpers import small_csv

    proc, port = start_server(tmp_path)
    try:
        uri = f"http://alice:{PASSWORD}@127.0.0.1:{port}/"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": uri}
        tiny_setup(tmp_path)
        fit = subprocess.run([sys.executable, "-m", "pipelines.train", "fit", "--config", "tiny.yaml",
                              "--trainer.max_epochs=1", "--test_after_fit=false"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
        assert fit.returncode == 0, fit.stderr[-3000:]
        ltsf = subprocess.run([sys.executable, "-m", "pipelines.studies.ltsf", "--data",
                               str(small_csv(tmp_path / "s.csv")), "--baselines", "naive", "--horizons", "8",
                               "--lookback", "32", "--seeds", "0", "--out", str(tmp_path / "out")],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert ltsf.returncode == 0, ltsf.stderr[-3000:]
        import mlflow

        client = mlflow.MlflowClient(f"http://127.0.0.1:{port}")
        exp = client.get_experiment_by_name("posenc")
        (run,) = client.search_runs([exp.experiment_id])
        config = Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))).read_text()
    finally:
        stop_server(proc)
    for text in (fit.stdout, fit.stderr, ltsf.stdout, ltsf.stderr, config):
        assert not leaked(text), text[-3000:]
    assert "MLflow run" in fit.stderr and "MLflow parent run" in ltsf.stdout  # the lines are there, masked
    assert yaml.safe_load(config)["trainer"]["logger"]["init_args"]["tracking_uri"].startswith("http://***@")
