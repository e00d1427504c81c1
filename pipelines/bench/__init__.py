"""``python -m pipelines.bench``: throughput and memory of posenc's model against peer implementations."""
