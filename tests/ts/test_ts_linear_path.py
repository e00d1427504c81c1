"""The Forecaster's linear path: the same-inputs ridge inside the model, the Transformer's weight on
top of it chosen on the validation windows, and the fallback to the ridge alone (logged) when the
Transformer part does not help — so the default config cannot lose much to the ridge on a new series."""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from datamodules.timeseries.datamodule import TimeSeriesDataModule
from pipelines.eval.extrapolation import evaluate
from pipelines.studies import ts_defaults
from pipelines.tasks.forecast.baselines import ForecastBaselines
from pipelines.tasks.forecast.blend import BLEND_GRID, LinearPath, blend_tag
from pipelines.tasks.forecast.model import Forecaster
from posenc import PosencError
from tests.helpers import dm_kwargs, seasonal_frame, task, write_csv

TINY = {"d_model": 16, "n_heads": 2, "n_layers": 2, "plot_examples": 0}


def tiny_data(tmp_path: Path) -> TimeSeriesDataModule:
    """Hourly load with a covariate that is also known over the horizon (``fut``)."""
    csv = write_csv(tmp_path / "load.csv", seasonal_frame(n=720))
    return TimeSeriesDataModule(**dm_kwargs(csv, future_cols=["temp"], eval_lookbacks=[24, 48],
                                            samples_per_epoch=48))


def tiny_model(dm: TimeSeriesDataModule, **over) -> Forecaster:
    torch.manual_seed(0)
    return task(Forecaster, n_targets=dm.n_targets, n_covariates=dm.n_covariates, n_future=dm.n_future,
                      lookback=dm.lookback, horizon=dm.horizon, patch_len=dm.patch_len, head="horizon",
                      linear_path=True, **{**TINY, **over})


def test_the_linear_path_is_the_same_inputs_ridge_and_training_starts_from_it(tmp_path):
    dm = tiny_data(tmp_path)
    assert dm.n_future > 0  # the ridge and the path both get the horizon's known-future inputs
    model = tiny_model(dm)
    model.linear.fit(dm, ForecastBaselines(), future=True)
    ridge = ForecastBaselines().compute(dm)["linear_mse"]
    for weight in (0.0, 1.0):  # the Transformer's output layer starts at zero: any weight gives the ridge
        model.linear.blend.fill_(weight)
        got = evaluate(model, dm, lengths=[24, 48], variants=[]).by_length()
        assert got[24] == pytest.approx(ridge, rel=1e-4)
        assert got[48] == pytest.approx(ridge, rel=1e-4)  # a longer lookback: its last 24 steps


def test_the_weight_with_the_lowest_validation_mse_is_chosen_and_ties_go_to_the_ridge():
    path = LinearPath(lookback=4, n_targets=1, n_covariates=0, horizon=2, n_future=0)
    names = ("loss", "mse", "mae")
    values = {f"val/{m}{blend_tag(w)}": (w - 0.3) ** 2 + 1 for w in BLEND_GRID for m in names}
    out = path.choose({**values, "val/other": 5.0})
    assert float(path.blend) == pytest.approx(0.3) and out["val/mse"] == pytest.approx(1.0)
    assert out["val/mse_linear_path"] == pytest.approx(1.09) and out["val/other"] == 5.0
    assert not any("@" in k for k in out)
    path.choose({f"val/{m}{blend_tag(w)}": 2.0 for w in BLEND_GRID for m in names})
    assert float(path.blend) == 0.0
    line, tags = path.describe()
    assert "fallback" in line and tags["forecast/blend"] == "0"


