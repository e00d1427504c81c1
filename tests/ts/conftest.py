"""Small synthetic series in tmp_path shared by the time-series tests."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch  # noqa: F401 - imported at collection, see below
import numpy as np
import pandas as pd
import pytest

# Lightning gives its loggers a stderr handler of their own when imported while the root logger has
# none. Imported first inside a test, that handler would keep the test's captured stream and later
# tests would print "--- Logging error ---" tracebacks; imported here (pytest's log capture in place),
# its records go through the root logger like everyone else's.


def seasonal_frame(n: int = 960, period: int = 24, seed: int = 0, freq: str = "1h") -> pd.DataFrame:
    """Hourly ``load`` = daily sine + weekly-ish sine + noise, a ``temp`` covariate, ISO timestamps."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    load = 10 + 3 * np.sin(2 * np.pi * t / period) + np.sin(2 * np.pi * t / (4 * period))
    return pd.DataFrame({
        "when": pd.date_range("2024-01-01", periods=n, freq=freq).strftime("%Y-%m-%d %H:%M:%S"),
        "load": load + 0.1 * rng.normal(size=n),
        "temp": 20 + np.cos(2 * np.pi * t / period) + 0.1 * rng.normal(size=n),
    })


def write_csv(path: Path, df: pd.DataFrame) -> Path:
    df.to_csv(path, index=False)
    return path


@pytest.fixture
def series_csv(tmp_path) -> Path:
    return write_csv(tmp_path / "load.csv", seasonal_frame())


def dm_kwargs(path: Path, **over) -> dict:
    """A small TimeSeriesDataModule config over ``path`` (lookback 24, horizon 6, patches of 4)."""
    kw = dict(path=str(path), time_col="when", target_cols=["load"], covariate_cols=["temp"],
              lookback=24, horizon=6, patch_len=4, batch_size=16, split=(0.6, 0.1, 0.3))
    kw.update(over)
    return kw
