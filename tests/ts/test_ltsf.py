"""The LTSF protocol (datamodules.timeseries.ltsf): split rows, window counts, a train-only scaler,
the scaled metrics, the PatchTST layout and the benchmark command end to end on a tiny series."""

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

from datamodules.timeseries.ltsf import (
    ETT_HOURLY_BORDERS,
    n_windows,
    read_ltsf,
    scale_protocol,
    scaled_errors,
    split_bounds,
)
from posenc import PosencError
from tests.helpers import shared_data, small_csv, small_protocol, task

ROOT = Path(__file__).resolve().parents[2]
ETTH1 = shared_data() / "ETT" / "ETTh1.csv"
COLUMNS = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]


def etth1():
    if not ETTH1.is_file():
        pytest.skip(f"ETTh1 not found at {ETTH1} (the shared data folder is absent)")
    return read_ltsf(ETTH1)


def synthetic(n: int = 14400, c: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None]
    return np.sin(2 * np.pi * t / 24) + 0.1 * t / n + rng.normal(0, 0.1, (n, c)) + np.arange(c)


def test_split_rows_are_the_literatures():
    assert split_bounds(17420) == {"train": (0, 8640), "val": (8640, 11520), "test": (11520, 14400)}
    with pytest.raises(PosencError, match="at least 14400 rows"):
        split_bounds(14399, source="short.csv")


@pytest.mark.parametrize("lookback,horizon,split,expected", [
    (336, 96, "test", 2785),  # the count the literature's all-windows re-runs score
    (336, 720, "test", 2161),
    (512, 96, "test", 2785),  # val/test lookbacks reach into the previous split
    (336, 96, "val", 2785),
    (336, 96, "train", 8640 - 336 - 96 + 1),  # train windows cannot reach before row 0
])
def test_window_counts(lookback, horizon, split, expected):
    data = scale_protocol(synthetic(), ["a", "b", "c"])
    assert n_windows(data.bounds[split], lookback, horizon) == expected
    starts = data.starts(split, lookback, horizon)
    assert len(starts) == expected
    lo, hi = data.bounds[split]
    assert starts.min() == max(lo, lookback) and starts.max() + horizon == hi
    x, y = data.windows(split, lookback, horizon)
    assert x.shape == (expected, lookback, 3) and y.shape == (expected, horizon, 3)
    np.testing.assert_array_equal(y[0], data.values[starts[0] : starts[0] + horizon])
    np.testing.assert_array_equal(x[-1], data.values[starts[-1] - lookback : starts[-1]])


def test_scaler_never_sees_a_val_or_test_row():
    raw = synthetic()
    base = scale_protocol(raw, ["a", "b", "c"])
    changed = raw.copy()
    changed[8640:] *= 100.0  # every val/test row (and the unused tail) different
    other = scale_protocol(np.concatenate([changed, changed[:50]]), ["a", "b", "c"])
    np.testing.assert_array_equal(base.scaler.mean_, other.scaler.mean_)
    np.testing.assert_array_equal(base.scaler.scale_, other.scaler.scale_)
    np.testing.assert_allclose(base.scaler.mean_, raw[:8640].mean(axis=0))
    np.testing.assert_allclose(base.values[:8640].mean(axis=0), 0.0, atol=1e-5)
    assert len(other.values) == ETT_HOURLY_BORDERS[2]  # rows past the test split are dropped
    changed[8639] += 1.0  # a train row does reach it
    assert not np.array_equal(scale_protocol(changed, ["a", "b", "c"]).scaler.mean_, base.scaler.mean_)


def test_scaled_errors_average_every_window_step_and_channel():
    truth = np.zeros((2, 3, 2))
    pred = np.zeros((2, 3, 2))
    pred[0, 0, 0] = 2.0  # one entry off by 2 of 12, one by -1
    pred[1, 2, 1] = -1.0
    assert scaled_errors(pred, truth) == {"mse_scaled": 5.0 / 12, "mae_scaled": 3.0 / 12}
    with pytest.raises(PosencError, match="shape"):
        scaled_errors(pred[:1], truth)