def test_a_transformer_that_cannot_learn_falls_back_to_the_ridge_and_says_so(tmp_path, lightning_log):
    """A learning rate that wrecks the Transformer: validation picks weight 0, the checkpoint keeps it,
    the test MSE is the ridge's, and the run says so; the metrics name their units."""
    dm = tiny_data(tmp_path)
    model = tiny_model(dm, lr=50.0, warmup_steps=1)
    best = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val/mse", mode="min")
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, callbacks=[best],
                        num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path)
    trainer.fit(model, datamodule=dm)
    val = trainer.callback_metrics
    assert val["val/mse_full_weight"] > 2 * val["val/mse_linear_path"]
    model.linear.blend.fill_(1.0)  # the test must read the weight back from the checkpoint
    trainer.test(model, datamodule=dm, ckpt_path="best")
    assert float(model.linear.blend) == 0.0
    assert "fallback" in lightning_log.text and "forecaster: the registered model is" in lightning_log.text
    got = trainer.callback_metrics
    ridge = ForecastBaselines().compute(dm, starts=sorted(set(model.scored_starts)))["linear_mse"]
    assert float(got["test/mse"]) <= 1.05 * ridge
    assert float(got["test/mse_original"]) == float(got["test/mse"])
    scale = float(dm.target_scale[0])
    assert float(got["test/mse_scaled"]) * scale**2 == pytest.approx(float(got["test/mse"]), rel=1e-4)


def test_the_linear_path_needs_a_lookback():
    with pytest.raises(PosencError, match="linear_path needs model.init_args.lookback"):
        task(Forecaster, lookback=None, linear_path=True, **TINY)


def test_the_benchmark_reads_series_specs_and_rejects_bad_ones():
    s = ts_defaults.parse_series("mine=/data/x.csv:date:load")
    assert s.args == ("--data.init_args.path=/data/x.csv", "--data.init_args.time_col=date",
                      "--data.init_args.target_cols=[load]")
    with pytest.raises(PosencError, match="name=path:time_col:target"):
        ts_defaults.parse_series("mine=/data/x.csv:date")


@pytest.mark.slow  # trains the default config on each shipped series (minutes)
def test_the_default_config_is_within_5_percent_of_the_ridge_on_every_shipped_series(tmp_path, monkeypatch):
    """vic_elec, EPF France, pedestrian and ETTh1's OT (when ../shared/data/ETT/ETTh1.csv is there),
    each with only its data set, short training: test MSE ≤ 1.05 × the same-inputs ridge's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    here = [str(ts_defaults.ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(here))
    code = ts_defaults.main(["--", "--trainer.max_epochs=2", "--data.init_args.samples_per_epoch=2048",
                             "--trainer.enable_progress_bar=false", "--register.register=false"])
    assert code == 0


def test_one_forecasting_base_one_fit_entry_and_one_validation_rule():
    """Every forecaster is a ForecastModule: the linear path is fitted through one method and validation
    follows one rule (the best of the model's weights of its network on the path); the Transformer
    part is TransformerTask's, which DLinear is not."""
    from pipelines.tasks.forecast.linear import DLinearForecaster
    from pipelines.tasks.forecast.module import ForecastModule
    from pipelines.tasks.forecast.patchtst import PatchTSTForecaster
    from pipelines.tasks.transformer import TransformerTask

    for cls in (Forecaster, PatchTSTForecaster, DLinearForecaster):
        assert issubclass(cls, ForecastModule) and cls.fit_linear_path is ForecastModule.fit_linear_path
        assert cls.validation_step is ForecastModule.validation_step
    assert issubclass(Forecaster, TransformerTask) and not issubclass(DLinearForecaster, TransformerTask)
    forecaster = task(Forecaster, lookback=24, horizon=4, linear_path=True, **TINY)
    patchtst = task(PatchTSTForecaster, lookback=32, horizon=4, patch_len=16, patch_stride=8,
                    linear_path=True, **TINY)
    assert forecaster.chooses_blend and not patchtst.chooses_blend  # PatchTST: the LTSF protocol chooses
    assert not forecaster.linear.per_channel and patchtst.linear.per_channel  # one key, two layouts
    assert patchtst.hparams["output"]["linear_path"] and "linear_path" not in patchtst.hparams
    with pytest.raises(PosencError, match="no linear path"):
        task(Forecaster, lookback=24, horizon=4, **TINY).fit_linear_path()
