"""Reading real sensor files: ISO 8601 timestamps of mixed precision, duplicate timestamps, row-order
time, the inferred step, and the data defaults that apply only to the default data set."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules.timeseries.calendar import auto_calendar, calendar_features
from datamodules.timeseries.config import Source, Windows
from datamodules.timeseries.datamodule import TimeSeriesDataModule
from datamodules.timeseries.parse import VIC_ELEC, parse_series, read_table, vic_elec_path
from datamodules.timeseries.timestamps import format_step
from posenc import PosencError
from tests.helpers import dm_kwargs, seasonal_frame, task, write_csv


def sensor_frame(n: int = 400, hz: float = 100.0, seed: int = 0) -> pd.DataFrame:
    """A ~100 Hz logger: timestamps written with fractional seconds except on whole seconds
    (``10:00:00.010000`` beside ``10:00:01``), as such loggers (and pandas' own str()) write them."""
    t = pd.Timestamp("2021-03-01 10:00:00") + pd.to_timedelta(np.arange(n) / hz, unit="s")
    rng = np.random.default_rng(seed)
    ecg = np.sin(np.arange(n) / 7) + 0.01 * rng.normal(size=n)
    return pd.DataFrame({"time": [str(x) for x in t], "ecg": ecg})


def parse(df: pd.DataFrame, **kw):
    return parse_series(df, kw.pop("time_col", "time"), kw.pop("targets", ["ecg"]), kw.pop("covs", []),
                        source="s.csv", **kw)


# ------------------------------------------------------------------------------ timestamps
def test_mixed_precision_iso_8601_parses_without_a_format(tmp_path):
    df = sensor_frame()
    assert df["time"][100] == "2021-03-01 10:00:01" and df["time"][101] == "2021-03-01 10:00:01.010000"
    with pytest.raises(ValueError):  # what pandas does unasked: infer one format from the first value
        pd.to_datetime(df["time"])
    s = parse(read_table(write_csv(tmp_path / "s.csv", df)))
    assert s.report.step == pytest.approx(0.01) and s.report.step_label == "10ms"
    assert s.timestamps[100] == pd.Timestamp("2021-03-01 10:00:01")
    assert s.timestamps[101] == pd.Timestamp("2021-03-01 10:00:01.010")
    np.testing.assert_allclose(s.time, np.arange(len(df)), atol=1e-6)  # units of the median step
    assert "s.csv: 400 rows, step 10ms (median)" in s.report.summary()


def test_iso_8601_with_t_separator_and_utc_offsets():
    stamps = ["2024-01-01T00:00:00+01:00", "2024-01-01T00:30:00.5+01:00", "2024-01-01T00:00Z"]
    df = pd.DataFrame({"time": stamps, "ecg": [1.0, 2.0, 3.0]})
    s = parse(df)  # mixed offsets and precision: compared in UTC
    assert list(s.timestamps) == [pd.Timestamp("2023-12-31 23:00Z"), pd.Timestamp("2023-12-31 23:30:00.5Z"),
                                  pd.Timestamp("2024-01-01 00:00Z")]


def test_other_formats_need_time_format_and_the_error_says_so():
    stamps = ["31/01/2024 10:00", "31/01/2024 11:00", "31/01/2024 12:00"]
    df = pd.DataFrame({"time": stamps, "ecg": [1.0, 2, 3]})
    pattern = (r"s.csv: unparseable timestamp '31/01/2024 10:00' in column 'time' at row 0 \(line 2\) is not "
               r"ISO 8601 .*set data.time_format")
    with pytest.raises(PosencError, match=pattern) as info:
        parse(df)
    assert "\n" not in str(info.value)
    assert parse(df, time_format="%d/%m/%Y %H:%M").report.step_label == "1h"
    mixed = df.assign(time=["31/01/2024 10:00", "2024-01-31 11:00:00", "Jan 31 2024 12:00"])
    assert parse(mixed, time_format="mixed").timestamps[2] == pd.Timestamp("2024-01-31 12:00")
    with pytest.raises(PosencError, match=r"does not match data.time_format '%Y'"):
        parse(df, time_format="%Y")


STEPS = [(3600, "1h"), (1800, "30min"), (0.01, "10ms"), (86400, "1d"), (5400, "90min"), (1.5, "1.5s"),
         (7 * 86400, "7d"), (1 / 3, "333.3ms"), (60, "1min"), (1, "1s"), (2.5e-6, "2.5us"),
         (0.015625, "15.625ms"), (36 * 3600, "36h")]


@pytest.mark.parametrize(("seconds", "label"), STEPS)
def test_format_step_names_frequencies(seconds, label):
    assert format_step(seconds) == label


# ------------------------------------------------------------------------------ duplicates
def dup_frame() -> pd.DataFrame:
    """Rows 1 and 2 share 00:00:01; rows 3 and 5 share 00:00:02 (file order unsorted)."""
    return pd.DataFrame({
        "time": ["2024-01-01 00:00:00", "2024-01-01 00:00:01", "2024-01-01 00:00:01", "2024-01-01 00:00:02",
                 "2024-01-01 00:00:03", "2024-01-01 00:00:02"],
        "ecg": [0.0, 1.0, 3.0, 10.0, 4.0, np.nan],
        "acc": [5.0, 6.0, np.nan, 7.0, 8.0, 9.0],
    })


def test_duplicates_error_names_the_option_and_the_first_repeated_row():
    with pytest.raises(PosencError) as info:
        parse(dup_frame(), covs=["acc"])
    msg = str(info.value)
    assert msg.startswith("s.csv: duplicate timestamp 2024-01-01 00:00:01 in column 'time' at row 2 (line 4) "
                          "(first at row 1 (line 3)); set data.duplicates to first, last or mean")
    assert "data.time_col: null" in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("policy", "ecg", "acc"),
    [("first", [0, 1, 10, 4], [5, 6, 7, 8]),
     ("last", [0, 3, np.nan, 4], [5, np.nan, 9, 8]),  # the last row in file order, missing values included
     ("mean", [0, 2, 10, 4], [5, 6, 8, 8])],  # per column over the values present
)
def test_duplicates_policies(policy, ecg, acc):
    s = parse(dup_frame(), covs=["acc"], duplicates=policy, nan_policy="mask")
    assert len(s) == 4 and s.report.duplicates == 2 and s.report.was_sorted
    np.testing.assert_allclose(s.targets[:, 0], ecg)
    np.testing.assert_allclose(s.covariates[:, 0], acc)
    np.testing.assert_array_equal(s.observed[:, 0], ~np.isnan(ecg))
    assert s.report.step == 1.0 and "2 row(s) repeating a timestamp" in s.report.summary()


