"""Fixtures of the time-series tests (the synthetic series and CSV writers are in tests/helpers.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.helpers import seasonal_frame, write_csv


@pytest.fixture
def series_csv(tmp_path) -> Path:
    return write_csv(tmp_path / "load.csv", seasonal_frame())


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
