"""Inference: find a trained model (checkpoint, run id, MLflow URI), load it, run it on new files.

``pipelines.inference.load_model`` is public API: models registered in MLflow import it when they
load. It is imported on first use, so the task modules can use this package's predictors and
windowing without importing the loader (which needs the tasks).
"""

from importlib import import_module

__all__ = ["load_model"]


def __getattr__(name: str):
    if name == "load_model":
        return import_module("pipelines.inference.loading").load_model
    raise AttributeError(f"module 'pipelines.inference' has no attribute {name!r}")
