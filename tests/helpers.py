"""Shared test helpers: run the CLI in a temporary folder with its own MLflow store."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def in_dir(tmp: Path) -> Iterator[Path]:
    """cwd = ``tmp`` and an absolute sqlite MLflow store inside it, both restored afterwards.

    The URI must be absolute: MLflow caches stores by URI, so a relative ``sqlite:///mlflow.db``
    would let one test reuse another test's database.
    """
    cwd, uri = os.getcwd(), os.environ.get("MLFLOW_TRACKING_URI")
    os.chdir(tmp)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'mlflow.db'}"
    try:
        yield tmp
    finally:
        os.chdir(cwd)
        if uri is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = uri
