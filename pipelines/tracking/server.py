"""``python -m pipelines.tracking.server``: the MLflow server behind ``make ui`` and ``make tracking-server``.

What it adds to a plain ``mlflow server``:

* it listens on 127.0.0.1 unless ``--host`` names another interface;
* a server that other machines reach (a non-loopback ``--host``, or a ``--name`` that clients use
  through a TLS reverse proxy, docs/scaling.md) runs MLflow's basic-auth app and accepts only the
  ``Host`` headers of that name; without admin credentials it does not start (one line, exit 2);
* secrets stay off every command line: the store URI (which may hold a database password) comes
  from ``$BACKEND_URI`` or ``--backend-uri-file``, the admin credentials from
  ``MLFLOW_AUTH_ADMIN_USERNAME``/``MLFLOW_AUTH_ADMIN_PASSWORD`` or ``--credentials-file``
  (``user:password``, readable by its owner only); ``mlflow server`` gets them through its
  environment, and the store URI is printed with its password masked.

The auth app keeps its users in ``<auth dir>/basic_auth.db``; the admin is created there on the first
start, and later starts do not change that user's password (MLflow's update-password API does).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import stat
import sys
from pathlib import Path

from pipelines.console import user_errors_exit
from pipelines.console.scrub import scrub_text
from posenc import PosencError

ADMIN_USER, ADMIN_PASSWORD = "MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD"
AUTH_CONFIG, SECRET_KEY = "MLFLOW_AUTH_CONFIG_PATH", "MLFLOW_FLASK_SERVER_SECRET_KEY"
MIN_PASSWORD = 12  # MLflow's own password policy, checked here to fail before the server starts


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address only this machine reaches (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def read_secret_file(path: Path, what: str) -> str:
    """The stripped text of a file holding a secret; refused if others may read it (like ssh does)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not a text file"
        raise PosencError(f"{path}: cannot read the {what} ({reason})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PosencError(f"{path}: the {what} file is readable by other users; run chmod 600 {path}")
    if not text:
        raise PosencError(f"{path}: the {what} file is empty")
    return text


def backend_uri(args: argparse.Namespace, environ: dict[str, str]) -> str:
    """The store URI: ``--db`` (a sqlite file), ``--backend-uri-file`` or ``$BACKEND_URI``."""
    given = [x for x in (args.db, args.backend_uri_file, environ.get("BACKEND_URI")) if x]
    if len(given) != 1:
        raise PosencError("give the tracking store once: --db <sqlite file>, --backend-uri-file <file> or "
                          f"BACKEND_URI=<uri> in the environment ({len(given)} given)")
    if args.db:
        return f"sqlite:///{args.db}"
    if args.backend_uri_file:
        return read_secret_file(Path(args.backend_uri_file), "store URI")
    return environ["BACKEND_URI"]


def admin_credentials(args: argparse.Namespace, environ: dict[str, str]) -> tuple[str, str]:
    """(user, password) from ``--credentials-file`` or the ``MLFLOW_AUTH_ADMIN_*`` variables."""
    if args.credentials_file:
        text = read_secret_file(Path(args.credentials_file), "credentials")
        user, _, password = text.partition(":") if "\n" not in text else ("", "", "")
        where = f"{args.credentials_file}: expected one line user:password;"
    else:
        user, password = environ.get(ADMIN_USER, ""), environ.get(ADMIN_PASSWORD, "")
        where = f"set {ADMIN_USER} and {ADMIN_PASSWORD} (or --credentials-file user:password);"
    if not user or not password:
        raise PosencError(f"{where} a server reachable from other machines needs an admin login")
    if len(password) < MIN_PASSWORD:
        raise PosencError(f"{where} the admin password needs at least {MIN_PASSWORD} characters")
    return user, password


def allowed_hosts(host: str, names: list[str]) -> list[str]:
    """The ``Host`` headers accepted: each name (default: ``host`` itself) with and without a port.
    Empty for a loopback server with no name: MLflow's default (localhost, private addresses)."""
    if not names and is_loopback(host):
        return []
    if not names and host in ("0.0.0.0", "::", "[::]"):
        raise PosencError(f"--host {host} listens on every interface: give --name <the host name clients "
                          "use> (SERVER_NAME= on make), so that only requests for that name are served")
    return [h for name in (names or [host]) for h in (name, f"{name}:*")]


def auth_environment(auth_dir: Path, user: str, password: str, environ: dict[str, str]) -> dict[str, str]:
    """What the basic-auth app reads: its config file (unless ``$MLFLOW_AUTH_CONFIG_PATH`` names one),
    the admin login and a static secret key (kept in the auth folder so restarts keep sessions)."""
    auth_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {ADMIN_USER: user, ADMIN_PASSWORD: password}
    if not environ.get(AUTH_CONFIG):
        config = auth_dir / "basic_auth.ini"
        users = str((auth_dir / "basic_auth.db").resolve()).replace("%", "%%")  # configparser syntax
        config.write_text(f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{users}\n")
        env[AUTH_CONFIG] = str(config.resolve())
    if not environ.get(SECRET_KEY):
        key_file = auth_dir / "secret_key"
        if not key_file.exists():
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32))
        env[SECRET_KEY] = read_secret_file(key_file, "secret key")
    return env


