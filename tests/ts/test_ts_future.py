"""Known-future inputs (the horizon's calendar, ``future_cols``), the horizon head, one series out of
a long table, the baselines that get the same inputs (ridge), and DLinear, the ridge's function class."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules.timeseries.datamodule import TimeSeriesDataModule
from pipelines.tasks.forecast.baselines import ForecastBaselines, LinearBaseline
from pipelines.tasks.forecast.linear import DLinearForecaster, moving_average
from pipelines.tasks.forecast.model import Forecaster
from posenc import PosencError, PositionOutOfRange
from tests.helpers import dm_kwargs, seasonal_frame, task, write_csv

TINY = dict(d_model=16, n_heads=2, n_layers=2, pe={"class_path": "posenc.RoPE"})


def promo_frame(n: int = 1500, seed: int = 0) -> pd.DataFrame:
    """Hourly ``load`` = daily sine + 4 × ``promo`` (a random 0/1 flag known in advance) + noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    promo = (rng.random(n) < 0.2).astype(float)
    return pd.DataFrame({"when": pd.date_range("2024-01-01", periods=n, freq="1h").astype(str),
                         "load": np.sin(2 * np.pi * t / 24) + 4 * promo + 0.1 * rng.normal(size=n),
                         "promo": promo})


# ------------------------------------------------------------------------------ data
def test_fut_holds_the_horizons_calendar_and_future_columns(tmp_path):
    path = write_csv(tmp_path / "p.csv", promo_frame())
    dm = TimeSeriesDataModule(**dm_kwargs(path, covariate_cols=None, future_cols=["promo"],
                                          calendar=["hour"]))
    assert dm.covariate_names == ["promo", "hour_sin", "hour_cos"]  # a future column is an input too
    assert dm.n_future == 3 and dm.hparams["source"]["covariate_cols"] == ["promo"]
    item = dm.dataset("test")[5]
    tau = int(item["start"])
    assert item["fut"].shape == (6, 3)
    np.testing.assert_allclose(item["fut"].numpy(), dm.covariates[tau : tau + 6])  # rows τ..τ+H-1
    batch = dm.windows("test", starts=np.array([tau]))
    np.testing.assert_allclose(batch["fut"][0], item["fut"].numpy())
    no_cal = TimeSeriesDataModule(**dm_kwargs(path, covariate_cols=None, future_cols=["promo"],
                                              calendar=["hour"], future_calendar=False))
    assert no_cal.n_future == 1 and no_cal.n_covariates == 3  # the calendar stays a past input


def test_select_reads_one_series_of_a_long_table(tmp_path):
    a, b = seasonal_frame(seed=0), seasonal_frame(seed=1)
    long = pd.concat([a.assign(site="A"), b.assign(site="B")], ignore_index=True)
    path = write_csv(tmp_path / "long.csv", long)
    dm = TimeSeriesDataModule(**dm_kwargs(path, select={"site": "B"}))
    np.testing.assert_allclose(dm.series.targets[:, 0], b["load"].to_numpy())
    with pytest.raises(PosencError, match="duplicates"):  # without select: repeated timestamps
        TimeSeriesDataModule(**dm_kwargs(path))
    with pytest.raises(PosencError, match=r"no row has site == 'C' \(values: A, B\); fix data.select"):
        TimeSeriesDataModule(**dm_kwargs(path, select={"site": "C"}))
    with pytest.raises(PosencError, match="data.select names column 'sensor', not found"):
        TimeSeriesDataModule(**dm_kwargs(path, select={"sensor": "A"}))


# ------------------------------------------------------------------------------ model
@pytest.mark.parametrize(("horizon", "patch_len", "channel_independent"),
                         [(8, 4, True), (6, 4, True), (6, 2, False)])