def test_etth1_protocol():
    data = etth1()
    assert data.columns == COLUMNS and data.values.shape == (14400, 7)
    assert len(data.starts("test", 336, 96)) == 2785
    train = pd.read_csv(ETTH1).iloc[:8640, 1:].to_numpy()
    np.testing.assert_allclose(data.scaler.mean_, train.mean(axis=0))
    np.testing.assert_allclose(data.scaler.scale_, train.std(axis=0))  # population std, as sklearn


def test_bad_file_says_what_is_wrong(tmp_path):
    with pytest.raises(PosencError, match="no such file"):
        read_ltsf(tmp_path / "missing.csv")
    short = tmp_path / "short.csv"
    pd.DataFrame({"date": pd.date_range("2020", periods=100, freq="h"), "a": np.arange(100.0)}).to_csv(
        short, index=False)
    with pytest.raises(PosencError, match="short.csv: the protocol needs at least 14400 rows"):
        read_ltsf(short, protocol="ett")
    with pytest.raises(PosencError, match="no time column 'when'"):
        read_ltsf(short, time_col="when")


def test_patchtst_layout():
    from pipelines.tasks.forecast.patchtst import PatchTSTForecaster, n_patches, strided_patches

    assert n_patches(336, 16, 8) == 42 and n_patches(512, 16, 8) == 64
    seq = torch.arange(32.0)[None]  # (1, 32)
    patches = strided_patches(seq, 16, 8)  # (1, 4, 16)
    assert patches.shape == (1, n_patches(32, 16, 8), 16)
    assert patches[0, 1, 0] == 8 and patches[0, -1, -1] == 31  # the end padded with the last value
    model = task(PatchTSTForecaster, lookback=32, patch_len=16, patch_stride=8, n_targets=3, horizon=5,
                               d_model=16, n_heads=2, n_layers=2, d_ff=32, plot_examples=0,
                               pe={"class_path": "posenc.Learned", "init_args": {"max_len": 8}})
    assert model(torch.randn(4, 32, 3)).shape == (4, 5, 3)
    with pytest.raises(PosencError, match="lookback 32, got 48"):
        model(torch.randn(4, 48, 3))


def write_tiny_ett(path: Path, n: int = 14400) -> Path:
    raw = synthetic(n, 2)
    frame = pd.DataFrame(raw, columns=["a", "b"])
    frame.insert(0, "date", pd.date_range("2016-07-01", periods=n, freq="h").strftime("%Y-%m-%d %H:%M:%S"))
    frame.to_csv(path, index=False)
    return path


TINY_MODEL = """\
model:
  class_path: pipelines.tasks.forecast.patchtst.PatchTSTForecaster
  init_args: {patch_len: 16, patch_stride: 8, d_model: 16, n_heads: 2, n_layers: 2, d_ff: 32,
              linear_path: true, lr: 0.001, pe: {class_path: posenc.Learned, init_args: {max_len: 8}}}
data: {init_args: {batch_size: 64, samples_per_epoch: 64}}
trainer:
  max_epochs: 1
  callbacks:
    - {class_path: lightning.pytorch.callbacks.EarlyStopping, init_args: {monitor: val/loss, patience: 1}}
    - {class_path: pipelines.studies.ltsf.fit.LTSFProtocol, init_args: {name: tiny}}
"""


def run_benchmark(tmp_path: Path, *extra: str, data: Path | None = None,
                  models: tuple[str, ...] = (TINY_MODEL,)) -> subprocess.CompletedProcess:
    data = data or write_tiny_ett(tmp_path / "ETTh_tiny.csv")  # an ETT name: the ETT rule
    configs = []
    for i, text in enumerate(models):
        configs.append(tmp_path / f"model{i}.yaml")
        configs[-1].write_text(text)
    cmd = [sys.executable, "-m", "pipelines.studies.ltsf", "--data", str(data), "--lookback", "32",
           "--horizons", "8", "--seeds", "0", "--configs", *map(str, configs),
           "--out", str(tmp_path / "out"), "--threads", "1", *extra]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def benchmark_runs(tmp_path: Path) -> tuple[object, list, object]:
    """(parent run, its children, client) of the ``posenc-ltsf`` experiment in tmp_path's store."""
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("posenc-ltsf").experiment_id])
    parent = [r for r in runs if r.data.tags.get("posenc.ltsf") == "parent"]
    assert len(parent) == 1
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id]
    return parent[0], children, client


