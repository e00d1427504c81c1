"""Inference: find a trained model (checkpoint, run id, MLflow URI), load it, run it on new files.

``resolve`` finds the checkpoint, ``loading`` rebuilds the task module, ``outputs`` writes atomically
and ``predict`` is the command; each task's predictor lives beside its task (``pipelines.tasks``).
``pipelines.inference.load_model`` is public API: models registered in MLflow import it when they load.
"""

from pipelines.inference.loading import load_model

__all__ = ["load_model"]
