"""TimeSeriesDataModule on small CSVs: leakage, split borders, NaN policy in the loss, periods."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.timeseries.datamodule import TimeSeriesDataModule
from posenc import PosencError
from tests.helpers import dm_kwargs, seasonal_frame, write_csv


def test_scaler_never_sees_validation_or_test_rows(tmp_path):
    df = seasonal_frame()
    n_train = int(round(0.6 * len(df)))
    df.loc[n_train:, "load"] += 1e6  # anything after the training split would wreck the statistics
    df.loc[n_train:, "temp"] -= 1e6
    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "s.csv", df)))
    assert dm.n_train == n_train
    train = df["load"].to_numpy()[:n_train]
    np.testing.assert_allclose(dm.target_scaler.mean_, [train.mean()])
    np.testing.assert_allclose(dm.target_scaler.scale_, [train.std()])
    assert abs(dm.covariates[:n_train, 0].mean()) < 1e-5  # covariate scaler: train rows only too
    test = dm.windows("test")
    assert test["y"].min() > 1e4  # test targets scaled with the training statistics, not their own


def test_windows_respect_split_borders_and_share_starts_across_lookbacks(series_csv):
    dm = TimeSeriesDataModule(**dm_kwargs(series_csv, stride=5, eval_stride=3))
    (lo_v, hi_v), (lo_t, hi_t) = dm.bounds["val"], dm.bounds["test"]
    assert dm.eval_lookbacks == [24, 48, 96, 192]
    tr, va, te = dm.starts["train"], dm.starts["val"], dm.starts["test"]
    assert tr[0] == 24 and (np.diff(tr) == 5).all() and tr[-1] + 6 <= dm.n_train
    assert va[0] == lo_v and va[-1] + 6 <= hi_v and (np.diff(va) == 3).all()
    assert te[0] == lo_t and te[-1] + 6 <= hi_t
    loaders = dm.test_dataloader()
    assert len(loaders) == 4
    for n, loader in zip(dm.eval_lookbacks, loaders, strict=True):
        np.testing.assert_array_equal(loader.dataset.starts, te)  # same target windows
        batch = next(iter(loader))
        assert batch["x"].shape[1:] == (n, 1) and batch["cov"].shape[1:] == (n, 1)
        assert batch["y"].shape[1:] == (6, 1)
        first = int(batch["start"][0])
        np.testing.assert_allclose(batch["x"][0, :, 0].numpy(), dm.targets[first - n:first, 0])


def test_calendar_covariates_are_inputs(series_csv):
    dm = TimeSeriesDataModule(**dm_kwargs(series_csv, calendar=["hour", "dayofweek"]))
    assert dm.n_covariates == 1 + 4 and dm.covariate_names[1:] == ["hour_sin", "hour_cos", "dayofweek_sin",
                                                                  "dayofweek_cos"]
    item = dm.dataset("train")[0]
    assert item["cov"].shape == (24, 5)


@pytest.mark.parametrize("train_on_filled", [False, True])
def test_filled_targets_stay_out_of_the_loss_unless_asked(tmp_path, train_on_filled):
    df = seasonal_frame()
    df.loc[100:104, "load"] = np.nan
    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "s.csv", df), nan_policy="interpolate",
                                          train_on_filled=train_on_filled))
    ds = dm.dataset("train")
    i = int(np.flatnonzero(ds.starts == 100)[0])
    item = ds[i]
    assert item["y_mask"][:, 0].tolist() == [False] * 5 + [True]  # never scored
    assert item["loss_mask"][:, 0].tolist() == ([True] * 6 if train_on_filled else [False] * 5 + [True])
    assert np.isfinite(item["x"].numpy()).all() and np.isfinite(item["y"].numpy()).all()
    # validation/test never train on or score filled targets, whatever train_on_filled says
    assert not dm.dataset("val").loss_on_filled


def test_mask_policy_puts_the_training_mean_in_inputs(tmp_path):
    df = seasonal_frame()
    df.loc[50, "load"] = np.nan
    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "s.csv", df), nan_policy="mask"))
    assert dm.targets[50, 0] == 0.0 and not dm.series.observed[50, 0]
    with pytest.raises(PosencError, match="train_on_filled needs nan_policy"):
        TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "s.csv", df), nan_policy="mask",
                                         train_on_filled=True))


def test_periods_in_steps_become_token_positions(series_csv):
    dm = TimeSeriesDataModule(**dm_kwargs(series_csv, periods=[24, 96]))
    assert dm.periods == [24.0, 96.0] and dm.pe_periods == [6.0, 24.0]  # ÷ patch_len 4
    assert TimeSeriesDataModule(**dm_kwargs(series_csv)).pe_periods is None
    with pytest.raises(PosencError, match=r"data.init_args.seasonality.periods: period 6 steps is shorter"):
        TimeSeriesDataModule(**dm_kwargs(series_csv, periods=[6]))


def test_periods_estimated_from_the_training_split(tmp_path):
    df = seasonal_frame(n=2000)
    df.loc[1200:, "load"] = 10 + 3 * np.sin(2 * np.pi * np.arange(800) / 17)  # a different season later
    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "s.csv", df), periods="estimate",
                                          lookback=120, patch_len=4))
    assert dm.periods == [24.0, 96.0]  # the training split's seasons; 17 (test only) never leaks in
    assert dm.pe_periods == [6.0, 24.0]


@pytest.mark.parametrize(
    ("over", "mutate", "pattern"),
    [
        ({"time_col": "ts"}, None, r"load.csv: timestamp column 'ts' not found"),
        ({"target_cols": ["demand"]}, None, r"load.csv: target column 'demand' not found"),
        ({}, lambda d: d.assign(load=d.load.astype(object).where(d.index != 7, "12,5")),
         r"load.csv: column 'load' has a non-numeric value '12,5' at row 7 \(line 9\)"),
        ({}, lambda d: d.assign(when=d.when.where(d.index != 3, "31/02/2024 25:00")),
         r"load.csv: unparseable timestamp '31/02/2024 25:00' in column 'when' at row 3"),
        ({"lookback": 1000}, None, r"load.csv: the series has 960 rows, shorter than one window of lookback "
                                   r"\+ horizon = 1000 \+ 6 = 1006 rows"),
        ({"lookback": 200, "eval_lookbacks": [200, 1600]}, None,
         r"the test split \(rows 672\.\.959\) holds no window of lookback 1600"),
    ],
)
def test_bad_input_is_one_line_naming_the_column_or_row(tmp_path, over, mutate, pattern):
    df = seasonal_frame()
    path = write_csv(tmp_path / "load.csv", mutate(df) if mutate else df)
    with pytest.raises(PosencError, match=pattern) as info:
        TimeSeriesDataModule(**dm_kwargs(path, patch_len=1, **over))
    assert "\n" not in str(info.value)
