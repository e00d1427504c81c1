"""Time-series parsing, cleaning, scaling and window arithmetic (no Lightning imported here)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from datamodules.timeseries.calendar import calendar_features, estimate_period
from datamodules.timeseries.parse import parse_series, read_table, vic_elec_path
from datamodules.timeseries.windows import (
    ForecastWindows,
    apply_scaler,
    check_length,
    fit_scaler,
    gather_windows,
    split_points,
    window_starts,
)
from posenc import PosencError


def frame(n: int = 20, start: str = "2024-01-01", freq: str = "30min", **cols) -> pd.DataFrame:
    t = pd.date_range(start, periods=n, freq=freq)
    data = {"time": t.strftime("%Y-%m-%d %H:%M:%S")}
    data.update(cols or {"y": np.arange(n, dtype=float)})
    return pd.DataFrame(data)


def write(tmp_path, df: pd.DataFrame, name: str = "s.csv"):
    path = tmp_path / name
    if name.endswith(".parquet"):
        df.to_parquet(path)
    else:
        df.to_csv(path, index=False)
    return path


def parse(df, **kw):
    kw.setdefault("source", "s.csv")
    return parse_series(df, "time", kw.pop("targets", ["y"]), kw.pop("covs", []), **kw)


# ------------------------------------------------------------------------------ reading/parsing
def test_reads_csv_and_parquet_and_parses_timestamps(tmp_path):
    df = frame(10, y=np.arange(10.0), temp=np.linspace(0, 1, 10))
    for name in ("s.csv", "s.parquet"):
        s = parse_series(read_table(write(tmp_path, df, name)), "time", ["y"], ["temp"], source=name)
        assert len(s) == 10 and s.targets.shape == (10, 1) and s.covariates.shape == (10, 1)
        np.testing.assert_array_equal(s.time, np.arange(10.0))  # units of the median step
        assert s.report.step == 1800.0 and s.report.n_gaps == 0 and not s.report.was_sorted
        assert s.timestamps[3] == pd.Timestamp("2024-01-01 01:30")


def test_vic_elec_default_file_is_found_offline():
    path = vic_elec_path()
    s = parse_series(read_table(path), "Time", ["Demand"], ["Temperature"], source=path.name)
    assert len(s) == 52608 and s.report.step == 1800 and s.report.n_gaps == 0
    assert str(s.timestamps.tz) == "UTC"


def test_unsorted_rows_are_sorted_and_reported():
    df = frame(8, y=np.arange(8.0))
    s = parse(df.iloc[[3, 0, 1, 2, 7, 5, 6, 4]].reset_index(drop=True))
    assert s.report.was_sorted and "sorted" in s.report.summary()
    np.testing.assert_array_equal(s.targets[:, 0], np.arange(8.0))


def test_duplicate_timestamp_names_it_and_the_rows():
    df = frame(6)
    df.loc[4, "time"] = df.loc[1, "time"]
    pattern = r"duplicate timestamp 2024-01-01 00:30:00 .*row 4 \(line 6\).*row 1"
    with pytest.raises(PosencError, match=pattern):
        parse(df)


def test_gaps_detected_against_the_median_step():
    df = frame(12).drop(index=[4, 5, 9]).reset_index(drop=True)
    s = parse(df)
    assert s.report.n_gaps == 2 and s.report.missing_steps == 3
    assert s.report.first_gap == "2024-01-01 01:30:00" and "gap" in s.report.summary()
    np.testing.assert_array_equal(s.time, [0, 1, 2, 3, 6, 7, 8, 10, 11])


def test_fill_gaps_inserts_unobserved_rows():
    df = frame(12).drop(index=[4, 5]).reset_index(drop=True)
    s = parse(df, fill_gaps=True, nan_policy="interpolate")
    assert len(s) == 12 and s.report.inserted_rows == 2
    np.testing.assert_array_equal(s.observed[:, 0], [i not in (4, 5) for i in range(12)])
    np.testing.assert_allclose(s.targets[:, 0], np.arange(12.0))  # linear data, linear fill


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("interpolate", [0, 1, 2, 3, 4, 5]), ("ffill", [0, 1, 1, 1, 4, 5]),
     ("mask", [0, 1, np.nan, np.nan, 4, 5])],
)
def test_nan_policies_fill_and_keep_the_observed_mask(policy, expected):
    y = np.array([0, 1, np.nan, np.nan, 4, 5], dtype=float)
    s = parse(frame(6, y=y, c=np.array([1.0, np.nan, 3, 4, 5, 6])), covs=["c"], nan_policy=policy)
    np.testing.assert_allclose(s.targets[:, 0], expected)
    np.testing.assert_array_equal(s.observed[:, 0], ~np.isnan(y))
    assert s.report.missing == {"y": 2, "c": 1}


def test_leading_nan_ffill_takes_the_first_value():
    s = parse(frame(4, y=np.array([np.nan, 2.0, np.nan, 4.0])), nan_policy="ffill")
    np.testing.assert_allclose(s.targets[:, 0], [2, 2, 2, 4])


def test_numeric_time_column_is_accepted():
    df = pd.DataFrame({"time": [0.0, 0.5, 1.0, 2.0], "y": [1.0, 2, 3, 4]})
    s = parse(df)
    assert s.timestamps is None and s.report.n_gaps == 1
    np.testing.assert_allclose(s.time, [0, 1, 2, 4])


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("mutate", "kwargs", "pattern"),
    [
        (lambda d: d, {"time_col": "when"}, r"timestamp column 'when' not found"),
        (lambda d: d, {"targets": ["load"]}, r"target column 'load' not found"),
        (lambda d: d, {"covs": ["temp"]}, r"covariate column 'temp' not found"),
        (lambda d: d.assign(y=["1", "2", "x", "4", "5", "6"]), {},
         r"column 'y' has a non-numeric value 'x' at row 2"),
        (lambda d: d.assign(time=[*d.time[:3], "not a date", *d.time[4:]]), {},
         r"unparseable timestamp 'not a date' in column 'time' at row 3 \(line 5\)"),
        (lambda d: d.assign(time=[*d.time[:1], None, *d.time[2:]]), {},
         r"timestamp column 'time' is empty at row 1"),
        (lambda d: d.assign(y=np.nan), {}, r"column 'y' has no values \(all 6 are missing\)"),
        (lambda d: d, {"targets": []}, r"target_cols is empty"),
    ],
)
def test_bad_input_is_one_clear_line(mutate, kwargs, pattern):
    df = mutate(frame(6))
    time_col = kwargs.pop("time_col", "time")
    with pytest.raises(PosencError, match=pattern) as info:
        parse_series(df, time_col, kwargs.pop("targets", ["y"]), kwargs.pop("covs", []), source="s.csv")
    assert "\n" not in str(info.value) and "s.csv" in str(info.value)


def test_series_shorter_than_one_window():
    with pytest.raises(PosencError, match=r"s.csv: the series has 10 rows, shorter than one window .* = 12"):
        check_length(10, 8, 4, "s.csv")


def test_missing_file_and_unreadable_file(tmp_path):
    with pytest.raises(PosencError, match="not found"):
        read_table(tmp_path / "nope.csv")
    bad = tmp_path / "bad.parquet"
    bad.write_text("this is not parquet")
    with pytest.raises(PosencError, match="bad.parquet: cannot read"):
        read_table(bad)


# ------------------------------------------------------------------------------ split/scale
def test_scaler_is_fitted_on_the_training_split_only():
    n = 100
    y = np.random.default_rng(0).normal(size=n)
    y[70:] += 1e6  # a huge shift after the training split
    obs = np.ones((n, 1), dtype=bool)
    n_train, _ = split_points(n, (0.7, 0.1, 0.2))
    assert n_train == 70
    scaler = fit_scaler(y[:, None], obs, n_train, ["y"])
    np.testing.assert_allclose(scaler.mean_, [y[:70].mean()])
    np.testing.assert_allclose(scaler.scale_, [y[:70].std()])
    assert abs(scaler.mean_[0]) < 1


def test_scaler_ignores_filled_values_and_mask_becomes_zero():
    y = np.array([[1.0], [3.0], [100.0], [np.nan]])
    obs = np.array([[True], [True], [False], [False]])
    scaler = fit_scaler(y, obs, 4, ["y"])
    assert scaler.mean_[0] == 2.0
    np.testing.assert_allclose(apply_scaler(scaler, y)[:, 0], [-1, 1, 98, 0])


def test_scaler_rejects_column_unobserved_in_training():
    y = np.array([[np.nan], [np.nan], [1.0]])
    with pytest.raises(PosencError, match="column 'y' has no observed values in the training split"):
        fit_scaler(y, ~np.isnan(y), 2, ["y"])


@pytest.mark.parametrize("bad", [(0.5, 0.5, 0.0), (0.6, 0.3, 0.3), (0.5, 0.5)])
def test_split_fractions_are_checked(bad):
    with pytest.raises(PosencError, match="data.split"):
        split_points(100, bad)


# ------------------------------------------------------------------------------ windows
def test_window_arithmetic_at_split_borders():
    lookback, horizon = 5, 3
    train, val, test = (0, 20), (20, 30), (30, 42)
    tr = window_starts(train, lookback, horizon)
    assert tr[0] == 5 and tr[-1] == 17  # lookback 0..4 → targets 5..7; last targets 17..19
    va = window_starts(val, lookback, horizon)
    assert va[0] == 20 and va[-1] == 27  # first lookback 15..19 uses the end of train as context
    te = window_starts(test, lookback, horizon, 2)
    np.testing.assert_array_equal(te, [30, 32, 34, 36, 38])  # 39 + 3 would reach 42 = end (39 not on stride)
    for (lo, hi), starts in ((train, tr), (val, va), (test, te)):
        assert (starts >= lo).all() and (starts + horizon <= hi).all()  # targets never cross a border
        assert (starts - lookback >= 0).all()
    own = window_starts(val, lookback, horizon, context_from=20)  # lookback inside the split too
    assert own[0] == 25 and (own - lookback >= 20).all()
    assert len(window_starts((0, 7), lookback, horizon)) == 0


def test_gather_windows_matches_slices():
    v = np.arange(30.0).reshape(15, 2)
    w = gather_windows(v, np.array([4, 9]), 4, 2)
    assert w.shape == (2, 6, 2)
    np.testing.assert_array_equal(w[1], v[5:11])


def test_dataset_items_index_positions_and_masks():
    n = 30
    targets = np.arange(n, dtype=np.float32)[:, None]
    observed = np.ones((n, 1), dtype=bool)
    observed[12] = False
    cov = np.zeros((n, 2), dtype=np.float32)
    ds = ForecastWindows(targets, observed, cov, np.arange(n, dtype=float), np.array([10]), 8, 4)
    item = ds[0]
    assert item["x"].shape == (8, 1) and item["cov"].shape == (8, 2) and item["y"].shape == (4, 1)
    assert item["x"][0, 0] == 2 and item["y"][0, 0] == 10
    assert item["pos"].dtype.is_floating_point is False and item["pos"].tolist() == list(range(8))
    assert item["y_mask"][:, 0].tolist() == [True, True, False, True]
    assert item["loss_mask"][:, 0].tolist() == [True, True, False, True]
    filled = ForecastWindows(targets, observed, cov, np.arange(n, dtype=float), np.array([10]), 8, 4,
                             loss_on_filled=True)[0]
    assert filled["loss_mask"].all() and not filled["y_mask"].all()


def test_time_positions_on_an_irregular_series():
    rng = np.random.default_rng(0)
    steps = rng.choice([60, 60, 60, 120, 180], size=39)  # seconds; median step 60 s
    t = pd.Timestamp("2024-01-01") + pd.to_timedelta(np.concatenate([[0], np.cumsum(steps)]), unit="s")
    df = pd.DataFrame({"time": t.astype(str), "y": rng.normal(size=40)})
    s = parse(df)
    assert s.report.step == 60 and s.report.n_gaps > 0
    ds = ForecastWindows(s.targets, s.observed, s.covariates, s.time, np.array([20, 30]), 10, 5, "time")
    pos = ds[0]["pos"]
    assert pos.dtype.is_floating_point and pos[0] == 0
    elapsed = np.cumsum(np.concatenate([[0], steps]))  # seconds since the first row
    expected = (elapsed[10:20] - elapsed[10]) / 60
    np.testing.assert_allclose(pos.numpy(), expected)
    assert (np.diff(pos.numpy()) >= 1).all()


def test_calendar_features_in_local_time():
    ts = pd.DatetimeIndex(["2024-01-01 13:00:00Z", "2024-01-01 19:00:00Z"])  # 00:00 and 06:00 in Melbourne
    f = calendar_features(ts, ["hour", "dayofweek"], "Australia/Melbourne")
    assert f.shape == (2, 4)
    np.testing.assert_allclose(f[:, :2], [[0, 1], [1, 0]], atol=1e-12)  # sin/cos of hour/24
    with pytest.raises(PosencError, match="calendar needs datetime"):
        calendar_features(None, ["hour"])
    with pytest.raises(PosencError, match="data.calendar entries"):
        calendar_features(ts, ["month"])


def test_estimate_period_finds_the_dominant_season():
    t = np.arange(48 * 60)
    x = 3 * np.sin(2 * np.pi * t / 48) + np.sin(2 * np.pi * t / 336) + 0.01 * t
    assert estimate_period(x, 100) == 48
    assert estimate_period(np.sin(2 * np.pi * t / 336) + 0.1 * np.sin(2 * np.pi * t / 48), 400) == 336
