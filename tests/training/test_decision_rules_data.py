"""Invented tool documents with decision rules: the stated and unstated pair of each question."""

from __future__ import annotations

import re

from cookbook.data.decision_rules import rule_rows
from langchain_selfrag import tokens as T
from training.relevance_head import judge_pairs


def _passage(row: dict) -> str:
    return re.search(r"<paragraph>(.*?)</paragraph>", row["output"], re.S).group(1)


def test_each_question_has_its_rule_stated_in_one_passage_and_left_out_of_the_other():
    rows = rule_rows(30, seed=3)
    assert len(rows) == 60
    for stated, unstated in zip(rows[::2], rows[1::2]):
        assert stated["instruction"] == unstated["instruction"]
        assert (stated["variant"], unstated["variant"]) == ("rule_stated", "rule_unstated")
        rule = stated["output"].split(T.RELEVANT, 1)[1].split(T.FULLY_SUPPORTED)[0]
        assert rule in _passage(stated) and rule not in _passage(unstated)
        assert not re.search(r"\{\w\}", _passage(stated))  # {n} and {k} filled in
        # the near miss keeps the document's other rules: a rule is there, not the asked one
        assert " only " in _passage(unstated) or ", and not otherwise" in _passage(unstated)
        (start, end), = unstated["no_loss_spans"]
        assert unstated["output"][start:end] == rule  # read after [Irrelevant], not trained


def test_rows_are_seeded_and_become_labelled_isrel_pairs():
    assert rule_rows(5, seed=1) == rule_rows(5, seed=1)
    assert rule_rows(5, seed=1) != rule_rows(5, seed=2)
    pairs = judge_pairs(rule_rows(10, seed=0))
    assert sorted(p["label"] for p in pairs) == [0] * 10 + [1] * 10
    for p in pairs:  # the document is about the tool the question asks about
        tool = p["title"].split()[0]
        assert tool in p["question"] and p["passage"].startswith(tool)


def _tools(rows: list[dict]) -> set[str]:
    return {r["output"].split("<paragraph>")[1].split()[0] for r in rows}


def test_invented_names_avoid_the_given_words():
    first = _tools(rule_rows(40, seed=0))
    again = _tools(rule_rows(40, seed=0, avoid=[" ".join(first)]))
    assert len(first) == 40 and not first & again
