"""Small synthetic series in tmp_path shared by the time-series tests."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.test_cli_errors import lightning_logs_to_current_stderr  # noqa: F401 - autouse: applies here


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


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def lightning_log():
    """The messages logged through Lightning (``rank_zero_info``: what a user sees on the terminal),
    whether or not Lightning's logger propagates to the root logger that ``caplog`` watches."""
    handler, logger = _Lines(), logging.getLogger("lightning.pytorch")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
