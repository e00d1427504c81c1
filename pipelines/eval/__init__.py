"""Evaluation a user's run needs: length extrapolation of one model, evaluate, the one sweep runner, and
the estimates they report (``statistics``). The calls that studies make on those estimates (Holm, the seed
× block bootstrap, power) live with the studies, in :mod:`pipelines.studies.verdicts`."""
