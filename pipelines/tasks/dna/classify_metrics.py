"""Two-class metrics as promoter papers report them (Lightning-free, float64, numpy and scipy only).

Scores rank samples: the higher, the more likely the positive class (class 1). Reported:

* :func:`roc_auc` — AUROC, the probability that a random positive outscores a random negative (ties
  count one half; the Mann–Whitney statistic).
* :func:`average_precision` — AUPRC as average precision: over the distinct score values from the
  highest down, the recall gained at each times the precision there, ``Σ (Rₙ − Rₙ₋₁) · Pₙ`` (a step
  curve; tied scores enter together). Its chance level is the share of positives.
* :func:`confusion` and :func:`rates` — at a threshold ``t`` a sample is called positive when its score
  is ≥ ``t``: sensitivity Sn = TP / (TP + FN), specificity Sp = TN / (TN + FP) and the Matthews
  correlation MCC = (TP·TN − FP·FN) / √((TP+FP)(TP+FN)(TN+FP)(TN+FN)) (0 when a margin is empty).
* :func:`choose_threshold` — the threshold with the highest MCC on the samples given (validation),
  placed halfway between the lowest score called positive and the next one below it.
* :func:`two_class_report` — all of them on test, the threshold chosen on validation.
* :func:`auroc` — AUROC of class scores (N, C), macro over classes for more than two (the baselines').

Sn and Sp do not depend on the class ratio of the test set; MCC does. :func:`mcc_at_ratio` gives the
MCC a classifier with a given Sn and Sp has at another ratio of negatives to positives, and
:func:`consistent_ratios` the ratios at which a published (Sn, Sp, MCC) triple, rounded, can hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

REPORTED = ("auroc", "auprc", "mcc", "sn", "sp", "threshold")  # what two_class_report returns


def _arrays(labels: Sequence[int] | np.ndarray,
            scores: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels).astype(np.int64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise ValueError(f"{y.size} labels but {s.size} scores")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("two-class labels must be 0 (negative) or 1 (positive)")
    return y, s


def roc_auc(labels: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray) -> float:
    """AUROC (ties count 1/2); NaN when one class is missing."""
    from scipy.stats import rankdata  # optional: scipy

    y, s = _arrays(labels, scores)
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = rankdata(s)  # average ranks of ties, 1-based
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _cumulative(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct score from the highest down: that score, and the TP and FP counts of calling
    every sample with a score ≥ it positive."""
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s) != 0), len(s) - 1]  # the last index of each tied group
    tp = np.cumsum(y)[last].astype(np.float64)
    fp = (last + 1 - tp).astype(np.float64)
    return s[last], tp, fp


def average_precision(labels: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray) -> float:
    """AUPRC as step-wise average precision; NaN without positives."""
    y, s = _arrays(labels, scores)
    n_pos = int(y.sum())
    if n_pos == 0 or len(y) == 0:
        return math.nan
    _, tp, fp = _cumulative(y, s)
    recall_gain = np.diff(np.r_[0.0, tp]) / n_pos
    return float(np.sum(recall_gain * tp / (tp + fp)))


def confusion(labels: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray,
              threshold: float) -> tuple[int, int, int, int]:
    """(TP, FP, TN, FN) calling a score ≥ ``threshold`` positive."""
    y, s = _arrays(labels, scores)
    called = s >= threshold
    tp, fp = int((called & (y == 1)).sum()), int((called & (y == 0)).sum())
    return tp, fp, int(((~called) & (y == 0)).sum()), int(((~called) & (y == 1)).sum())


def matthews(tp: float, fp: float, tn: float, fn: float) -> float:
    """MCC of a confusion matrix (0 when a row or column of it is empty)."""
    den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    return 0.0 if den == 0 else float((tp * tn - fp * fn) / math.sqrt(den))


def rates(tp: int, fp: int, tn: int, fn: int) -> dict[str, float]:
    """Sn, Sp and MCC of a confusion matrix (NaN Sn without positives, NaN Sp without negatives)."""
    return {"sn": tp / (tp + fn) if tp + fn else math.nan, "sp": tn / (tn + fp) if tn + fp else math.nan,
            "mcc": matthews(tp, fp, tn, fn)}