def test_duplicates_policy_is_checked_and_clock_resolution_duplicates_merge():
    with pytest.raises(PosencError, match="data.duplicates must be one of"):
        parse(dup_frame(), duplicates="drop")
    # a 100 Hz signal logged by a ~15 ms clock: samples 10 ms apart share the clock's ticks
    df = sensor_frame(600)
    ticks = pd.to_datetime(df["time"], format="ISO8601").dt.floor("15ms")
    df["time"] = ticks.dt.strftime("%Y-%m-%d %H:%M:%S.%f")
    s = parse(df, duplicates="mean")
    assert len(s) == ticks.nunique() < 600 and s.report.duplicates == 600 - ticks.nunique()
    assert s.report.step_label == "15ms"


# ------------------------------------------------------------------------------ row order
def test_time_col_null_uses_row_order():
    df = sensor_frame(50).drop(columns="time")
    s = parse(df, time_col=None)
    assert s.timestamps is None and s.report.time_kind == "rows" and s.report.step_label == "1 row"
    np.testing.assert_array_equal(s.time, np.arange(50.0))
    assert "time = row order (data.time_col: null)" in s.report.summary()
    assert auto_calendar(s.report.step_seconds) == []
    pattern = (r"data.calendar needs datetime timestamps for \['hour'\], but data.time_col is null "
               r"\(row order is time\); set data.calendar: \[\]")
    with pytest.raises(PosencError, match=pattern):
        calendar_features(None, ["hour"], n_rows=50, time_kind="rows")


def test_time_col_null_in_the_datamodule(tmp_path):
    df = seasonal_frame().drop(columns="when")
    path = write_csv(tmp_path / "s.csv", df)
    dm = TimeSeriesDataModule(**dm_kwargs(path, time_col=None, calendar="auto"))
    assert dm.freq == "1 row" and dm.step_seconds is None and dm.n_covariates == 1  # temp, no calendar
    item = dm.dataset("test")[0]
    assert item["pos"].tolist() == list(range(24))
    with pytest.raises(PosencError, match="data.time_col is null"):
        TimeSeriesDataModule(**dm_kwargs(path, time_col=None, calendar=["hour"]))
    with pytest.raises(PosencError, match="data.init_args.seasonality.periods: calendar needs datetime"):
        TimeSeriesDataModule(**dm_kwargs(path, time_col=None, periods="calendar"))


# ------------------------------------------------------------------------------ datamodule defaults
def test_vic_elec_defaults_apply_to_the_default_data_only(tmp_path):
    path, targets, covs, future, zone = TimeSeriesDataModule._resolve_data(Source(None, target_cols=None))
    assert path == vic_elec_path()
    assert (targets, covs, future, zone) == (["Demand"], ["Temperature"], ["Holiday"], VIC_ELEC["timezone"])
    own = TimeSeriesDataModule._resolve_data(Source("x.csv", target_cols=["temp"]))
    assert own[1:] == (["temp"], [], [], None)  # no covariates, no known-future columns, the stamps' own zone


