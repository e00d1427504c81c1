"""Nothing fabricated (issue 42): the LTSF benchmark refuses a mostly-empty target and a missing scored
value, says how many train values it filled; a value whose square overflows float32 is refused by
name. Synthetic files in tmp_path."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from posenc import PosencError

BORDERS = (600, 800, 1000)


def ett_like(path, missing: dict[str, np.ndarray] | None = None, n: int = 1000):
    """An hourly CSV with ``date``, ``HUFL`` and ``OT``; rows of ``missing[col]`` left empty."""
    t = np.arange(n)
    dates = pd.date_range("2016-07-01", periods=n, freq="h").strftime("%Y-%m-%d %H:%M:%S")
    frame = pd.DataFrame({"date": dates,
                          "HUFL": np.sin(2 * np.pi * t / 24), "OT": np.cos(2 * np.pi * t / 24) + 0.01 * t})
    for col, rows in (missing or {}).items():
        frame.loc[rows, col] = np.nan
    frame.to_csv(path, index=False)
    return path


def test_a_target_99_percent_empty_is_refused_not_filled(tmp_path):
    from datamodules.timeseries.ltsf import read_ltsf

    rows = np.setdiff1d(np.arange(1000), np.arange(0, 1000, 100))  # one value in a hundred is kept
    path = ett_like(tmp_path / "ett.csv", {"OT": rows})
    with pytest.raises(PosencError, match=r"ett.csv: column 'OT' is 99% empty .* more than 10% missing"):
        read_ltsf(path, borders=BORDERS)


def test_a_missing_value_in_a_scored_split_is_refused_by_row(tmp_path):
    from datamodules.timeseries.ltsf import read_ltsf

    path = ett_like(tmp_path / "ett.csv", {"OT": np.array([900])})
    with pytest.raises(PosencError, match=r"column 'OT' has no value at row 900, "
                                          r"in the test split"):
        read_ltsf(path, borders=BORDERS)


def test_filled_train_values_are_counted_and_only_there(tmp_path, capsys):
    from datamodules.timeseries.ltsf import read_ltsf

    path = ett_like(tmp_path / "ett.csv", {"OT": np.arange(10, 40), "HUFL": np.array([5])})
    data = read_ltsf(path, borders=BORDERS)
    err = capsys.readouterr().err
    assert "note: ett.csv: 31 missing train value(s) filled by linear interpolation (HUFL=1, OT=30)" in err
    assert "never scored" in err and np.isfinite(data.values).all()


@pytest.mark.parametrize("value", [3e38, -3e38, 2e19])
def test_a_value_whose_square_overflows_float32_is_refused_by_column(tmp_path, value):
    """±3e38 is finite in float32, but its square (every squared-error metric) is not: one line naming
    the column and the row, instead of a training that reports val/mse = inf."""
    from datamodules.timeseries.parse import parse_series, read_table

    path = ett_like(tmp_path / "big.csv", n=50)
    frame = pd.read_csv(path)
    frame.loc[7, "OT"] = value
    frame.to_csv(path, index=False)
    with pytest.raises(PosencError, match=r"big.csv: column 'OT' has the value .* at row 7 \(line 9\), whose "
                                          r"square overflows float32"):
        parse_series(read_table(path), "date", ["OT"], source="big.csv")