def choose_threshold(labels: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray) -> float:
    """The threshold of highest MCC on these samples (the strictest of equal ones), halfway between
    the lowest score it calls positive and the next distinct score below (or 1 below the lowest
    score, when it calls everything positive). NaN without both classes."""
    y, s = _arrays(labels, scores)
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    cuts, tp, fp = _cumulative(y, s)
    fn, tn = n_pos - tp, n_neg - fp
    den = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    with np.errstate(invalid="ignore", divide="ignore"):
        mcc = np.where(den > 0, (tp * tn - fp * fn) / den, 0.0)
    best = int(np.argmax(mcc))  # first maximum: the highest cut, the strictest threshold
    below = cuts[best + 1] if best + 1 < len(cuts) else cuts[best] - 1.0
    return float((cuts[best] + below) / 2.0)


def two_class_report(val_labels: Sequence[int] | np.ndarray, val_scores: Sequence[float] | np.ndarray,
                     test_labels: Sequence[int] | np.ndarray,
                     test_scores: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Test AUROC, AUPRC, and Sn, Sp, MCC at the threshold chosen on validation (max val MCC)."""
    threshold = choose_threshold(val_labels, val_scores)
    out = {"auroc": roc_auc(test_labels, test_scores), "auprc": average_precision(test_labels, test_scores),
           "threshold": threshold}
    if math.isnan(threshold):
        return out | {"mcc": math.nan, "sn": math.nan, "sp": math.nan}
    return out | rates(*confusion(test_labels, test_scores, threshold))


def auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    """AUROC of class scores (N, C): for two classes the usual ROC AUC of column 1, for more the macro
    mean over classes of one-vs-rest AUROC (each column ranked on its own, as the classifier reports it);
    NaN when the labels hold a single class."""
    from sklearn.metrics import roc_auc_score  # optional: sklearn

    labels = np.asarray(labels)
    if len(np.unique(labels)) < 2:
        return float("nan")
    if scores.shape[1] == 2:
        return float(roc_auc_score(labels, scores[:, 1]))
    present = [c for c in range(scores.shape[1]) if 0 < (labels == c).sum() < len(labels)]
    return float(np.mean([roc_auc_score(labels == c, scores[:, c]) for c in present]))


def mcc_at_ratio(sn: float, sp: float, ratio: float) -> float:
    """The MCC of a classifier with sensitivity ``sn`` and specificity ``sp`` on a set with ``ratio``
    negatives per positive (computed, not measured: the expected confusion matrix per positive)."""
    return matthews(sn, (1.0 - sp) * ratio, sp * ratio, 1.0 - sn)


def consistent_ratios(sn: float, sp: float, mcc: float, half_unit: float = 0.005,
                      grid: np.ndarray | None = None) -> tuple[float, float] | None:
    """The range of negatives-per-positive ratios at which published values ``sn``, ``sp``, ``mcc``
    (each rounded to ± ``half_unit``) can all hold, or ``None`` when none of ``grid`` (default:
    0.05 … 50, log-spaced) fits."""
    grid = np.exp(np.linspace(math.log(0.05), math.log(50.0), 4001)) if grid is None else grid
    steps = np.linspace(-half_unit, half_unit, 5)
    fits = np.zeros(len(grid), dtype=bool)
    for dsn in steps:
        for dsp in steps:
            a, b = sn + dsn, sp + dsp
            tp, fn, tn, fp = a, 1.0 - a, b * grid, (1.0 - b) * grid
            m = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
            fits |= np.abs(m - mcc) <= half_unit
    if not fits.any():
        return None
    return float(grid[fits].min()), float(grid[fits].max())


__all__ = ["REPORTED", "auroc", "average_precision", "choose_threshold", "confusion", "consistent_ratios",
           "matthews", "mcc_at_ratio", "rates", "roc_auc", "two_class_report"]
