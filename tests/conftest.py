"""Fixtures for every test (plain helper functions are in tests/helpers.py)."""

from __future__ import annotations

import logging
import sys

import pytest


@pytest.fixture(autouse=True)
def lightning_logs_to_current_stderr():
    """Lightning's stream handlers keep the stderr of the test that imported it; point them at ours,
    so ``capsys`` sees what a CLI run under test prints through Lightning's loggers."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        for handler in logging.getLogger(name).handlers:
            if type(handler) is logging.StreamHandler:  # not pytest's own capture handlers
                handler.stream = sys.stderr  # setStream would flush the closed one
