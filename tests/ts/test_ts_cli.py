"""The forecasting configs through the real CLI: a smoke fit into a tmp sqlite MLflow store, bad
input as one ``error:`` line with exit status 2, and every scheme config layered on ts_forecast.yaml."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from tests.helpers import run_cli_in, seasonal_frame, write_csv

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "configs" / "ts_forecast.yaml"
PERIODIC = ROOT / "configs" / "ts_forecast_periodic_rope.yaml"
SCHEMES = sorted((ROOT / "configs" / "posenc").glob("*.yaml"))


def small(csv: Path) -> list[str]:
    """Overrides that shrink the default config to the toy hourly CSV and a tiny model."""
    return [f"--data.path={csv}", "--data.time_col=when", "--data.target_cols=[load]",
            "--data.covariate_cols=[temp]", "--data.timezone=null", "--data.lookback=24", "--data.horizon=6",
            "--data.patch_len=4", "--data.eval_stride=8", "--data.batch_size=16",
            "--data.samples_per_epoch=64",
            "--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=1"]


def run_main(tmp: Path, args: list[str]) -> int:
    """The CLI in-process in ``tmp`` with its own MLflow store (:func:`tests.helpers.run_cli_in`)."""
    return run_cli_in(tmp, args)[0]


@pytest.mark.slow  # ~10 s alone (a real fit, test at 4 lookbacks, MLflow artifacts)
def test_smoke_fit_logs_metrics_baselines_lookbacks_and_the_figure(tmp_path):
    import mlflow

    csv = write_csv(tmp_path / "load.csv", seasonal_frame())
    args = ["fit", "--config", str(TS), *small(csv), "--trainer.max_epochs=1",
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
              "--trainer.enable_progress_bar=false",
              "--data.init_args.samples_per_epoch=128"]  # DLinear's 3 baseline epochs: 6 steps, not 384
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
    code = run_main(tmp_path, ["fit", "--config", str(TS), *small(csv), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith(message) and "Traceback" not in "\n".join(err)
    assert not (tmp_path / "outputs").exists()  # nothing half-written


def instantiate(tmp: Path, *configs: Path, extra: tuple[str, ...] = ()):
    from pipelines.cli import make_cli

    csv = tmp / "load.csv"
    if not csv.exists():
        write_csv(csv, seasonal_frame())
    args = [a for c in configs for a in ("--config", str(c))]
    return make_cli([*args, *small(csv), "--trainer.logger=false", "--trainer.enable_progress_bar=false",
                     *extra], run=False)


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda p: p.stem)
def test_every_scheme_config_layers_on_ts_forecast(tmp_path, scheme):
    cli = instantiate(tmp_path, TS, scheme)
    model, dm = cli.model, cli.datamodule
    assert model.pe.spec()["class_path"] == yaml.safe_load(scheme.read_text())["model"]["init_args"]["pe"][
        "class_path"]
    batch = next(iter(dm.test_dataloader()[0]))
    model.eval()
    with torch.no_grad():
        assert torch.isfinite(model.predict_batch(batch)).all()


def test_periodic_rope_config_pins_the_calendar_cycles():
    from datamodules import TimeSeriesDataModule
    from datamodules.legacy import flatten

    doc, base = yaml.safe_load(PERIODIC.read_text()), yaml.safe_load(TS.read_text())
    data = flatten(doc["data"]["init_args"], TimeSeriesDataModule)
    assert data["periods"] == "calendar"  # 48 and 336 steps on half-hourly vic_elec, 24 and 168 hourly
    assert doc["model"]["init_args"]["pe"]["class_path"] == "posenc.PeriodicRoPE"
    # the rest is the default config: only the encoding, the periods and the patch length differ
    for key in ("periods", "patch_len"):
        data.pop(key)
    base_data = flatten(base["data"]["init_args"], TimeSeriesDataModule)
    base_data.pop("patch_len"), base_data.pop("periods")
    assert data == base_data
    doc["model"]["init_args"].pop("pe"), base["model"]["init_args"].pop("pe")
    assert doc["model"] == base["model"] and doc["trainer"] == base["trainer"]


def test_periodic_rope_config_instantiates_with_token_periods(tmp_path):
    cli = instantiate(tmp_path, PERIODIC, extra=("--data.patch_len=4",))  # hourly toy data: calendar cycles
    assert cli.datamodule.periods == [24.0, 168.0] and cli.model.pe.periods == [6.0, 42.0]
    cli = instantiate(tmp_path, PERIODIC, extra=("--data.patch_len=4", "--data.periods=[24,96]"))
    assert cli.model.pe.periods == [6.0, 24.0]  # steps ÷ patch_len: positions count patches
    cli = instantiate(tmp_path, PERIODIC, extra=("--data.patch_len=2", "--data.periods=estimate",
                                                 "--data.lookback=96", "--data.eval_lookbacks=[96]"))
    assert cli.datamodule.periods == [24.0, 96.0] and cli.model.pe.periods == [12.0, 48.0]
