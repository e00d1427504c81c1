"""A forecaster with known-future inputs registers in MLflow and its registered model forecasts.

The input example MLflow records (and runs through ``predict`` before registering) must carry the
horizon rows that hold the known-future columns; the shipped ``configs/ts_forecast.yaml`` (vic_elec,
``future_cols: [Holiday]``) goes through ``python -m pipelines.train`` into a registered version, and
``python -m pipelines.inference.predict --ckpt models:/…`` forecasts a CSV with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from datamodules.timeseries.datamodule import TimeSeriesDataModule
from pipelines.tasks.forecast.model import Forecaster
from tests.helpers import dm_kwargs, seasonal_frame, store_client, task, write_csv

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "configs" / "ts_forecast.yaml"


def promo_model(tmp_path: Path) -> tuple[Forecaster, TimeSeriesDataModule]:
    """A tiny untrained Forecaster over an hourly table whose ``promo`` column is known in advance."""
    df = seasonal_frame().assign(promo=(np.arange(960) % 7 == 0).astype(float))
    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "p.csv", df), covariate_cols=["temp"],
                                          future_cols=["promo"]))
    model = task(Forecaster, n_targets=1, n_covariates=dm.n_covariates, n_future=dm.n_future,
                 horizon=dm.horizon,
                       patch_len=dm.patch_len, d_model=16, n_heads=2, n_layers=2,
                       pe={"class_path": "posenc.RoPE"}).eval()
    model.posenc_inference = model.describe_data(dm)
    return model, dm


def test_the_input_example_carries_the_horizon_rows_of_the_known_future(tmp_path):
    model, dm = promo_model(tmp_path)
    example = model.input_example(dm)  # what registration logs and runs through predict
    L, H = dm.lookback, dm.horizon
    assert len(example) == L + H
    future = example.iloc[L:]
    assert future["load"].isna().all() and future["temp"].isna().all()  # unknown in the future
    np.testing.assert_array_equal(future["promo"], dm.series.covariates[-H:, 1])  # the known future
    assert example.iloc[:L][["load", "temp"]].notna().all().all()
    out = model.predict(example)
    assert len(out) == H and np.isfinite(out["load"]).all()
    assert set(out["origin"]) == {example["when"].iloc[L - 1]}  # the forecast starts after the lookback
    assert list(out["time"]) == list(example["when"].iloc[L:])
    plain = TimeSeriesDataModule(**dm_kwargs(tmp_path / "p.csv"))  # no known-future column: the lookback
    model.posenc_inference = model.describe_data(plain)
    assert len(model.input_example(plain)) == L


def vic_elec_tail(path: Path, lookback: int, horizon: int) -> Path:
    """The last ``lookback + horizon`` vic_elec rows as a user's CSV: the horizon rows keep their time
    and ``Holiday`` (known in advance), with ``Demand`` and ``Temperature`` left empty."""
    from datamodules.timeseries.parse import vic_elec_path

    df = pd.read_csv(vic_elec_path()).tail(lookback + horizon).reset_index(drop=True)
    df.loc[lookback:, ["Demand", "Temperature"]] = np.nan
    df.to_csv(path, index=False)
    return path


@pytest.mark.slow  # 1.5–4.5 min on the shared 2-core CPU: vic_elec (52,608 rows), two interpreters
def test_the_shipped_forecaster_registers_and_its_registered_model_predicts_a_csv(tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "PYTHONPATH": str(ROOT)}
    tiny = ["--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=1",
            "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=2",
            "--data.init_args.batch_size=16", "--data.init_args.samples_per_epoch=32",
            "--trainer.enable_progress_bar=false", "--test_after_fit=false"]
    fit = subprocess.run([sys.executable, "-m", "pipelines.train", "fit", "--config", str(TS), *tiny],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    log = fit.stdout + fit.stderr
    assert fit.returncode == 0, log[-4000:]
    assert "registration failed" not in log, log[-4000:]
    (version,) = store_client(tmp_path).search_model_versions("name='Forecaster-RoPE'")
    assert str(version.version) == "1"

    csv = vic_elec_tail(tmp_path / "x.csv", 336, 48)
    predict = subprocess.run([sys.executable, "-m", "pipelines.inference.predict", "--ckpt",
                              "models:/Forecaster-RoPE/1", "--input", "x.csv", "--output", "out.csv"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert predict.returncode == 0, (predict.stdout + predict.stderr)[-4000:]
    out = pd.read_csv(tmp_path / "out.csv")
    assert list(out["step"]) == list(range(1, 49))  # one day of half-hours after the last demand
    assert np.isfinite(out["Demand"]).all()
    times = pd.read_csv(csv)["Time"]
    assert set(out["origin"]) == {pd.Timestamp(times.iloc[335]).isoformat()}
    assert list(out["time"]) == [pd.Timestamp(t).isoformat() for t in times.iloc[336:]]
