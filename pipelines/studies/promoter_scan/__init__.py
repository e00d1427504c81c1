"""The promoter scanning study: a promoter classifier trained on short crops reads long genome windows
(``python -m pipelines.studies.promoter_scan``; :mod:`pipelines.studies.promoter_scan.run`)."""