@pytest.mark.slow
def test_benchmark_command_logs_every_child_with_units(tmp_path):
    done = run_benchmark(tmp_path, "--baselines", "naive", "ridge")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = pd.read_csv(tmp_path / "out" / "results.csv")
    assert list(rows.model) == ["naive", "ridge", "tiny"]
    assert (rows.n_test_windows == 2880 - 8 + 1).all()
    assert rows["test/mse_scaled"].notna().all() and rows["val/mse_scaled"].notna().all()
    _, children, _ = benchmark_runs(tmp_path)
    assert len(children) == 3
    for child in children:
        units = {"test/mse_scaled", "test/mae_scaled", "val/mse_scaled", "time/cpu_s"}
        assert units <= set(child.data.metrics)
    assert "| tiny |" in (tmp_path / "out" / "summary.md").read_text()


TINY_WARM = TINY_MODEL.replace("{name: tiny}", "{name: tiny_warm, linear_warm_start: true}")


@pytest.mark.slow
def test_etth1_children_are_nested_runs_of_the_sweep_runner(tmp_path):
    data = ETTH1.resolve()
    etth1()  # skips when the shared file is absent
    done = run_benchmark(tmp_path, "--baselines", "ridge", data=data, models=(TINY_MODEL, TINY_WARM))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = pd.read_csv(tmp_path / "out" / "results.csv").set_index("model")
    parent, children, client = benchmark_runs(tmp_path)
    by_model = {c.data.tags["posenc.ltsf.model"]: c for c in children}
    assert sorted(by_model) == ["ridge", "tiny", "tiny_warm"]
    for name, child in by_model.items():
        tags = child.data.tags
        assert child.info.status == "FINISHED" and child.info.run_name == f"{name}-H8-seed0"
        assert (tags["posenc.ltsf.horizon"], tags["posenc.ltsf.seed"], tags["posenc.ltsf.complete"]) == (
            "8", "0", "true")
        assert child.data.metrics["test/mse_scaled"] == rows.loc[name, "test/mse_scaled"]
        assert tags["posenc.ltsf.chosen"] == rows.loc[name, "chosen"]
    for name in ("tiny", "tiny_warm"):  # trained by train_run: its key, and the Lightning CLI's config
        child = by_model[name]
        assert len(child.data.tags["posenc.ltsf.key"]) == 16
        config = yaml.safe_load(Path(client.download_artifacts(child.info.run_id, "config.yaml",
                                                                 str(tmp_path))).read_text())
        assert config["data"]["init_args"]["source"]["path"] == str(data) and config["seed_everything"] == 0
        assert Path(child.data.tags["posenc.ltsf.checkpoint"]).is_file()
    assert "linear_alpha=" in rows.loc["tiny_warm", "chosen"]
    assert "posenc.ltsf.key" not in by_model["ridge"].data.tags  # a baseline is fitted, not trained


