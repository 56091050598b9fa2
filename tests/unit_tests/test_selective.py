"""Selective-QA figures (coverage, selective accuracy, rejection, F1_RG, AURC) against hand counts."""

from __future__ import annotations

import pytest

from langchain_selfrag.evaluation.common.selective import (
    Outcome,
    aurc,
    coverage,
    grounded_refusal_f1,
    optimal_aurc,
    over_refusal,
    rejection_rate,
    risk_coverage_curve,
    selective_accuracy,
    selective_accuracy_at,
    trust_report,
)

# 4 answerable (2 answered right, 1 answered wrong, 1 abstained) and 2 unanswerable (1 answered, 1 abstained)
ITEMS = [
    Outcome(True, True, True, 0.9),
    Outcome(True, True, True, 0.8),
    Outcome(True, True, False, 0.7),
    Outcome(True, False, True, 0.2),
    Outcome(False, True, False, 0.6),
    Outcome(False, False, False, 0.1),
]


def test_figures_match_hand_counts() -> None:
    assert coverage(ITEMS) == pytest.approx(4 / 6)
    assert selective_accuracy(ITEMS) == pytest.approx(2 / 4)  # the answered unanswerable one is never right
    assert rejection_rate(ITEMS) == pytest.approx(1 / 2)
    assert over_refusal(ITEMS) == pytest.approx(1 / 4)
    # refusal F1: tp 1 (unanswerable abstained), fp 1 (answerable abstained), fn 1 -> 0.5;
    # answer F1: tp 3, fp 1, fn 1 -> 0.75
    assert grounded_refusal_f1(ITEMS) == pytest.approx((0.5 + 0.75) / 2)


def test_risk_coverage_ranks_by_confidence_and_is_pessimistic_on_ties() -> None:
    cov, risk = risk_coverage_curve(ITEMS)
    # order 0.9 R, 0.8 R, 0.7 W, 0.6 W, 0.2 R, 0.1 W
    assert list(risk) == pytest.approx([0, 0, 1 / 3, 2 / 4, 2 / 5, 3 / 6])
    assert list(cov) == pytest.approx([i / 6 for i in range(1, 7)])
    assert aurc(ITEMS) == pytest.approx(sum([0, 0, 1 / 3, 2 / 4, 2 / 5, 3 / 6]) / 6)
    tied = [Outcome(True, True, True, 0.5), Outcome(False, True, False, 0.5)]
    assert list(risk_coverage_curve(tied)[1]) == [1.0, 0.5]  # the wrong one first within a tie
    assert optimal_aurc(ITEMS) < aurc(ITEMS)
    assert selective_accuracy_at(ITEMS, 1 / 3) == 1.0 and selective_accuracy_at(ITEMS, 1.0) == pytest.approx(0.5)


def test_unmeasurable_figures_are_none_not_zero() -> None:
    answerable_only = [Outcome(True, True, True, 1.0)]
    assert rejection_rate(answerable_only) is None and grounded_refusal_f1(answerable_only) is None
    assert selective_accuracy([Outcome(True, False, False)]) is None
    assert aurc([]) is None and coverage([]) is None


def test_report_has_intervals_that_hold_the_value_and_a_curve() -> None:
    report = trust_report(ITEMS * 5, n_resamples=200, seed=1)
    for name in ("coverage", "selective_accuracy", "rejection_rate", "over_refusal", "f1_rg", "aurc"):
        lo, hi = report[name]["ci95"]
        assert lo <= report[name]["value"] <= hi
    assert report["risk_coverage"]["coverage"][-1] == 1.0
    assert report["operating_point"]["coverage"] == pytest.approx(4 / 6)
