"""``python -m pipelines.studies.compare``: positional encodings compared on one task
(:mod:`~pipelines.studies.compare.run`), the child runs read back, their statistics and the report."""
