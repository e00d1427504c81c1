"""Tracking: MLflow wiring (store, logger, config artifact), model registry, resume and failure handling."""
