"""The judge's training pairs: a training file's draw plus decision-rule documents, shuffled."""

from __future__ import annotations

import json

import pytest

from cookbook.data.decision_rules import rule_rows
from cookbook.data.judge_mix import judge_mix, main
from langchain_selfrag import tokens as T
from training.relevance_head import judge_pairs


def _train_rows(n: int) -> list[dict]:
    return [{"instruction": f"Question {i}?", "variant": "doc_relevant" if i % 2 else "doc_near_miss",
             "output": T.RETRIEVAL + f"<paragraph>Doc {i}\npassage {i}</paragraph>"
             + (T.RELEVANT if i % 2 else T.IRRELEVANT) + "answer"} for i in range(n)]


def test_the_mix_holds_the_draws_first_pairs_and_both_pairs_of_the_first_rule_documents():
    train, rules = _train_rows(30), rule_rows(10, seed=0)
    mixed = judge_mix(train, rules, limit=12, rules=4, seed=0)
    keys = {(p["question"], p["passage"]) for p in mixed}
    assert keys >= {(p["question"], p["passage"]) for p in judge_pairs(train)[:12]}
    rule_questions = list(dict.fromkeys(p["question"] for p in judge_pairs(rules)))
    taken = {p["question"] for p in mixed if p["variant"].startswith("rule_")}
    assert taken == set(rule_questions[:4])
    assert sorted(p["variant"] for p in mixed if p["variant"].startswith("rule_")) == ["rule_stated"] * 4 + ["rule_unstated"] * 4
    assert len(mixed) == 12 + 8 and mixed != judge_pairs(train)[:12] + mixed[12:]  # shuffled
    assert judge_mix(train, rules, limit=12, rules=4, seed=0) == mixed


def test_too_few_pairs_or_documents_is_a_clear_error(tmp_path, capsys):
    train, rules = tmp_path / "train.jsonl", tmp_path / "rules.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in _train_rows(6)))
    rules.write_text("".join(json.dumps(r) + "\n" for r in rule_rows(3, seed=0)))
    with pytest.raises(SystemExit):
        main(["--train-file", str(train), "--limit", "50", "--rules-file", str(rules), "--out", str(tmp_path / "o.jsonl")])
    assert "fewer than --limit 50" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--train-file", str(train), "--limit", "4", "--rules-file", str(rules), "--rules", "5",
              "--out", str(tmp_path / "o.jsonl")])
    assert "fewer than --rules 5" in capsys.readouterr().err
    assert main(["--train-file", str(train), "--limit", "4", "--rules-file", str(rules), "--rules", "2",
                 "--out", str(tmp_path / "o.jsonl")]) == 0
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 8


def test_a_relevant_pair_keeps_its_rows_supported_answer_and_no_other_pair_has_one():
    train = _train_rows(10) + [{"instruction": "Wrong?", "variant": "issup_negative",
                                "output": T.RETRIEVAL + "<paragraph>Doc w\nthe passage</paragraph>" + T.RELEVANT
                                + "a wrong answer" + T.NO_SUPPORT + T.UTILITY[0]}]
    for row in train[:10]:
        row["output"] += T.FULLY_SUPPORTED + T.UTILITY[4] if row["output"].count(T.RELEVANT) else ""
    mixed = judge_mix(train, rule_rows(2, seed=0), limit=11, rules=2)
    answered = {p["question"]: p["answer"] for p in mixed if "answer" in p}
    assert answered["Question 1?"] == "answer" and "Wrong?" not in answered  # not supported: not an answer
    assert all(p["label"] == 1 for p in mixed if "answer" in p)
    rules = [p for p in mixed if p["variant"] == "rule_stated"]
    assert rules and all(p["answer"] in p["passage"] for p in rules)  # the rule sentence itself