@pytest.mark.parametrize("extra,message", [
    (["--baselines", "arima"], "error: unknown --baselines arima; known: naive ridge lightgbm ets"),
    (["--horizons", "0"], "error: --horizons must be positive, got [0]"),
    pytest.param(["--accelerator", "gpu"],
                 "error: --accelerator gpu: no CUDA GPU is visible here (use cpu, or auto)",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")),
])
def test_benchmark_bad_input_is_one_line(tmp_path, capsys, extra, message):
    from pipelines.studies.ltsf.run import main

    with pytest.raises(SystemExit) as exc:
        main(["--data", str(tmp_path / "x.csv"), "--out", str(tmp_path / "out"), *extra])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == message
    assert not (tmp_path / "out").exists()


def test_baselines_on_the_protocols_windows():
    from pipelines.studies.ltsf.models import ridge_run, seasonal_naive_run

    data = small_protocol()
    truth = data.windows("test", 48, 8)[1]
    naive = seasonal_naive_run(data, 48, 8, seed=0, period=24)
    assert naive.pred.shape == truth.shape == (200 - 8 + 1, 8, 2)
    assert scaled_errors(naive.pred, truth)["mse_scaled"] > 1e-3  # the period-7 term is not daily
    assert scaled_errors(seasonal_naive_run(data, 48, 8, 0, period=168).pred, truth)["mse_scaled"] < 1e-9
    ridge = ridge_run(data, 48, 8, seed=0)  # the series is exactly linear in its lags
    assert scaled_errors(ridge.pred, truth)["mse_scaled"] < 1e-3 and ridge.params["alpha"] > 0


def test_lightgbm_forecasts_every_window_directly():
    pytest.importorskip("lightgbm", reason="lightgbm is not installed (the optional ltsf extra)")
    from pipelines.studies.ltsf.trees import anchors, lightgbm_run

    data = small_protocol()
    truth = data.windows("test", 336, 8)[1]
    result = lightgbm_run(data, 336, 8, seed=0, threads=1)
    assert result.pred.shape == truth.shape and result.params["strategy"] == "direct"
    assert list(anchors(8)) == list(range(8)) and len(anchors(720)) == 24 and anchors(720)[-1] == 719
    naive = scaled_errors(np.repeat(data.windows("test", 336, 8)[0][:, -1:], 8, axis=1), truth)["mse_scaled"]
    assert scaled_errors(result.pred, truth)["mse_scaled"] < naive  # better than repeating the last value


def test_raw_linear_path_starts_as_the_ridge_baseline():
    from pipelines.studies.ltsf.models import forecast, ridge_run, warm_start
    from pipelines.tasks.forecast.patchtst import PatchTSTForecaster

    data = small_protocol()
    data.values = data.values + np.random.default_rng(0).normal(0, 0.1, data.values.shape)  # not exact
    model = task(PatchTSTForecaster, lookback=48, n_targets=2, horizon=8, d_model=16, n_heads=2, n_layers=1,
                               d_ff=32, linear_path=True, linear_input="raw", revin_affine=False, pe=None)
    warm_start(model, data, 48, 8)
    xv, yv = data.windows("val", 48, 8)
    ridge = ridge_run(data, 48, 8, seed=0)
    start = scaled_errors(forecast(model, xv), yv)["mse_scaled"]
    assert start == pytest.approx(ridge.val["mse_scaled"], rel=1e-4)


LEGACY_PATCHTST = ROOT / "tests" / "fixtures" / "legacy_patchtst"


@pytest.mark.parametrize("mode", ["revin", "raw"])
def test_a_patchtst_checkpoint_of_the_nn_linear_path_loads_and_forecasts_as_before(mode):
    """The fixture was saved when PatchTST's linear path was an ``nn.Linear`` (``lookback_linear``):
    read (read_checkpoint) or restored by Lightning (on_load_checkpoint), it is the forecasters' one
    LinearPath and forecasts what that code forecast: to the bit on the CPU that saved it, to float32
    rounding on another (the fixture came from an Intel host; BLAS kernels round differently per CPU),
    and the two routes agree to the bit with each other."""
    from pipelines.inference.loading import model_from_checkpoint, read_checkpoint
    from pipelines.tasks.forecast.blend import LinearPath
    from pipelines.tasks.forecast.model import Forecaster
    from pipelines.tasks.forecast.patchtst import PatchTSTForecaster

    path = LEGACY_PATCHTST / f"patchtst_{mode}.ckpt"
    io = torch.load(LEGACY_PATCHTST / f"patchtst_{mode}_io.pt")
    model = model_from_checkpoint(read_checkpoint(path), str(path)).eval()
    assert isinstance(model.linear, LinearPath) and model.linear.fitted and model.linear.per_channel
    assert type(model.linear) is type(task(Forecaster, lookback=32, linear_path=True, pe=None).linear)
    raw = torch.load(path, map_location="cpu", weights_only=True)
    assert "lookback_linear.weight" in raw["state_dict"]  # the old spelling, on disk
    restored = PatchTSTForecaster(**read_checkpoint(path)["hyper_parameters"])
    restored.on_load_checkpoint(raw)  # as Lightning's ckpt_path restore calls it, before the weights load
    restored.load_state_dict(raw["state_dict"])
    with torch.no_grad():
        y = model(io["x"])
        assert torch.equal(restored.eval()(io["x"]), y)
    torch.testing.assert_close(y, io["y"], rtol=1e-5, atol=1e-6)  # a few float32 ulp at most


@pytest.mark.parametrize(("lookback", "horizon", "batch", "channels"),
                         [(32, 4, 3, 2), (336, 96, 128, 7), (48, 720, 1, 1)])
def test_the_per_channel_path_has_the_frozen_nn_linears_arithmetic(lookback, horizon, batch, channels):
    """Bit for bit as the frozen ``nn.Linear`` PatchTST trained with before (BLAS rounds other layouts of
    the same product differently, which would move trained numbers), on rows and on whole windows."""
    from pipelines.tasks.forecast.blend import LinearPath

    torch.manual_seed(0)
    lin = torch.nn.Linear(lookback, horizon).requires_grad_(False)
    path = LinearPath(lookback, channels, 0, horizon, 0, per_channel=True)
    path.coef.copy_(lin.weight.T)
    path.intercept.copy_(lin.bias)
    x = torch.randn(batch, lookback, channels)
    rows = x.permute(0, 2, 1).reshape(batch * channels, lookback)  # (B·C, L)
    assert torch.equal(path.rows(rows), lin(rows))
    assert torch.equal(path(x), lin(x.permute(0, 2, 1)).permute(0, 2, 1))


def test_warm_started_model_starts_as_ridge_and_never_ends_worse_on_val(tmp_path):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from datamodules.config import Loader
    from datamodules.timeseries.config import LTSFSplit, LTSFWindows, Source
    from datamodules.timeseries.ltsf_data import LTSFDataModule
    from pipelines.studies.ltsf.fit import LTSFProtocol
    from pipelines.studies.ltsf.models import forecast
    from pipelines.tasks.forecast.patchtst import PatchTSTForecaster

    dm = LTSFDataModule(Source(path=str(small_csv(tmp_path / "small.csv")), time_col="date"),
                        LTSFSplit(borders=(600, 800, 1000)), LTSFWindows(lookback=48, horizon=8),
                        Loader(batch_size=32, samples_per_epoch=64))
    L.seed_everything(0)
    model = task(PatchTSTForecaster, lookback=48, n_targets=2, horizon=8, d_model=16, n_heads=2, n_layers=2,
                               d_ff=32, linear_path=True, revin_affine=False, lr=0.01, pe=None,
                               plot_examples=0)
    protocol = LTSFProtocol(linear_warm_start=True)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path,
                        callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val/loss"), protocol])
    trainer.fit(model, datamodule=dm)
    start, result = protocol.start, protocol.result
    assert start["val_at_start"] < 1e-3  # the linear forecast, exact here
    assert start["linear_alpha"] > 0 and model.linear.fitted  # a fixed ridge: buffers, not parameters
    assert not [name for name, _ in model.named_parameters() if name.startswith("linear.")]
    assert result["metrics"]["val/mse_scaled"] <= start["val_at_start"] + 1e-9
    assert result["metrics"]["test/mse_scaled"] == scaled_errors(
        forecast(model, dm.data.windows("test", 48, 8)[0]), dm.data.windows("test", 48, 8)[1])["mse_scaled"]
    assert "kept" in result["chosen"]  # the exact start is not beaten: the run's checkpoint is the start
    best = trainer.checkpoint_callback.best_model_path
    assert Path(best).name == "warm_start.ckpt"
    state = torch.load(best, map_location="cpu", weights_only=True)["state_dict"]
    for k, v in model.state_dict().items():  # exactly (the path's unset val_mse is NaN on both sides)
        torch.testing.assert_close(v, state[k], rtol=0, atol=0, equal_nan=True)


def test_short_budget_epochs_log_every_epoch_without_lightnings_warning():
    from pipelines.studies.ltsf.fit import log_interval

    assert log_interval({"samples_per_epoch": 2048, "batch_size": 128}) == 16  # the budget configs' epochs
    assert log_interval({"samples_per_epoch": 100, "batch_size": 128}) == 1
    assert log_interval({"samples_per_epoch": None, "batch_size": 128}) == 50  # every window: long epochs
    assert log_interval({"samples_per_epoch": 64_000, "batch_size": 32}) == 50


MODEL_CONFIGS = [p for p in sorted((ROOT / "configs" / "ltsf").glob("*.yaml"))
                 if "trainer" in (yaml.safe_load(p.read_text()) or {})]  # not the --schemes encodings


@pytest.mark.parametrize("path", MODEL_CONFIGS, ids=lambda p: p.name)
def test_every_ltsf_config_loads_and_becomes_a_trainer_config(path):
    """Each shipped benchmark config loads, and becomes a CLI config on the accelerator asked for
    (``--accelerator``: cpu by default, gpu for the paper-budget runs), one device, its own budget."""
    from pipelines.studies.ltsf.fit import cli_config
    from pipelines.studies.ltsf.models import load_model_config
    from pipelines.studies.ltsf.run import parse_args

    config = load_model_config(path)
    assert parse_args(["--data", "x.csv", "--out", "o"]).accelerator == "cpu"
    cli = cli_config(config, "x.csv", 336, 96, accelerator="gpu")
    assert cli["trainer"]["accelerator"] == "gpu" and cli["trainer"]["devices"] == 1
    layer = yaml.safe_load(path.read_text())
    assert cli["trainer"]["max_epochs"] == layer["trainer"]["max_epochs"]
    loader = layer["data"]["init_args"]["loader"]
    assert cli["data"]["init_args"]["loader"]["samples_per_epoch"] == loader.get("samples_per_epoch")
    assert cli["data"]["init_args"]["windows"]["lookback"] == 336
    assert len(MODEL_CONFIGS) >= 6
    if path.stem.endswith("_paper"):  # the paper's budget: every window each epoch, lr 1e-4
        assert "samples_per_epoch" in loader and loader["samples_per_epoch"] is None
        assert config["model"]["init_args"]["optim"]["lr"] == 1e-4


def test_the_old_train_dialect_is_refused_naming_the_file_and_key(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("name: old\nmodel: {class_path: pipelines.tasks.forecast.linear.DLinearForecaster}\n"
                   "train: {max_epochs: 1}\n")
    from pipelines.studies.ltsf.models import load_model_config

    with pytest.raises(PosencError, match=r"old\.yaml: keys the benchmark sets or does not know: name, trai"):
        load_model_config(old)
    no_protocol = tmp_path / "bare.yaml"
    no_protocol.write_text("model: {class_path: pipelines.tasks.forecast.linear.DLinearForecaster}\n")
    with pytest.raises(PosencError, match=r"bare\.yaml: trainer\.callbacks needs exactly one .*LTSFProtocol"):
        load_model_config(no_protocol)


@pytest.mark.slow
def test_a_shipped_model_config_is_an_ordinary_training_layer(tmp_path):
    """`python -m pipelines.train fit --config configs/ltsf/dlinear.yaml` with the file, lookback and
    horizon given: the layer trains as any run does, and its LTSFProtocol scores every test window."""
    data = write_tiny_ett(tmp_path / "ETTh_tiny.csv")
    layer = str(ROOT / "configs/ltsf/dlinear.yaml")
    cmd = [sys.executable, "-m", "pipelines.train", "fit", "--config", layer,
           "--data.init_args.path", str(data), "--data.init_args.lookback", "32",
           "--data.init_args.horizon", "8",
           "--data.init_args.samples_per_epoch", "256", "--trainer.max_epochs", "1", "--progress", "false"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test/mse_scaled" in done.stdout + done.stderr
    assert "registration failed" not in done.stdout + done.stderr


def test_choose_on_val_of_a_model_the_run_lacks_is_refused_before_anything_is_written(tmp_path):
    from pipelines.studies.ltsf.run import model_configs, parse_args

    out = tmp_path / "out"
    posenc = str(ROOT / "configs/ltsf/posenc.yaml")
    args = parse_args(["--data", "x.csv", "--out", str(out), "--configs", posenc,
                       "--baselines", "ridge", "--choose-on-val", "posenc", "forecastr", "ridge"])
    with pytest.raises(PosencError, match=r"--choose-on-val forecastr: not a model of this run "
                                          r"\(its configs' names: posenc; baselines: ridge\)"):
        model_configs(args)
    assert not out.exists()
    args.choose_on_val = ["posenc", "ridge"]
    assert [c["name"] for c in model_configs(args)] == ["posenc"]
