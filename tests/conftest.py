"""Fixtures for every test (plain helper functions are in tests/helpers.py)."""

from __future__ import annotations

import logging
import os
import sys

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``make test``: ``-n 2``) each worker runs torch on one thread, and so do
    the processes it starts: two workers × torch's default of one thread per core would put four busy
    threads on two cores, where the threads of tiny models' ops spend their time waiting on each other.

    The tests' own classes (``tests.toy``: a fault-injecting callback, a toy task) are named in configs,
    so ``tests`` is a trusted module for them and the commands they start (the config parser imports
    nothing else than the trusted modules)."""
    os.environ.setdefault("POSENC_TRUSTED_MODULES", "tests")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    if os.environ.get("POSENC_TEST_TIMES"):  # opt-in per-test CPU seconds (tests/timing.py)
        from tests.timing import CpuTimes

        config.pluginmanager.register(CpuTimes(os.environ["POSENC_TEST_TIMES"]), "posenc-test-times")
    if getattr(config.option, "dist", "no") == "loadfile":  # files in our order, not by their test count
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist the costliest files first (``tests.timing.FIRST``: the suite ends on short ones)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from tests.timing import costliest_first

        costliest_first(items)


@pytest.fixture(autouse=True)
def lightning_logs_to_current_stderr():
    """Lightning's stream handlers keep the stderr of the test that imported it; point them at ours,
    so ``capsys`` sees what a CLI run under test prints through Lightning's loggers."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        for handler in logging.getLogger(name).handlers:
            if type(handler) is logging.StreamHandler:  # not pytest's own capture handlers
                handler.stream = sys.stderr  # setStream would flush the closed one


@pytest.fixture(autouse=True)
def progress_switch_restored():
    """An in-process CLI run with ``--progress false`` (a test's or a module fixture's) turns progress off
    for the whole process; put the switch back to its default after every test so the next file's tests
    (e.g. the genome cache's bar) see it on."""
    from datamodules.progress import set_progress

    yield
    set_progress(True)
