"""Tasks: one LightningModule per task, each owning its metrics, baselines and extension points."""