def test_datamodule_reports_the_step_and_keeps_what_it_used(tmp_path, lightning_log):
    df = seasonal_frame(freq="30min").rename(columns={"when": "date"})
    path = write_csv(tmp_path / "half.csv", df)
    dm = TimeSeriesDataModule(**dm_kwargs(path, time_col="date", calendar="auto", covariate_cols=None))
    assert "half.csv: 960 rows, step 30min (median)" in lightning_log.lines
    assert dm.freq == "30min" and dm.step_seconds == 1800.0
    assert dm.covariate_names == ["hour_sin", "hour_cos", "dayofweek_sin", "dayofweek_cos"]
    assert dm.hparams["seasonality"]["calendar"] == ["hour", "dayofweek"]  # as used: saved grouped
    assert dm.hparams["source"]["covariate_cols"] == []


def test_default_test_lookbacks_leave_out_those_without_room(series_csv, lightning_log):
    dm = TimeSeriesDataModule(**dm_kwargs(series_csv, lookback=200, patch_len=1))
    assert dm.eval_lookbacks == [200, 400, 800]  # the test split starts at row 672 < 1600
    assert "for [1600]; set data.init_args.windows.eval_lookbacks" in lightning_log.text


@pytest.mark.parametrize(("freq", "patch_len", "expected"), [("30min", 12, [48, 336]), ("1h", 4, [24, 168])])
def test_periods_calendar_gives_the_cycles_of_the_step(tmp_path, freq, patch_len, expected):
    path = write_csv(tmp_path / "s.csv", seasonal_frame(n=3000, freq=freq))
    dm = TimeSeriesDataModule(**dm_kwargs(path, lookback=336, patch_len=patch_len, eval_lookbacks=[336, 672],
                                          periods="calendar"))
    assert dm.periods == expected and dm.pe_periods == [p / patch_len for p in expected]


def test_row_order_series_forecasts_from_a_table_without_a_time_column(tmp_path):
    from pipelines import Forecaster
    from pipelines.tasks.forecast.predict import example_table

    df = seasonal_frame().drop(columns="when")
    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "s.csv", df), time_col=None,
                                          duplicates="mean", calendar="auto"))
    torch.manual_seed(0)
    tiny = {"d_model": 16, "n_heads": 2, "n_layers": 2}
    model = task(Forecaster, n_targets=1, n_covariates=dm.n_covariates, horizon=6, patch_len=4, **tiny).eval()
    model.posenc_inference = model.describe_data(dm)
    assert model.posenc_inference["data"]["time_col"] is None
    assert model.posenc_inference["data"]["duplicates"] == "mean"
    assert list(example_table(model, dm).columns) == ["load", "temp"]
    item = dm.dataset("test")[0]
    tau = int(item["start"])
    with torch.no_grad():
        want = model(item["x"][None], item["cov"][None], item["pos"][None])[0, :, 0].numpy()
    got = model.predict(df.iloc[:tau])  # the rows up to the forecast origin
    np.testing.assert_allclose(got["load"], want * dm.target_scale[0] + dm.target_loc[0], rtol=1e-5)
    assert list(got["time"]) == [float(tau + h) for h in range(6)]  # times are row numbers


def test_packaged_file_paths_resolve_inside_the_installed_package(tmp_path):
    from datamodules.timeseries.parse import resolve_path

    assert resolve_path("package:tsdata/fpp3/vic_elec.csv") == vic_elec_path()  # as DNA paths are written
    assert resolve_path(tmp_path / "x.csv") == tmp_path / "x.csv"  # a plain path stays a path
    frame = read_table("package:tsdata/fpppy/EPF_FR_BE.csv")
    assert {"unique_id", "ds", "y"} <= set(frame.columns)
    bad = (("package:tsdata/nope.csv", "missing from package 'tsdata'"),
           ("package:no_such_pkg_x/a.csv", "'no_such_pkg_x' is not installed"),
           ("package:tsdata", "package:<package>/"))
    for path, says in bad:
        with pytest.raises(PosencError, match=says):
            resolve_path(path)


def test_a_series_from_a_packaged_long_table(lightning_log):
    dm = TimeSeriesDataModule(Source(path="package:tsdata/fpppy/EPF_FR_BE.csv", select={"unique_id": "BE"},
                                     time_col="ds", target_cols=["y"], future_cols=["system_load"]),
                              windows=Windows(lookback=48, horizon=24, patch_len=24))
    assert len(dm.series) == 16080 and dm.freq == "1h"  # one of the two stacked series
    assert dm.n_future >= 1  # the day-ahead load (and the calendar) are known over the horizon