def test_horizon_head_puts_one_token_per_future_patch_after_the_lookback(horizon, patch_len,
                                                                        channel_independent):
    torch.manual_seed(0)
    model = task(Forecaster, n_targets=2, n_covariates=3, n_future=3, horizon=horizon, patch_len=patch_len,
                       head="horizon", channel_independent=channel_independent, **TINY).eval()
    seen = {}
    model.backbone.register_forward_hook(lambda m, args, out: seen.update(x=args[0], pos=args[1]))
    x, cov, fut = torch.randn(4, 16, 2), torch.randn(4, 16, 3), torch.randn(4, horizon, 3)
    y = model(x, cov, torch.arange(16), fut)
    m = -(-horizon // patch_len)
    assert y.shape == (4, horizon, 2) and model.n_extra_tokens == m
    assert seen["pos"].tolist() == list(range(16 // patch_len + m))  # the horizon continues the lookback
    changed = fut.clone()
    changed[:, -1] += 5.0  # the last future step only
    y2 = model(x, cov, torch.arange(16), changed)
    last_patch = (m - 1) * patch_len
    assert not torch.allclose(y2[:, last_patch:], y[:, last_patch:])  # the model uses its known future
    with pytest.raises(PosencError, match="built for 3 known-future input"):
        model(x, cov, torch.arange(16))


@pytest.mark.parametrize("head", ["query", "last", "mean"])
def test_every_head_uses_the_known_future(head):
    torch.manual_seed(0)
    model = task(Forecaster, n_targets=1, n_future=2, horizon=4, patch_len=4, head=head, **TINY).eval()
    x, fut = torch.randn(2, 16, 1), torch.randn(2, 4, 2)
    assert not torch.allclose(model(x, fut=fut), model(x, fut=fut + 1.0))


def test_checkpoints_from_before_the_forecast_tokens_still_load():
    torch.manual_seed(0)
    model = task(Forecaster, n_targets=1, horizon=4, patch_len=4, **TINY).eval()
    state = model.state_dict()
    old_name = lambda k: "query" if k == "head.query" else k.replace("head.out.", "head.")  # noqa: E731
    legacy = {old_name(k): v for k, v in state.items()}
    assert "query" in legacy and "head.weight" in legacy
    ckpt = {"state_dict": legacy, "posenc_task": "ts_forecast", "config_version": 3}
    again = task(Forecaster, n_targets=1, horizon=4, patch_len=4, **TINY).eval()
    again.on_load_checkpoint(ckpt)  # as Lightning's ckpt_path reading and read_checkpoint upgrade it
    again.load_state_dict(ckpt["state_dict"])
    x = torch.randn(2, 16, 1)
    torch.testing.assert_close(again(x), model(x))


# ------------------------------------------------------------------------------ baselines
def test_same_inputs_ridge_gets_the_known_future(tmp_path):
    """``promo`` is random, so only a model that sees it over the horizon can forecast its jumps."""
    path = write_csv(tmp_path / "p.csv", promo_frame())
    dm = TimeSeriesDataModule(**dm_kwargs(path, covariate_cols=None, future_cols=["promo"], calendar=["hour"],
                                          eval_lookbacks=[24]))
    cb = ForecastBaselines()
    with_future, past_only = cb.compute(dm), cb.compute(dm, future=False)
    assert with_future["linear_mse"] < 0.05 * past_only["linear_mse"]
    assert with_future["linear_mse"] < 3 * 0.1**2  # near the noise floor (0.1² in the data's units)


def test_ridge_path_matches_separate_fits_and_a_float64_solution():
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(300, 12)), rng.normal(size=(12, 2))
    y = (x @ w + 3.0 + 0.1 * rng.normal(size=(300, 2)))[:, None, :]  # (n, H=1, C=2)
    fits = LinearBaseline.fit_path([0.1, 10.0], x, y)
    for alpha, lin in zip([0.1, 10.0], fits, strict=True):
        xc, yc = x - x.mean(0), y[:, 0] - y[:, 0].mean(0)
        coef = np.linalg.solve(xc.T @ xc + alpha * np.eye(12), xc.T @ yc)  # ridge, unpenalised intercept
        np.testing.assert_allclose(lin.coef, coef, rtol=1e-8)
        np.testing.assert_allclose(LinearBaseline(alpha).fit(x, y).predict(x), lin.predict(x))
    assert abs(fits[0].intercept.mean() - 3.0) < 0.1


def test_seasonal_naive_picks_the_calendar_cycle_that_does_best_on_validation(tmp_path):
    n = 24 * 7 * 12
    t = np.arange(n)
    weekly = np.where((t // 24) % 7 >= 5, -3.0, 0.0) + np.sin(2 * np.pi * t / 24)  # weekends low
    df = pd.DataFrame({"when": pd.date_range("2024-01-01", periods=n, freq="1h").astype(str), "load": weekly})
    path = write_csv(tmp_path / "w.csv", df)
    cb = ForecastBaselines()
    period, how = cb.choose_period(TimeSeriesDataModule(**dm_kwargs(path, covariate_cols=None, lookback=168,
                                                                     patch_len=24, eval_lookbacks=[168])))
    assert period == 168 and how.startswith("weekly cycle of 1h data: the best on the validation windows")
    short = TimeSeriesDataModule(**dm_kwargs(path, covariate_cols=None, eval_lookbacks=[24]))
    assert cb.choose_period(short) == (24, "daily cycle of 1h data")  # the weekly one exceeds the lookback


# ------------------------------------------------------------------------------ DLinear
def test_moving_average_matches_a_float64_reference():
    x = torch.randn(3, 20, dtype=torch.float64)
    got = moving_average(x, 5)
    a = x.numpy()
    padded = np.concatenate([np.repeat(a[:, :1], 2, 1), a, np.repeat(a[:, -1:], 2, 1)], 1)  # ends repeated
    want = np.stack([padded[:, i : i + 5].mean(1) for i in range(20)], 1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_dlinear_is_the_sum_of_two_linear_maps_and_cuts_longer_lookbacks():
    torch.manual_seed(0)
    model = task(DLinearForecaster, lookback=16, n_targets=2, n_covariates=3, n_future=2, horizon=4).eval()
    x = torch.randn(3, 16, 2)
    y = model(x, torch.randn(3, 16, 3), None, torch.randn(3, 4, 2))
    seq = x[..., 1]  # channel 1: (B, L)
    trend = moving_average(seq, 25)
    want = model.trend(trend) + model.seasonal(seq - trend)  # (B, H)
    torch.testing.assert_close(y[..., 1], want)
    longer = torch.cat([torch.randn(3, 8, 2), x], dim=1)
    torch.testing.assert_close(model(longer), model(x))  # the last 16 steps
    with pytest.raises(PositionOutOfRange):
        model(x[:, :8])
    assert model.hparams["lookback"] == 16 and model.hparams["kernel_size"] == 25


# ------------------------------------------------------------------------------ inference
def test_predict_gives_the_model_the_known_future_it_was_trained_with(tmp_path):
    df = promo_frame(600)
    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "p.csv", df), covariate_cols=None,
                                          future_cols=["promo"], calendar=["hour", "dayofweek"]))
    torch.manual_seed(0)
    model = task(Forecaster, n_targets=1, n_covariates=dm.n_covariates, n_future=dm.n_future, horizon=6,
                       patch_len=4, head="horizon", **TINY).eval()
    model.posenc_inference = model.describe_data(dm)
    item = dm.dataset("test")[3]
    tau = int(item["start"])
    with torch.no_grad():
        want = model(item["x"][None], item["cov"][None], item["pos"][None], item["fut"][None])[0, :, 0]
    want = want.numpy() * dm.target_scale[0] + dm.target_loc[0]
    ahead = df.iloc[: tau + 6].copy()
    ahead.loc[ahead.index[tau:], "load"] = np.nan  # the horizon's rows: promo known, load not yet
    got = model.predict(ahead)  # forecasts after the last observed load
    np.testing.assert_allclose(got["load"], want, rtol=1e-5)
    assert got["time"].iloc[0] == pd.Timestamp(df["when"].iloc[tau]).isoformat()
    short = r"needs the known-future column\(s\) \['promo'\] .* 6 row\(s\) short"
    with pytest.raises(PosencError, match=short):
        model.predict(df.iloc[:tau])
    calendar_only = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "c.csv", df), covariate_cols=None,
                                                     calendar=["hour", "dayofweek"]))
    model = task(Forecaster, n_targets=1, n_covariates=4, n_future=4, horizon=6, patch_len=4, head="horizon",
                       **TINY)
    model.posenc_inference = model.describe_data(calendar_only)
    item = calendar_only.dataset("test")[3]
    with torch.no_grad():
        want = model.eval()(item["x"][None], item["cov"][None], item["pos"][None],
                            item["fut"][None])[0, :, 0]
    got = model.predict(df.iloc[: int(item["start"])])  # the calendar past the end follows the timestamps
    np.testing.assert_allclose(got["load"], want.numpy() * calendar_only.target_scale[0]
                               + calendar_only.target_loc[0], rtol=1e-5)


