"""The forecasting baselines a practitioner would use: seasonal naive with the period of the data's own
step, and ridge regressions from the Forecaster's inputs (targets, covariates, calendar)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from datamodules.timeseries.calendar import calendar_cycles
from datamodules.timeseries.datamodule import TimeSeriesDataModule
from pipelines.tasks.forecast.baselines import ForecastBaselines
from tests.helpers import ROOT, dm_kwargs, write_csv


def periodic_csv(tmp_path, n: int, freq: str | None, period: float, strong: float | None = None):
    """``load``: a sine of ``period`` rows (+ a stronger sine of ``strong`` rows if given) + noise;
    timestamps every ``freq`` (none when ``freq`` is None)."""
    t = np.arange(n)
    rng = np.random.default_rng(0)
    load = np.sin(2 * np.pi * t / period) + 0.05 * rng.normal(size=n)
    if strong:
        load += 3 * np.sin(2 * np.pi * t / strong)
    df = pd.DataFrame({"load": load, "temp": rng.normal(size=n)})
    if freq is not None:
        when = pd.date_range("2024-01-01", periods=n, freq=freq)
        df.insert(0, "when", when.strftime("%Y-%m-%d %H:%M:%S.%f"))
    return write_csv(tmp_path / "s.csv", df)


@pytest.mark.parametrize(("step", "expected"), [(3600, [("daily", 24), ("weekly", 168), ("yearly", 8766)]),
                                                (1800, [("daily", 48), ("weekly", 336), ("yearly", 17532)]),
                                                (86400, [("weekly", 7), ("yearly", 365)]),
                                                (7 * 86400, [("yearly", 52)]), (31 * 86400, [("yearly", 12)]),
                                                (2 * 86400, [("yearly", 183)]), (0.01, [])])
def test_calendar_cycles_in_steps(step, expected):
    assert calendar_cycles(step) == expected  # a week of 2-day steps (3.5) is no whole cycle


@pytest.mark.parametrize(
    ("freq", "n", "expected", "how"),
    [("1h", 2000, 24, "daily cycle of 1h data"),  # the daily cycle, though a 4-day one is stronger
     ("30min", 2000, 48, "daily cycle of 30min data"),
     ("1D", 600, 7, "weekly cycle of 1d data")],
)
def test_seasonal_naive_period_follows_the_step(tmp_path, freq, n, expected, how):
    path = periodic_csv(tmp_path, n, freq, period=expected, strong=96)
    dm = TimeSeriesDataModule(**dm_kwargs(path, patch_len=1, eval_lookbacks=[24]))
    assert dm.season_period() == (expected, how)
    cb = ForecastBaselines()
    assert cb.choose_period(dm) == (expected, how) and cb.compute(dm)["season_period"] == expected
    fixed = ForecastBaselines(season_period=5)
    assert fixed.choose_period(dm) == (5, "set by ForecastBaselines.season_period")


@pytest.mark.parametrize(
    ("freq", "over", "why"),
    [("10ms", {}, "sub-second step 10ms"),  # 100 Hz: no calendar cycle applies
     (None, {"time_col": None}, "time is row order"),
     ("1h", {}, "irregular timestamps")],
)
def test_seasonal_naive_period_from_the_spectrum_without_a_calendar(tmp_path, freq, over, why):
    path = periodic_csv(tmp_path, 1500, freq, period=37)
    if why.startswith("irregular"):  # jitter every timestamp by up to ±20 minutes
        df = pd.read_csv(path)
        jitter = np.random.default_rng(1).uniform(-1200, 1200, len(df))
        df["when"] = (pd.to_datetime(df["when"]) + pd.to_timedelta(jitter, unit="s")).astype(str)
        path = write_csv(path, df)
    settings = {"patch_len": 1, "eval_lookbacks": [48], "lookback": 48, **over}
    dm = TimeSeriesDataModule(**dm_kwargs(path, **settings))
    period, how = dm.season_period()
    assert period == 37 and how.startswith("periodogram peak ≤ 48 steps of the training split; " + why)


def test_no_resolvable_season_falls_back_to_the_last_value(tmp_path):
    path = periodic_csv(tmp_path, 200, None, period=37)  # 6 training rows: too few for a periodogram
    dm = TimeSeriesDataModule(**dm_kwargs(path, time_col=None, patch_len=1, lookback=2, horizon=1,
                                          eval_lookbacks=[2], split=(0.03, 0.07, 0.9)))
    assert dm.season_period() == (1, "last value, no periodogram peak in the training split; "
                                     "time is row order (data.time_col: null)")


def test_no_config_hard_wires_a_season_period():
    for path in sorted((ROOT / "configs").glob("*ts*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for cb in (doc.get("trainer") or {}).get("callbacks") or []:
            assert "season_period" not in (cb.get("init_args") or {}), path.name


def test_same_inputs_ridge_uses_the_covariates(tmp_path):
    """A target driven by a past covariate: only a model that sees the covariate can forecast it."""
    n, lag = 3000, 6
    rng = np.random.default_rng(0)
    drive = rng.normal(size=n)
    load = np.r_[np.zeros(lag), 3 * drive[:-lag]] + 0.1 * rng.normal(size=n)  # load[t] = 3·drive[t-6] + noise
    df = pd.DataFrame({"when": pd.date_range("2024-01-01", periods=n, freq="1h").astype(str), "load": load,
                       "drive": drive})
    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "s.csv", df), covariate_cols=["drive"],
                                          calendar=["hour"], horizon=lag, eval_lookbacks=[24]))
    assert dm.n_covariates == 3  # drive + hour sin/cos: what the Forecaster's `cov` holds
    r = ForecastBaselines().compute(dm)
    assert r["linear_mse"] < 0.05 * r["linear_ar_mse"]  # AR sees none of drive[τ-6..τ-1]
    assert r["linear_mse"] < 2 * 0.1**2  # near the noise floor
    assert r["linear_ar_mse"] > 0.5 * np.var(load)  # the AR ridge can do no better than the mean


def test_without_covariates_linear_and_linear_ar_agree(tmp_path):
    path = periodic_csv(tmp_path, 1200, "1h", period=24)
    dm = TimeSeriesDataModule(**dm_kwargs(path, covariate_cols=None, eval_lookbacks=[24]))
    r = ForecastBaselines().compute(dm)
    assert dm.n_covariates == 0 and r["linear_mse"] == r["linear_ar_mse"]


def test_ridge_penalty_is_chosen_on_the_validation_windows(tmp_path):
    """Few training windows and many useless covariates: a weak penalty overfits, and the one chosen
    on the validation windows does better on the test windows."""
    n = 600
    rng = np.random.default_rng(0)
    t = np.arange(n)
    df = pd.DataFrame({"when": pd.date_range("2024-01-01", periods=n, freq="1h").astype(str),
                       "load": np.sin(2 * np.pi * t / 24) + 0.3 * rng.normal(size=n)})
    noise = [f"n{i}" for i in range(10)]
    for c in noise:
        df[c] = rng.normal(size=n)
    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "s.csv", df), covariate_cols=noise,
                                          eval_lookbacks=[24], split=(0.5, 0.2, 0.3)))
    chosen = ForecastBaselines().compute(dm)
    weak = ForecastBaselines(ridge_alpha=0.1).compute(dm)
    assert weak["linear_alpha"] == 0.1 and chosen["linear_alpha"] >= 10
    assert chosen["linear_mse"] < 0.8 * weak["linear_mse"]
