"""``python -m pipelines.studies.promoter_scan``: see :mod:`pipelines.studies.promoter_scan.run`."""

from pipelines.studies.promoter_scan.run import main

if __name__ == "__main__":
    main()
