"""The promoter benchmark (``make benchmark-promoters``): :mod:`~pipelines.studies.promoters.run` trains
and tests every set, :mod:`~pipelines.studies.promoters.sets` finds and checks the sets and their
published numbers, :mod:`~pipelines.studies.promoters.report` writes the tables."""

from pipelines.studies.promoters.run import main, run

__all__ = ["main", "run"]
