"""A shared MLflow tracking server on PostgreSQL, end to end (slow; skipped without PostgreSQL).

The test starts its own throwaway PostgreSQL cluster (``initdb`` + ``pg_ctl`` from Debian's
``postgresql`` package, in a temporary folder, on a loopback port) and an authenticated ``mlflow server``
on it (what ``make tracking-server`` runs; every command logs in),
points ``MLFLOW_TRACKING_URI`` at the server and runs, through the real commands: a tiny ``fit``
that registers its model, ``evaluate`` and ``predict`` by run id / model URI, and two ``compare``
commands at the same time. It checks runs, metrics, artifacts and the registered model, then stops
both servers. Needs ``apt-get install postgresql`` and the ``postgres`` extra (psycopg 3)::

    apt-get install -y postgresql && .venv/bin/pip install -e ".[postgres]" && make test-all
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOGIN = ("posenc-admin", "pg-test-5e0d93b1")  # the tracking server's admin, created on its first start


def pg_bin(name: str) -> str | None:
    """A PostgreSQL server program: on PATH, else Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                      key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return versions[-1] if versions else None


def _why_skip() -> str | None:
    if pg_bin("initdb") is None or pg_bin("pg_ctl") is None:
        return "PostgreSQL is not installed (initdb/pg_ctl not found): apt-get install -y postgresql"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "no PostgreSQL driver: pip install -e '.[postgres]' (psycopg 3)"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run initdb as"
    return None


needs_postgres = pytest.mark.skipif(_why_skip() is not None, reason=_why_skip() or "")


def test_logger_tags_reach_mlflow_as_strings(tmp_path):
    """A tracking server's REST API takes string tag values only, but jsonargparse reads the
    quoted seed tag of a compare child (``'0'``) as the integer 0: the CLI turns tags back into
    strings (found by the PostgreSQL test below, where ``compare`` failed on the server)."""
    from tests.helpers import tiny_setup, workdir_with_store

    with workdir_with_store(tmp_path):
        from pipelines.cli import make_cli

        tiny_setup(tmp_path)
        (tmp_path / "tags.yaml").write_text("trainer:\n  logger:\n    class_path: lightning.pytorch.loggers."
                                            "MLFlowLogger\n    init_args:\n      tags: {seed: '0', n: 3}\n")
        cli = make_cli(["--config", "tiny.yaml", "--config", "tags.yaml"], run=False)
        assert cli.trainer.logger.tags == {"seed": "0", "n": "3"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_postgres() -> dict:
    """initdb and postgres refuse to run as root: run them as the package's ``postgres`` user then."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A throwaway cluster on 127.0.0.1:<free port>; yields the SQLAlchemy URI of database ``mlflow``."""
    import psycopg

    home = Path(tempfile.mkdtemp(prefix="posenc-pg-"))
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    data, port = home / "data", free_port()
    subprocess.run([pg_bin("initdb"), "-D", str(data), "-U", "posenc", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True, **as_postgres())
    opts = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run([pg_bin("pg_ctl"), "-D", str(data), "-o", opts, "-l", str(home / "server.log"), "-w",
                    "start"], check=True, capture_output=True, **as_postgres())
    try:
        with psycopg.connect(host="127.0.0.1", port=port, user="posenc", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute("CREATE DATABASE mlflow")
        yield f"postgresql://posenc@127.0.0.1:{port}/mlflow"
    finally:
        subprocess.run([pg_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True,
                       **as_postgres())
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def server(postgres, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """What ``make tracking-server AUTH=1`` runs (pipelines/tracking/server.py: ``mlflow server`` with
    MLflow's basic-auth app) on the cluster; yields (URI, artifacts). Every client below logs in."""
    artifacts, port = tmp_path_factory.mktemp("artifacts"), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BACKEND_URI": postgres,
           "MLFLOW_AUTH_ADMIN_USERNAME": LOGIN[0], "MLFLOW_AUTH_ADMIN_PASSWORD": LOGIN[1]}
    log = open(artifacts.parent / "mlflow-server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.tracking.server", "--artifacts", str(artifacts),
                             "--port", str(port), "--workers", "2", "--auth",
                             "--auth-dir", str(artifacts.parent / "auth")], cwd=artifacts.parent, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if urllib.request.urlopen(f"{uri}/health", timeout=5).status == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, (artifacts.parent / "mlflow-server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "mlflow server did not come up in 300 s"
            time.sleep(1)
        yield uri, artifacts
    finally:
        stop_group(proc)
        log.close()


def stop_group(proc: subprocess.Popen) -> None:
    """End the process group we started (the server and its workers): SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def command(uri: str, cwd: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": uri,
           "MLFLOW_TRACKING_USERNAME": LOGIN[0], "MLFLOW_TRACKING_PASSWORD": LOGIN[1]}
    return subprocess.Popen([sys.executable, "-m", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: int = 900) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return out + err


@pytest.mark.slow
@needs_postgres
def test_fit_evaluate_predict_and_two_compares_share_one_postgres_server(server, tmp_path, monkeypatch):
    import mlflow

    from tests.helpers import tiny_setup, write_fasta

    uri, artifacts = server
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", LOGIN[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", LOGIN[1])
    tiny_setup(tmp_path)
    fit = ["pipelines.train", "fit", "--config", "tiny.yaml", "--register.register=true"]
    finish(command(uri, tmp_path, *fit))
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("posenc").experiment_id])
    assert run.info.status == "FINISHED" and "test/bits_per_base" in run.data.metrics
    assert "val/bits_per_base" in run.data.metrics and run.info.artifact_uri.startswith("mlflow-artifacts:")
    assert "config.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert list(artifacts.rglob("config.yaml")) and list(artifacts.rglob("*.ckpt"))  # on the server's disk
    (version,) = client.search_model_versions("name='DNALanguageModel-RoPE'")
    assert version.run_id == run.info.run_id

    assert not any(k.startswith("extrapolation/") for k in run.data.metrics)
    finish(command(uri, tmp_path, "pipelines.eval.evaluate", run.info.run_id, "--factors", "1", "2"))
    assert "extrapolation/bits_per_base_by_length" in client.get_run(run.info.run_id).data.metrics
    write_fasta(tmp_path / "new.fa", n=300, seed=5)
    finish(command(uri, tmp_path, "pipelines.inference.predict", "--ckpt", "models:/DNALanguageModel-RoPE/1",
                   "--input", "new.fa", "--output", "bits.tsv"))
    assert len((tmp_path / "bits.tsv").read_text().splitlines()) > 1

    procs = [command(uri, tmp_path, "pipelines.studies.compare", "--config", "tiny.yaml", "--schemes", scheme,
                     "--seeds", "0", "--factors", "1", "2", "--experiment", "posenc-compare",
                     "--out", f"cmp-{scheme}")
             for scheme in ("alibi", "none")]
    for proc in procs:  # both at once against the same server and database
        finish(proc)
    exp = client.get_experiment_by_name("posenc-compare").experiment_id
    found = client.search_runs([exp])
    parents = [r for r in found if r.data.tags.get("posenc.compare") == "parent"]
    assert len(parents) == 2 and all(p.info.status == "FINISHED" for p in parents)
    for parent in parents:
        (child,) = [r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert child.info.status == "FINISHED"
        assert "extrapolation/bits_per_base_by_length" in child.data.metrics
        files = {a.path for a in client.list_artifacts(parent.info.run_id)}
        assert {"comparison.md", "comparison.csv"} <= files
