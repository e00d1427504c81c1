"""Inference: load a trained model (checkpoint, run id, MLflow URI) and run it on new files.

``pipelines.inference.load_model`` is public API: models registered in MLflow import it when they load.
"""

from pipelines.inference.loading import load_model, predict

__all__ = ["load_model", "predict"]