def test_dlinear_is_an_affine_map_of_the_lookback_that_the_ridge_fits_in_closed_form():
    """Why no DLinear baseline is trained beside a run: ``baseline/linear_ar`` fits its function class."""
    torch.manual_seed(0)
    lookback, horizon, kernel = 24, 6, 5
    model = task(DLinearForecaster, lookback=lookback, n_targets=1, horizon=horizon,
                 kernel_size=kernel).eval()
    avg = np.zeros((lookback, lookback))  # the moving average as a matrix, ends repeated (float64)
    for i in range(lookback):
        for j in range(i - (kernel - 1) // 2, i + kernel // 2 + 1):
            avg[i, min(max(j, 0), lookback - 1)] += 1 / kernel
    w_trend, w_seasonal = (getattr(model, n).weight.detach().double().numpy() for n in ("trend", "seasonal"))
    weight = w_trend @ avg + w_seasonal @ (np.eye(lookback) - avg)  # (H, L): one map of the lookback
    bias = (model.trend.bias + model.seasonal.bias).detach().double().numpy()  # (H,)
    x = torch.randn(200, lookback, 1)
    with torch.no_grad():
        y = model(x).double().numpy()  # (n, H, 1)
    np.testing.assert_allclose(y[..., 0], x[..., 0].double().numpy() @ weight.T + bias, atol=1e-5)
    ridge = LinearBaseline(alpha=1e-6).fit(x.numpy(), y)  # the linear_ar ridge on the same lookbacks
    held_out = torch.randn(50, lookback, 1)
    with torch.no_grad():
        np.testing.assert_allclose(ridge.predict(held_out.numpy()), model(held_out).numpy(), atol=1e-4)


def test_a_series_selected_from_a_long_table_gets_an_input_example_its_model_accepts(tmp_path):
    from pipelines.tasks.forecast.predict import example_table

    a, b = seasonal_frame(seed=0), seasonal_frame(seed=1)
    long = pd.concat([a.assign(site="A"), b.assign(site="B")], ignore_index=True)
    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "long.csv", long), select={"site": "B"}))
    model = task(Forecaster, n_targets=1, n_covariates=dm.n_covariates, horizon=dm.horizon,
                       patch_len=dm.patch_len, **TINY).eval()
    model.posenc_inference = model.describe_data(dm)
    example = example_table(model, dm)  # what MLflow registration records as the signature
    assert set(example["site"]) == {"B"}
    assert len(model.predict(example)) == dm.horizon  # the model's own predict selects it again
