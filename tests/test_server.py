"""The MLflow server behind ``make ui`` / ``make tracking-server`` (pipelines/tracking/server.py): loopback
unless told otherwise, a login when reachable from elsewhere, Host headers limited to the name given, and
no secret on a command line or in make's output. The slow test starts a real authenticated server."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pipelines.tracking.server import main, parse_args, plan
from tests.helpers import exit_status

ROOT = Path(__file__).resolve().parents[1]
USER, PASSWORD = "alice", "pw-3b9f1c77e2d4"  # a distinctive password, searched for where it must not be
STORE_PASSWORD = "dbpw-71c9e2a4"
SECRET_VARS = ("MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_AUTH_CONFIG_PATH",
               "MLFLOW_FLASK_SERVER_SECRET_KEY", "BACKEND_URI", "MLFLOW_TRACKING_USERNAME",
               "MLFLOW_TRACKING_PASSWORD")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment without any credential a developer may have set."""
    for name in SECRET_VARS:
        monkeypatch.delenv(name, raising=False)
    return {k: v for k, v in os.environ.items() if k not in SECRET_VARS}


def credentials_file(folder: Path, mode: int = 0o600) -> Path:
    path = folder / "admin.cred"
    path.write_text(f"{USER}:{PASSWORD}\n")
    path.chmod(mode)
    return path


# ------------------------------------------------------------------------------------------ fast
@pytest.mark.parametrize("extra", [["--host", "0.0.0.0", "--name", "mlflow.lab"], ["--host", "10.1.2.3"],
                                   ["--name", "mlflow.lab"], ["--auth"]])
