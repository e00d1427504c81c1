"""Nothing secret or machine-specific in what a run writes (issue 42), through the one scrubber
(:func:`pipelines.console.scrub.scrub_text`): ``run.json``, the tracking server's console line, the logged
model's ``MLmodel`` and its MLflow tags."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, run_cli_in, runs, tiny_setup

PASSWORD = "s3cret-pw-9f2c"


@pytest.mark.parametrize("uri", [
    f"postgresql://db.lab:5432/mlflow?user=mlflow&password={PASSWORD}",
    f"postgresql://db.lab/mlflow?sslmode=require&sslpassword={PASSWORD}&x=1",
    f"https://tracking.lab/api?token={PASSWORD}",
    f"postgresql://mlflow:{PASSWORD}@db.lab/mlflow",
])
def test_the_scrubber_hides_passwords_in_user_info_and_query_parameters(uri):
    from pipelines.console.scrub import scrub_text

    clean = scrub_text(f"store {uri} (see it)")
    assert PASSWORD not in clean and "***" in clean and clean.endswith(" (see it)")


def test_the_tracking_servers_console_masks_a_password_query_parameter(tmp_path, monkeypatch):
    from pipelines.tracking.server import parse_args, plan

    uri = f"postgresql://db.lab:5432/mlflow?user=mlflow&password={PASSWORD}"
    environ = {k: v for k, v in os.environ.items() if "MLFLOW_AUTH" not in k} | {"BACKEND_URI": uri}
    _, env, summary = plan(parse_args(["--auth-dir", str(tmp_path / "auth")]), environ)
    assert PASSWORD not in summary and "password=***" in summary
    assert env["MLFLOW_BACKEND_STORE_URI"] == uri  # the server itself gets the real one


def test_run_json_holds_no_credential_and_is_private(tmp_path):
    from pipelines.tracking.resume import RUN_FILE, _atomic_json

    home = os.path.expanduser("~")
    _atomic_json(tmp_path / RUN_FILE, {"run_id": "abc", "tracking_uri": f"postgresql://bob:{PASSWORD}@db/x",
                                       "where": f"{home}/runs"})
    text = (tmp_path / RUN_FILE).read_text()
    assert PASSWORD not in text and json.loads(text)["run_id"] == "abc"
    assert home == "/" or f"{home}/runs" not in text
    assert stat.S_IMODE((tmp_path / RUN_FILE).stat().st_mode) == 0o600


@pytest.mark.slow  # a real fit that logs and registers its model (~15 s)
def test_the_logged_model_names_no_home_path(tmp_path, monkeypatch):
    """With the project under ``$HOME``: the logged model's ``MLmodel`` names its code file by name alone
    and its MLflow tags (``mlflow.source.name``) show ``~``; the model still loads."""
    import mlflow

    monkeypatch.setenv("HOME", str(ROOT.parent))
    tiny_setup(tmp_path)
    code, _ = run_cli_in(tmp_path, ["fit", "--config", "tiny.yaml", "--trainer.max_epochs=1",
                                    "--test_after_fit=false", "--register.register=true",
                                    "--register.name=portable"])
    assert code == 0
    client, (run,) = runs(tmp_path)
    version = client.get_model_version("portable", "1")
    local = Path(mlflow.artifacts.download_artifacts(version.source, dst_path=str(tmp_path / "dl"),
                                                     tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}"))
    mlmodel = (local / "MLmodel").read_text()
    assert str(ROOT.parent) not in mlmodel
    assert yaml.safe_load(mlmodel)["flavors"]["python_function"]["model_code_path"] == "pyfunc.py"
    (output,) = run.outputs.model_outputs
    logged = client.get_logged_model(output.model_id)
    assert logged.tags and str(ROOT.parent) not in repr(logged.tags)
    assert str(ROOT.parent) not in repr(run.data.tags)
    model = mlflow.pyfunc.load_model(str(local))
    assert model is not None
