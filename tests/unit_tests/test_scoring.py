"""Scores against numbers computed by hand from the formulas of paper appendix A.3."""

import math

import pytest

from langchain_selfrag import scoring as S
from langchain_selfrag import tokens as T


def test_retrieve_probability_uses_probabilities_not_logprobs():
    probs = {T.RETRIEVAL: 0.3, T.NO_RETRIEVAL: 0.1, T.CONTINUE: 0.5}
    assert S.retrieve_probability(probs) == pytest.approx(0.75)
    assert S.should_retrieve(probs, threshold=0.2)
    assert not S.should_retrieve(probs, threshold=0.8)
    # The authors' bug divided raw log-probs: log(.3)/(log(.3)+log(.1)) = 0.343 -> the opposite ordering.
    low = {T.RETRIEVAL: 0.01, T.NO_RETRIEVAL: 0.9}
    assert S.retrieve_probability(low) == pytest.approx(0.01 / 0.91)
    assert not S.should_retrieve(low, threshold=0.2)


def test_retrieve_probability_zero_mass():
    assert S.retrieve_probability({}) == 0.0
    assert not S.should_retrieve({}, 0.0)


def test_isrel():
    assert S.isrel_score({T.RELEVANT: 0.6, T.IRRELEVANT: 0.2}) == pytest.approx(0.75)
    assert S.isrel_score({T.RELEVANT: 0.0, T.IRRELEVANT: 0.0}) == 0.0


def test_issup_full_and_partial():
    probs = {T.FULLY_SUPPORTED: 0.5, T.PARTIALLY_SUPPORTED: 0.3, T.NO_SUPPORT: 0.2}
    # 0.5/1.0 + 0.5 * 0.3/1.0 = 0.65
    assert S.issup_score(probs) == pytest.approx(0.65)
    # Normalised within the group: halving all probabilities changes nothing.
    assert S.issup_score({k: v / 2 for k, v in probs.items()}) == pytest.approx(0.65)
    assert S.issup_score(None) == 0.0


def test_isuse_weights():
    probs = dict(zip(T.UTILITY, [0.1, 0.1, 0.2, 0.2, 0.4]))
    # -1*.1 - .5*.1 + 0 + .5*.2 + 1*.4 = 0.35
    assert S.isuse_score(probs) == pytest.approx(0.35)
    assert S.isuse_score({T.UTILITY[4]: 0.2}) == pytest.approx(1.0)
    assert S.isuse_score({}) == 0.0


def test_sequence_probability_is_geometric_mean():
    assert S.sequence_probability(math.log(0.5) * 4, 4) == pytest.approx(0.5)
    assert S.sequence_probability(0.0, 0) == 1.0


def test_segment_score_defaults_and_custom_weights():
    assert S.segment_score(0.4, 0.75, 0.65, 0.35) == pytest.approx(0.4 + 0.75 + 0.65 + 0.5 * 0.35)
    w = S.Weights(rel=0.0, sup=2.0, use=0.0)
    assert S.segment_score(0.4, 0.75, 0.65, 0.35, w) == pytest.approx(0.4 + 1.3)


def test_hard_constraint():
    assert S.violates_hard_constraint({T.FULLY_SUPPORTED: 0.1, T.PARTIALLY_SUPPORTED: 0.2, T.NO_SUPPORT: 0.7})
    assert not S.violates_hard_constraint({T.FULLY_SUPPORTED: 0.5, T.NO_SUPPORT: 0.4})
    assert not S.violates_hard_constraint(None)


def test_closed_set_aggregation_sums_identical_answers():
    best, totals = S.aggregate_closed_set([("true", 1.0), ("false", 1.5), ("true", 0.9)])
    assert best == "true"
    assert totals == {"true": pytest.approx(1.9), "false": 1.5}
    with pytest.raises(ValueError):
        S.aggregate_closed_set([])