def test_a_reachable_server_without_credentials_is_refused(extra, tmp_path, clean_env, capsys):
    code = exit_status(main, ["--db", str(tmp_path / "m.db"), "--auth-dir", str(tmp_path / "auth"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert "MLFLOW_AUTH_ADMIN_PASSWORD" in err and not (tmp_path / "auth").exists()


def test_every_interface_needs_the_name_clients_use(tmp_path, clean_env, capsys):
    assert exit_status(main, ["--db", str(tmp_path / "m.db"), "--host", "0.0.0.0", "--credentials-file",
                              str(credentials_file(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--name" in err and "SERVER_NAME" in err


@pytest.mark.parametrize("content, mode, expected", [
    (f"{USER}:{PASSWORD}\n", 0o644, "readable by other users"),
    (f"{USER}:short\n", 0o600, "at least 12 characters"),
    (f"{USER}{PASSWORD}\n", 0o600, "user:password"),
    (f"{USER}:{PASSWORD}\nbob:{PASSWORD}\n", 0o600, "user:password"),
])
def test_a_bad_credentials_file_is_one_line(content, mode, expected, tmp_path, clean_env, capsys):
    path = tmp_path / "admin.cred"
    path.write_text(content)
    path.chmod(mode)
    code = exit_status(main, ["--db", str(tmp_path / "m.db"), "--name", "mlflow.lab", "--credentials-file",
                              str(path)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err and PASSWORD not in err


def test_secrets_reach_the_server_through_its_environment_only(tmp_path, clean_env):
    uri = f"postgresql://mlflow:{STORE_PASSWORD}@db.lab:5432/mlflow"
    environ = {**clean_env, "BACKEND_URI": uri, "MLFLOW_AUTH_ADMIN_USERNAME": USER,
               "MLFLOW_AUTH_ADMIN_PASSWORD": PASSWORD}
    args = parse_args(["--host", "0.0.0.0", "--name", "mlflow.lab", "--auth-dir", str(tmp_path / "auth")])
    argv, env, summary = plan(args, environ)
    assert not any(STORE_PASSWORD in a or PASSWORD in a for a in argv)
    assert STORE_PASSWORD not in summary and PASSWORD not in summary and "postgresql://***@db.lab" in summary
    assert env["MLFLOW_BACKEND_STORE_URI"] == uri and "BACKEND_URI" not in env
    assert env["MLFLOW_AUTH_ADMIN_PASSWORD"] == PASSWORD
    assert argv[argv.index("--allowed-hosts") + 1] == "mlflow.lab,mlflow.lab:*"  # no localhost
    assert argv[argv.index("--app-name") + 1] == "basic-auth"
    key = tmp_path / "auth" / "secret_key"
    assert env["MLFLOW_FLASK_SERVER_SECRET_KEY"] == key.read_text() and key.stat().st_mode & 0o077 == 0


def test_loopback_by_default_and_without_login(tmp_path, clean_env):
    argv, env, summary = plan(parse_args(["--db", str(tmp_path / "m.db")]), clean_env)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "--app-name" not in argv and "--allowed-hosts" not in argv and "no login" in summary


MAKE = ["make", "-o", ".venv/.installed", "tracking-server", "UI_HOST=0.0.0.0", "SERVER_NAME=mlflow.lab",
        "PIP_INSTALL=true"]  # never install from a test: a missing driver is not needed to refuse


def store_env(clean_env: dict[str, str]) -> dict[str, str]:
    return {**clean_env, "BACKEND_URI": f"postgresql://mlflow:{STORE_PASSWORD}@127.0.0.1:9/mlflow"}


def test_make_echoes_no_store_password(tmp_path, clean_env):
    """``make -n tracking-server`` with a password in BACKEND_URI: make's echo does not show it."""
    dry = subprocess.run([*MAKE[:1], "-n", *MAKE[1:], f"ARTIFACTS={tmp_path}"], cwd=ROOT,
                         env=store_env(clean_env), capture_output=True, text=True)
    assert dry.returncode == 0 and "pipelines.tracking.server" in dry.stdout
    assert STORE_PASSWORD not in dry.stdout + dry.stderr


# ------------------------------------------------------------------------------------------ slow
@pytest.mark.slow
def test_make_refuses_an_exposed_server_without_login_and_shows_no_password(tmp_path, clean_env):
    """The real ``make tracking-server`` (no admin login given): one error line, exit 2, no password."""
    real = subprocess.run([*MAKE, f"ARTIFACTS={tmp_path}", f"AUTH_DIR={tmp_path / 'auth'}"], cwd=ROOT,
                          env=store_env(clean_env), capture_output=True, text=True, timeout=300)
    errors = [ln for ln in real.stderr.splitlines() if ln.startswith("error: ")]
    assert real.returncode == 2 and len(errors) == 1 and "MLFLOW_AUTH_ADMIN_USERNAME" in errors[0]
    assert STORE_PASSWORD not in real.stdout + real.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url: str, host: str | None = None, login: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if host:
        request.add_header("Host", host)
    if login:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(login).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:  # not listening (yet)
        return 0


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it, from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo.extend(parents.get(tree[-1], []))
    return tree


def wait_healthy(uri: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 300
    while proc.poll() is None and status(f"{uri}/health") != 200:
        assert time.monotonic() < deadline, "the server did not come up in 300 s"
        time.sleep(1)
    assert proc.poll() is None, log.read_text()[-3000:]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_authenticated_server_refuses_anonymous_and_forged_host(tmp_path, clean_env, monkeypatch):
    pytest.importorskip("flask_wtf")
    port, db, log = free_port(), tmp_path / "store.db", tmp_path / "server.log"
    uri = f"http://127.0.0.1:{port}"
    env = {**clean_env, "PYTHONPATH": str(ROOT), "BACKEND_URI": f"sqlite:///{db}"}
    command = [sys.executable, "-m", "pipelines.tracking.server", "--port", str(port), "--workers", "1",
               "--artifacts", str(tmp_path / "art"), "--name", "mlflow.test,127.0.0.1",
               "--credentials-file", str(credentials_file(tmp_path)), "--auth-dir", str(tmp_path / "auth")]
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_healthy(uri, proc, log)
        search = f"{uri}/api/2.0/mlflow/experiments/search?max_results=5"
        assert status(search) == 401
        assert status(search, login=(USER, "wrong-password-123")) == 401
        assert status(search, host="localhost") == 403
        assert status(search, host=f"localhost:{port}", login=(USER, PASSWORD)) == 403  # not the given name
        assert status(search, host=f"mlflow.test:{port}", login=(USER, PASSWORD)) == 200
        cmdlines = [Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")
                    for p in process_tree(proc.pid)]
        assert len(cmdlines) >= 2 and any("uvicorn" in c for c in cmdlines)  # the server and its worker
        assert not any(PASSWORD in c or str(db) in c for c in cmdlines)

        import mlflow

        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
        client = mlflow.MlflowClient(uri)
        run = client.create_run(client.create_experiment("auth-test"))
        client.log_metric(run.info.run_id, "val/loss", 0.25)
        assert client.get_run(run.info.run_id).data.metrics == {"val/loss": 0.25}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert PASSWORD not in log.read_text()
