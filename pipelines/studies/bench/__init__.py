"""``python -m pipelines.studies.bench``: throughput and memory of posenc's model against peer
implementations."""
