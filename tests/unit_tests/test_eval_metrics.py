"""Evaluation metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from langchain_selfrag.evaluation.qa import metrics as M
from langchain_selfrag.evaluation.qa.data import Example
from langchain_selfrag.evaluation.qa.report import markdown_table, system_metrics
from langchain_selfrag.evaluation.qa.sweeps import issup_sweep, rerank, threshold_sweep


def test_normalize_answer_follows_squad():
    assert M.normalize_answer("The  Eiffel-Tower, in PARIS!") == "eiffeltower in paris"
    assert M.normalize_answer("an apple a day") == "apple day"


def test_match_is_substring_of_normalised_prediction():
    assert M.match("It was in France, in 911.", ["france"]) == 1.0
    assert M.match("The Normans", ["Normans", "Norse"]) == 1.0
    assert M.match("Germany", ["France"]) == 0.0
    assert M.match("anything", []) == 0.0
    assert M.match("anything", ["", "  "]) == 0.0  # empty golds never match


def test_exact_match_and_f1_hand_computed():
    assert M.exact_match("the France", ["France"]) == 1.0
    assert M.exact_match("in France", ["France", "Paris"]) == 0.0
    # prediction tokens: [in, 10th, century], gold: [10th, and, 11th, centuries]: 1 common
    # precision 1/3, recall 1/4 -> F1 = 2 * (1/12) / (7/12) = 2/7
    assert M.f1("in 10th century", ["10th and 11th centuries"]) == pytest.approx(2 / 7)
    assert M.f1("in 10th century", ["10th and 11th centuries", "10th century"]) == pytest.approx(0.8)
    # unanswerable (no gold): right only when the prediction is empty
    assert M.exact_match("", []) == 1.0 and M.f1("", []) == 1.0
    assert M.exact_match("France", []) == 0.0 and M.f1("France", []) == 0.0


def test_choose_option():
    options = {"A": "red planet", "B": "blue whale", "C": "green tea"}
    assert M.choose_option("B", options) == "B"
    assert M.choose_option("(c) green tea", options) == "C"
    assert M.choose_option("C: green tea", options) == "C"
    assert M.choose_option("I think the blue whale.", options) == "B"
    assert M.choose_option("A blue whale", options) == "B"  # text beats a leading article
    assert M.choose_option("a planet, reddish", options) == "A"  # token F1 fallback
    assert M.choose_option("nothing at all", options) is None


def test_accuracy_and_abstention():
    assert M.accuracy(["A", "B", None, "D"], ["A", "C", "C", "D"]) == 0.5
    assert M.accuracy([], []) is None
    # abstained on q0 (unanswerable), q1 (answerable), q3 (unanswerable); q2 unanswerable missed
    precision, recall = M.abstention_precision_recall([True, True, False, True], [False, True, False, False])
    assert precision == pytest.approx(2 / 3)
    assert recall == pytest.approx(2 / 3)
    assert M.abstention_precision_recall([False, False], [True, True]) == (None, None)


def test_retrieval_frequency_and_latency():
    assert M.retrieval_frequency([True, False, True, True]) == 0.75
    assert M.retrieval_frequency([]) is None
    summary = M.latency_summary([1.0, 2.0, 3.0, 4.0, 10.0])
    assert summary["latency_mean_s"] == 4.0
    assert summary["latency_p50_s"] == 3.0
    assert summary["latency_p95_s"] == pytest.approx(4.0 + 0.8 * 6.0)  # position 3.8 of 0..4
    assert M.percentile([], 50) is None


def test_citation_scores_issup():
    queries = [
        [(True, 1.0), (True, 0.2)],  # 2 citations, 1 supported: P 1/2, R 1/2
        [(False, None), (True, 0.5)],  # 1 citation, supported: P 1, R 1/2
        [(False, None)],  # no citation: R 0, no precision
    ]
    precision, recall = M.citation_scores_issup(queries)
    assert precision == pytest.approx((0.5 + 1.0) / 2)
    assert recall == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    assert M.citation_scores_issup([]) == (None, None)


def test_citation_scores_gold():
    cited = [["Paris is in France.", "Berlin is big."], [], ["nothing here"]]
    golds = [["France"], ["Spain"], ["Italy"]]
    precision, recall = M.citation_scores_gold(cited, golds)
    assert precision == pytest.approx((0.5 + 0.0) / 2)  # queries with citations only
    assert recall == pytest.approx(1 / 3)


def _ex(i, answers, answerable=None, **kw):
    return Example(id=str(i), question=f"q{i}", answers=answers, answerable=answerable, **kw)


def test_system_metrics_hand_computed():
    examples = [
        _ex(0, ["France"], True),
        _ex(1, ["1066"], True),
        _ex(2, [], False),
        _ex(3, [], False),
    ]
    records = {
        "0": {
            "answer": "France",
            "abstained": False,
            "retrieved": True,
            "latency_s": 1.0,
            "citations": [{"title": "t", "text": "Normandy is in France"}],
            "segments": [[True, 1.0]],
        },
        "1": {
            "answer": "In 1066 AD",
            "abstained": False,
            "retrieved": False,
            "latency_s": 2.0,
            "citations": [],
            "segments": [[False, None]],
        },
        "2": {
            "answer": "I do not know",
            "abstained": True,
            "retrieved": True,
            "latency_s": 3.0,
            "citations": [],
            "segments": [],
        },
        "3": {
            "answer": "Paris",
            "abstained": False,
            "retrieved": False,
            "latency_s": 4.0,
            "citations": [],
            "segments": [[False, None]],
        },
    }
    m = system_metrics(examples, records)
    assert m["match"] == 1.0  # both answerable questions contain the gold
    # EM: 1, 0 (in 1066 ad), 1 (abstained = empty), 0 -> 0.5
    assert m["exact_match"] == 0.5
    # F1: 1, 2*(1/3*1)/(1/3+1)=0.5, 1, 0 -> 0.625
    assert m["f1"] == pytest.approx(0.625)
    assert m["accuracy"] is None
    assert m["abstention_rate"] == 0.25
    assert m["abstention_precision"] == 1.0
    assert m["abstention_recall"] == 0.5
    assert m["retrieval_frequency"] == 0.5
    # answered: 0, 1, 3. IsSup recall: 1, 0, 0; precision: only q0 cites -> 1
    assert m["citation_recall_issup"] == pytest.approx(1 / 3)
    assert m["citation_precision_issup"] == 1.0
    # gold: answered with golds: q0 (cites France -> hit), q1 (no citations)
    assert m["citation_recall_gold"] == 0.5
    assert m["citation_precision_gold"] == 1.0
    assert m["latency_mean_s"] == 2.5
    table = markdown_table({"sys": {"metrics": m, "n": 4}})
    assert "| sys | 4 | 100.0 | 50.0 | 62.5 |" in table
    assert "acc" not in table  # an unmeasured column is left out


def test_system_metrics_closed_set_accuracy():
    opts = {"A": "x", "B": "y"}
    examples = [_ex(0, ["A"], options=opts, label="A"), _ex(1, ["B"], options=opts, label="B")]
    records = {"0": {"answer": "A", "option": "A"}, "1": {"answer": "x", "option": "A"}}
    m = system_metrics(examples, records)
    assert m["accuracy"] == 0.5
    assert m["match"] is None and m["f1"] is None


def test_threshold_sweep_replays_adaptive_retrieval():
    examples = [_ex(i, ["yes"]) for i in range(4)]
    probs = {"0": 0.1, "1": 0.3, "2": 0.6, "3": 0.9}
    never = {str(i): {"answer": "no"} for i in range(4)}
    always = {str(i): {"answer": "yes"} for i in range(4)}
    rows = threshold_sweep(examples, probs, never, always, thresholds=[0.0, 0.2, 0.5, 1.0])
    assert [r["retrieval_frequency"] for r in rows] == [1.0, 0.75, 0.5, 0.0]
    assert [r["quality"] for r in rows] == [1.0, 0.75, 0.5, 0.0]


def test_rerank_and_issup_sweep():
    trace = [
        {"passage": 0, "text": "Paris", "seq_prob": 0.9, "isrel": 1.0, "issup": 0.0, "isuse": 1.0},
        {"passage": 1, "text": "Lyon", "seq_prob": 0.5, "isrel": 1.0, "issup": 1.0, "isuse": 1.0},
        {"passage": 2, "text": "Nice", "seq_prob": 1.0, "isrel": 1.0, "issup": 1.0, "isuse": 1.0, "dropped": True},
    ]
    # w_sup 0: 0.9+1+0.5 = 2.4 vs 0.5+1+0.5 = 2.0 -> Paris; w_sup 1: 2.4 vs 3.0 -> Lyon
    assert rerank(trace, 0.0)["text"] == "Paris"
    assert rerank(trace, 1.0)["text"] == "Lyon"
    assert rerank([], 1.0) is None
    rows = issup_sweep([_ex(0, ["Lyon"])], {"0": {"trace": trace}}, weights=[0.0, 1.0])
    assert [(r["match"], r["supported"]) for r in rows] == [(0.0, 0.0), (1.0, 1.0)]
    # closed set: scores of the same option add up (A: 2.4 + 2.0 beats B alone)
    closed = [
        {"text": "A", "seq_prob": 0.9, "isrel": 1.0, "issup": 0.0, "isuse": 1.0},
        {"text": "A", "seq_prob": 0.5, "isrel": 1.0, "issup": 0.0, "isuse": 1.0},
        {"text": "B", "seq_prob": 1.0, "isrel": 1.0, "issup": 1.0, "isuse": 1.0},
    ]
    assert rerank(closed, 1.0, options={"A": "a", "B": "b"})["text"] == "A"
    assert not math.isnan(rows[0]["match"])