def plan(args: argparse.Namespace, environ: dict[str, str]) -> tuple[list[str], dict[str, str], str]:
    """(argv, environment, summary line) of the ``mlflow server`` to start; no secret in argv or summary."""
    uri = backend_uri(args, environ)
    exposed = bool(args.name) or not is_loopback(args.host)
    env = {k: v for k, v in environ.items() if k not in ("BACKEND_URI", "MAKEFLAGS", "MFLAGS")}
    env.update(MLFLOW_BACKEND_STORE_URI=uri, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    argv = [sys.executable, "-m", "mlflow", "server", "--host", args.host, "--port", str(args.port),
            "--workers", str(args.workers)]
    if args.artifacts:
        argv += ["--artifacts-destination", args.artifacts]
    hosts = allowed_hosts(args.host, args.name)
    if hosts:
        argv += ["--allowed-hosts", ",".join(hosts)]
    login = "no login (loopback only)"
    if exposed or args.auth:
        user, password = admin_credentials(args, environ)
        env.update(auth_environment(Path(args.auth_dir), user, password, environ))
        argv += ["--app-name", "basic-auth"]
        login = f"basic auth, admin {user!r}"
    summary = (f"MLflow server on http://{args.host}:{args.port} ({login}); store {scrub_text(uri)}"
               + (f"; Host headers: {', '.join(args.name)}" if args.name else ""))
    return argv, env, summary


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m pipelines.tracking.server",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="sqlite store file (make ui); else $BACKEND_URI or --backend-uri-file")
    ap.add_argument("--backend-uri-file", help="file holding the store URI (it may contain a password)")
    ap.add_argument("--artifacts", help="where artifacts go (folder or s3://…); default ./mlartifacts")
    ap.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--name", action="append", default=[],
                    help="host name clients use (repeatable): the only Host headers accepted; implies --auth")
    ap.add_argument("--auth", action="store_true", help="require a login even on loopback")
    ap.add_argument("--credentials-file", help="admin login as one line user:password (mode 600)")
    ap.add_argument("--auth-dir", default="mlflow-auth", help="the auth app's users database and key")
    args = ap.parse_args(argv)
    args.name = [n for item in args.name for n in item.split(",") if n.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    """Start the server (this process becomes ``mlflow server``); a mistake is one ``error:`` line, exit 2."""
    args = parse_args(argv)
    with user_errors_exit():
        if args.port <= 0 or args.workers <= 0:
            raise PosencError(f"--port and --workers must be positive (got {args.port}, {args.workers})")
        command, env, summary = plan(args, dict(os.environ))
    print(summary, file=sys.stderr, flush=True)
    os.execve(command[0], command, env)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
