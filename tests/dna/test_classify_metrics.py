"""Two-class metrics against cases worked by hand (float64), and against scikit-learn's on random data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.tasks.dna.classify_metrics import (
    average_precision,
    choose_threshold,
    confusion,
    consistent_ratios,
    matthews,
    mcc_at_ratio,
    rates,
    roc_auc,
    two_class_report,
)

# Six samples, sorted by score: + + - + - -
LABELS = [1, 1, 0, 1, 0, 0]
SCORES = [0.9, 0.8, 0.7, 0.6, 0.55, 0.1]


def test_auroc_and_auprc_of_a_hand_worked_case():
    # AUROC: the pairs (positive, negative) a positive wins: 0.9 and 0.8 beat all three negatives,
    # 0.6 beats 0.55 and 0.1 → 8 of 9.
    assert roc_auc(LABELS, SCORES) == pytest.approx(8 / 9, abs=1e-15)
    # AP: recall steps of 1/3 at precisions 1/1, 2/2 and 3/4 → (1 + 1 + 3/4) / 3 = 11/12.
    assert average_precision(LABELS, SCORES) == pytest.approx(11 / 12, abs=1e-15)


def test_ties_count_one_half_and_enter_the_precision_curve_together():
    assert roc_auc([1, 0], [0.5, 0.5]) == 0.5
    # scores 0.9 (one + one −) then 0.1 (+): precision 1/2 at recall 1/2, then 2/3 at recall 1
    assert average_precision([1, 0, 1], [0.9, 0.9, 0.1]) == pytest.approx(0.5 * 0.5 + 0.5 * 2 / 3, abs=1e-15)
    assert math.isnan(roc_auc([1, 1], [0.2, 0.3])) and math.isnan(average_precision([0, 0], [0.2, 0.3]))


def test_sn_sp_mcc_of_a_hand_worked_confusion_matrix():
    # at 0.65: called positive 0.9, 0.8, 0.7 → TP 2, FP 1, TN 2, FN 1
    assert confusion(LABELS, SCORES, 0.65) == (2, 1, 2, 1)
    r = rates(2, 1, 2, 1)
    assert r["sn"] == pytest.approx(2 / 3) and r["sp"] == pytest.approx(2 / 3)
    assert r["mcc"] == pytest.approx((2 * 2 - 1 * 1) / math.sqrt(3 * 3 * 3 * 3), abs=1e-15)  # 1/3
    assert matthews(5, 0, 0, 0) == 0.0  # an empty margin: 0 by convention


def test_the_threshold_of_best_validation_mcc_by_hand():
    # MCC per cut (TP, FP, TN, FN): ≥0.9 (1,0,3,2) 0.447; ≥0.8 (2,0,3,1) 0.707; ≥0.7 (2,1,2,1) 0.333;
    # ≥0.6 (3,1,2,0) 0.707; ≥0.55 (3,2,1,0) 0.447; ≥0.1 → 0. The strictest best cut is 0.8, and the
    # threshold sits halfway to the next score below, 0.7.
    assert choose_threshold(LABELS, SCORES) == pytest.approx(0.75, abs=1e-15)
    report = two_class_report(LABELS, SCORES, [1, 0, 1, 0], [0.76, 0.74, 0.2, 0.9])
    # test at 0.75: 0.76 (+) and 0.9 (−) called positive → TP 1, FP 1, TN 1, FN 1
    got = (report["sn"], report["sp"], report["mcc"], report["threshold"])
    assert got == pytest.approx((0.5, 0.5, 0.0, 0.75))
    # AUROC: of the four (positive, negative) pairs only (0.76, 0.74) is won → 1/4; AP: 0.9 (−) adds no
    # recall, 0.76 (+) adds 1/2 at precision 1/2, and 0.2 (+) the other 1/2 at precision 2/4
    assert report["auroc"] == pytest.approx(0.25) and report["auprc"] == pytest.approx(0.5 * 0.5 + 0.5 * 0.5)


def test_mcc_at_another_class_ratio_is_the_mcc_of_that_confusion_matrix():
    # 100 positives and 300 negatives, Sn 0.9 and Sp 0.96: TP 90, FN 10, TN 288, FP 12
    assert mcc_at_ratio(0.9, 0.96, 3.0) == pytest.approx(matthews(90, 12, 288, 10), abs=1e-12)
    lo, hi = consistent_ratios(0.95, 0.97, 0.91)
    assert lo < 1.5 < hi  # about one negative per positive fits Arabidopsis TATA's published triple …
    assert hi < 11459 / 1497  # … and the whole negative file's 7.7 does not
    assert mcc_at_ratio(0.95, 0.97, 11459 / 1497) < 0.905


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 6)), min_size=2, max_size=40))
def test_auroc_and_auprc_match_scikit_learn(pairs):
    from sklearn.metrics import average_precision_score, roc_auc_score

    y = np.array([p[0] for p in pairs])
    s = np.array([p[1] for p in pairs], dtype=np.float64) / 6  # few distinct values: many ties
    if len(set(y.tolist())) < 2:
        return
    assert roc_auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert average_precision(y, s) == pytest.approx(average_precision_score(y, s), abs=1e-12)
    t = choose_threshold(y, s)
    best = max(matthews(*confusion(y, s, c)) for c in np.unique(s))
    assert matthews(*confusion(y, s, t)) == pytest.approx(best, abs=1e-12)
