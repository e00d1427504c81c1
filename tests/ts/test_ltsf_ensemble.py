"""The benchmark's ensemble (``--ensemble``): the mean of saved member forecasts, scored on the same
windows as the members; its refusals before anything is written."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamodules.timeseries.ltsf import scaled_errors
from pipelines.studies.ltsf.ensemble import ensemble_row, mean_forecast, prediction_dir, save_forecast
from posenc import PosencError
from tests.helpers import small_protocol

ROOT = Path(__file__).resolve().parents[2]
LOOKBACK, HORIZON = 48, 12


def member(out: Path, data, name: str, noise: float, seed: int, test: bool = True) -> dict:
    """A member's row and its saved forecasts: the truth plus Gaussian noise of std ``noise``."""
    rng = np.random.default_rng(seed)
    row = {"model": name, "horizon": HORIZON, "seed": 0, "n_test_windows": 0, "time/cpu_s": 2.0,
           "time/wall_s": 3.0}
    for split in ("val", "test") if test else ("val",):
        truth = data.windows(split, LOOKBACK, HORIZON)[1]
        pred = truth + noise * rng.standard_normal(truth.shape)
        save_forecast(prediction_dir(out, name, HORIZON, 0), split, pred)
        row[f"{split}/mse_scaled"] = scaled_errors(pred, truth)["mse_scaled"]
    return row


def args_for(out: Path) -> SimpleNamespace:
    return SimpleNamespace(out=str(out), lookback=LOOKBACK, test_lookbacks=[512], val_only=False)


def test_the_ensemble_scores_the_mean_forecast_and_deletes_what_it_read(tmp_path):
    data = small_protocol()
    rows = [member(tmp_path, data, "a", 0.3, 1), member(tmp_path, data, "b", 0.5, 2)]
    folders = [prediction_dir(tmp_path, m, HORIZON, 0) for m in ("a", "b")]
    expected = {}
    for s in ("val", "test"):
        a, b = (np.load(f / f"{s}.npy").astype(np.float64) for f in folders)
        expected[s] = scaled_errors((a + b) / 2, data.windows(s, LOOKBACK, HORIZON)[1])["mse_scaled"]
    row = ensemble_row(["a", "b"], HORIZON, 0, rows, data, args_for(tmp_path))
    assert row["model"] == "a+b" and row["chosen"] == "mean of a, b (equal weights)"
    assert row["val/mse_scaled"] == pytest.approx(expected["val"], rel=1e-12)
    assert row["test/mse_scaled"] == pytest.approx(expected["test"], rel=1e-12)
    # independent errors: the mean's MSE is about a quarter of the sum of the members' (0.09 + 0.25) / 4
    assert row["test/mse_scaled"] == pytest.approx((0.09 + 0.25) / 4, rel=0.05)
    assert row["time/cpu_s"] >= 4.0 and row["time/wall_s"] >= 6.0  # the members' cost is the forecast's
    assert np.isnan(row["test/mse_scaled_L512"])
    assert not any(f.exists() for f in folders)


def test_the_ensemble_waits_for_every_member(tmp_path):
    data = small_protocol()
    rows = [member(tmp_path, data, "a", 0.3, 1)]
    assert ensemble_row(["a", "b"], HORIZON, 0, rows, data, args_for(tmp_path)) is None
    assert (prediction_dir(tmp_path, "a", HORIZON, 0) / "val.npy").is_file()  # kept until b is there


def test_a_val_only_ensemble_has_val_and_no_test(tmp_path):
    data = small_protocol()
    rows = [member(tmp_path, data, m, 0.3, i, test=False) for i, m in enumerate(("a", "b"))]
    row = ensemble_row(["a", "b"], HORIZON, 0, rows, data, args_for(tmp_path))
    assert np.isfinite(row["val/mse_scaled"]) and np.isnan(row["test/mse_scaled"])


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 4))
def test_the_mean_is_never_worse_than_its_members_on_average(tmp_path_factory, seed, k):
    """Convexity of the squared error: MSE(mean of forecasts) ≤ mean of the members' MSEs, always."""
    out = tmp_path_factory.mktemp("members")
    rng = np.random.default_rng(seed)
    truth = rng.standard_normal((5, 3, 2))
    preds = [truth + rng.standard_normal(truth.shape) * rng.uniform(0.1, 2) for _ in range(k)]
    folders = []
    for i, p in enumerate(preds):
        save_forecast(out / f"m{i}", "val", p)
        folders.append(out / f"m{i}")
    mean = mean_forecast(folders, "val", truth.shape)
    members = [scaled_errors(p.astype(np.float32), truth)["mse_scaled"] for p in preds]
    assert scaled_errors(mean, truth)["mse_scaled"] <= np.mean(members) + 1e-9
    assert mean_forecast(folders, "test", truth.shape) is None


@pytest.mark.parametrize("ensemble, match", [
    (["posenc"], r"--ensemble posenc: needs two or more of this run's model configs"),
    (["posenc", "ridge"], r"--ensemble posenc ridge: needs two or more .*\(their names: posenc\)"),
])
def test_an_ensemble_of_what_the_run_does_not_train_is_refused_before_anything_is_written(
        tmp_path, ensemble, match):
    from pipelines.studies.ltsf.run import model_configs, parse_args

    out = tmp_path / "out"
    posenc = str(ROOT / "configs/ltsf/posenc.yaml")
    args = parse_args(["--data", "x.csv", "--out", str(out), "--configs", posenc, "--baselines", "ridge",
                       "--ensemble", *ensemble])
    with pytest.raises(PosencError, match=match):
        model_configs(args)
    assert not out.exists()


def test_choose_on_val_may_name_the_ensemble():
    from pipelines.studies.ltsf.run import model_configs, parse_args

    configs = [str(ROOT / "configs/ltsf/posenc.yaml"), str(ROOT / "configs/ltsf/forecaster_extrapolate.yaml")]
    args = parse_args(["--data", "x.csv", "--out", "o", "--configs", *configs, "--ensemble", "posenc",
                       "forecaster", "--choose-on-val", "posenc", "posenc+forecaster"])
    assert [c["name"] for c in model_configs(args)] == ["posenc", "forecaster"]
