"""``python -m pipelines.studies.ltsf``: the long-horizon forecasting benchmark
(:mod:`~pipelines.studies.ltsf.run`), its models, their fitting, the ensemble and the report."""
