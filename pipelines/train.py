"""``python -m pipelines.train fit --config configs/dna_lm.yaml``: train, test, log to MLflow."""

from pipelines.cli import main

if __name__ == "__main__":
    main()
