"""Evaluation: length extrapolation of one model, comparisons of schemes, their reports and statistics."""
