"""``python -m pipelines.studies.promoters``: see :mod:`pipelines.studies.promoters.run`."""

from pipelines.studies.promoters.run import main

if __name__ == "__main__":
    main()
