"""What older code wrote, read in today's spelling at the two ingresses: the command line and its configs
(:mod:`~pipelines.tasks.upgrade.legacy`) and checkpoints, upgraded version by version
(:mod:`~pipelines.tasks.upgrade.checkpoint`)."""
