"""Studies built on the evaluation library: the claim experiments, scheme comparisons and their reports,
the long-horizon forecasting benchmark, default-choice studies and the docs figures. Nothing outside this
package imports it (``python -m pipelines.studies.<study>`` entry points aside)."""
