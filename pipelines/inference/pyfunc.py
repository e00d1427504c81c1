"""The MLflow pyfunc face of a registered posenc model (imported only when MLflow loads one).

``mlflow.pyfunc.load_model("models:/<name>/<version>")`` gives a pyfunc whose ``predict`` takes what
the task's predictor takes (:mod:`pipelines.tasks.dna.predict`: a DataFrame with ``id``/``sequence``
columns for DNA tasks; :mod:`pipelines.tasks.forecast.predict`: the time-series table for a
forecaster); ``unwrap_python_model().model`` is the project's own LightningModule.
``pipelines.load_model`` reads the stored checkpoint directly instead.
"""

from __future__ import annotations

from typing import Any

import mlflow.pyfunc
import pandas as pd


class PosencPyfunc(mlflow.pyfunc.PythonModel):
    """Wraps the checkpoint stored as the model's ``checkpoint`` artifact."""

    def load_context(self, context: Any) -> None:
        # lazy: MLflow runs this file as the model's code; load only on load_context
        from pipelines.inference import load_model

        self.model = load_model(context.artifacts["checkpoint"], device="cpu")

    def predict(self, context: Any, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> pd.DataFrame:
        """The task's predictions. A DataFrame hint is one MLflow validates nothing against: the
        logged signature (explicit column types, see ``registry.signature_for``) is the schema."""
        return self.model.predict(model_input, **(params or {}))


if __name__ != "pipelines.inference.pyfunc":  # run as MLflow's "model from code" file when a model loads
    from mlflow.models import set_model

    set_model(PosencPyfunc())
