"""Nothing the project runs reaches out to the network: MLflow's usage telemetry is off by default."""

from __future__ import annotations

import importlib

import pipelines


def test_importing_the_pipelines_turns_mlflow_telemetry_off(monkeypatch):
    from mlflow.environment_variables import MLFLOW_DISABLE_TELEMETRY

    monkeypatch.delenv("MLFLOW_DISABLE_TELEMETRY", raising=False)
    assert not MLFLOW_DISABLE_TELEMETRY.get()  # MLflow's own default: on
    importlib.reload(pipelines)
    assert MLFLOW_DISABLE_TELEMETRY.get()


def test_a_user_who_wants_telemetry_keeps_it(monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "false")
    importlib.reload(pipelines)
    from mlflow.environment_variables import MLFLOW_DISABLE_TELEMETRY

    assert not MLFLOW_DISABLE_TELEMETRY.get()
