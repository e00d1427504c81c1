"""The forecasting family: the Transformer :mod:`~pipelines.tasks.forecast.model` (``Forecaster``), its
PatchTST layout and DLinear, and what they share (layers, the linear path, baselines, metrics, predictor)."""
