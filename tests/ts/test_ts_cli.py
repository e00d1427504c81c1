"""The forecasting configs through the real CLI: a smoke fit into a tmp sqlite MLflow store and bad
input as one ``error:`` line with exit status 2 (every scheme config layered on ts_forecast.yaml:
tests/ts/test_ts_configs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers import run_cli_in, seasonal_frame, ts_cli_args, write_csv

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "configs" / "ts_forecast.yaml"


def run_main(tmp: Path, args: list[str]) -> int:
    """The CLI in-process in ``tmp`` with its own MLflow store (:func:`tests.helpers.run_cli_in`)."""
    return run_cli_in(tmp, args)[0]


@pytest.mark.slow  # ~10 s alone (a real fit, test at 4 lookbacks, MLflow artifacts)
def test_smoke_fit_logs_metrics_baselines_lookbacks_and_the_figure(tmp_path):
    import mlflow

    csv = write_csv(tmp_path / "load.csv", seasonal_frame())
    args = ["fit", "--config", str(TS), *ts_cli_args(csv), "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=2",
            "--trainer.enable_progress_bar=false"]
    assert run_main(tmp_path, args) == 0
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("posenc").experiment_id])
    m = run.data.metrics
    for key in ("test/mse", "test/mae", "baseline/seasonal_naive_mse", "baseline/seasonal_naive_mae",
                "baseline/linear_mse", "baseline/linear_mae", "test/mse_L24", "test/mse_L192"):
        assert key in m and m[key] == m[key] and m[key] >= 0, key
    assert m["test/mse"] == pytest.approx(m["test/mse_L24"], rel=1e-5)
    by_lookback = client.get_metric_history(run.info.run_id, "test/mse_by_lookback")
    assert sorted(x.step for x in by_lookback) == [24, 48, 96, 192]  # step = lookback
    assert sorted(x.step for x in client.get_metric_history(run.info.run_id, "test/mse_by_horizon")) == list(
        range(1, 7))
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"forecast.png", "horizon_metrics.csv", "lookback_metrics.csv", "config.yaml"} <= artifacts
    png = Path(client.download_artifacts(run.info.run_id, "forecast.png", str(tmp_path)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def users_hourly_file(tmp_path: Path) -> list[str]:
    """Someone's own hourly ``temp,date`` CSV, and the only settings the default config needs for it:
    the three data settings that name the file and its columns, plus a tiny model and budget."""
    n = 2000
    rng = np.random.default_rng(0)
    t = np.arange(n)
    temp = 15 + 5 * np.sin(2 * np.pi * (t - 6) / 24) + 2 * np.sin(2 * np.pi * t / 168) + rng.normal(0, 0.5, n)
    dates = pd.date_range("2023-01-01", periods=n, freq="1h").strftime("%Y-%m-%d %H:%M:%S")
    pd.DataFrame({"temp": temp, "date": dates}).to_csv(tmp_path / "x.csv", index=False)
    data = ["--data.init_args.path=x.csv", "--data.init_args.time_col=date",
            "--data.init_args.target_cols=[temp]"]
    budget = ["--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=2",
              "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
              "--trainer.enable_progress_bar=false"]
    return ["fit", "--config", str(TS), *data, *budget]


def check_users_run(tmp_path: Path, out: str) -> None:
    """The log names the inferred step and the seasonal-naive period; both reach MLflow."""
    assert "x.csv: 2000 rows, step 1h (median)" in out
    # the file has a weekly swing: of the calendar cycles in the lookback (24, 168), 168 forecasts the
    # validation windows best
    how = "weekly cycle of 1h data: the best on the validation windows of daily 24, weekly 168"
    assert f"seasonal naive: period 168 steps = 7d ({how})" in out
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("posenc").experiment_id])
    m, params = run.data.metrics, run.data.params
    assert m["baseline/season_period"] == 168 and params["data/step"] == "1h"
    assert params["baseline/season_period_from"] == how
    assert params["source/covariate_cols"] == "None" and params["seasonality/calendar"] == "auto"  # as given
    for key in ("test/mse", "baseline/linear_mse", "baseline/linear_ar_mse", "baseline/seasonal_naive_mse"):
        assert np.isfinite(m[key]), key


def test_a_users_hourly_file_trains_with_only_path_time_col_and_target_cols(tmp_path, lightning_log):
    assert run_main(tmp_path, users_hourly_file(tmp_path)) == 0
    check_users_run(tmp_path, lightning_log.text)


@pytest.mark.slow  # ~30 s: a fresh interpreter, as `make train` runs it
def test_a_users_hourly_file_through_make_train_prints_step_and_period(tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    proc = subprocess.run([sys.executable, "-m", "pipelines.train", *users_hourly_file(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    check_users_run(tmp_path, out)  # on the terminal, not only in Python's logging


@pytest.mark.parametrize(
    ("mutate", "extra", "message"),
    [
        (None, ["--data.time_col=ts"], "error: load.csv: timestamp column 'ts' not found"),
        (None, ["--data.target_cols=[demand]"], "error: load.csv: target column 'demand' not found"),
        (lambda d: d.assign(load=d.load.astype(object).where(d.index != 5, "abc")), [],
         "error: load.csv: column 'load' has a non-numeric value 'abc' at row 5 (line 7)"),
        (lambda d: d.head(20), [], "error: load.csv: the series has 20 rows, shorter than one window"),
        (lambda d: d.assign(when=d.when.where(d.index != 9, "yesterday")), [],
         "error: load.csv: unparseable timestamp 'yesterday' in column 'when' at row 9 (line 11)"),
    ],
)
def test_bad_input_exits_2_with_one_error_line(tmp_path, capsys, mutate, extra, message):
    df = seasonal_frame()
    csv = write_csv(tmp_path / "load.csv", mutate(df) if mutate else df)
    code = run_main(tmp_path, ["fit", "--config", str(TS), *ts_cli_args(csv), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith(message) and "Traceback" not in "\n".join(err)
    assert not (tmp_path / "outputs").exists()  # nothing half-written
