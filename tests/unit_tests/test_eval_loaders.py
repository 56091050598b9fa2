"""Evaluation loaders on small files written by the tests, and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langchain_selfrag.evaluation.common.errors import DatasetError
from langchain_selfrag.evaluation.qa.loaders import (
    detect_format,
    load_corpus,
    load_dataset,
    select_articles,
)


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


SQUAD = {
    "version": "v2.0",
    "data": [
        {
            "title": "Super_Bowl",
            "paragraphs": [
                {
                    "context": "Denver won Super Bowl 50.",
                    "qas": [
                        {
                            "id": "q1",
                            "question": "Who won?",
                            "is_impossible": False,
                            "answers": [{"text": "Denver", "answer_start": 0}, {"text": "Denver", "answer_start": 0}],
                        },
                        {
                            "id": "q2",
                            "question": "Who lost Super Bowl 70?",
                            "is_impossible": True,
                            "answers": [],
                            "plausible_answers": [{"text": "Denver", "answer_start": 0}],
                        },
                    ],
                },
                {"context": "It was played in 2016.", "qas": []},
            ],
        }
    ],
}


def test_squad_v2(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(SQUAD))
    assert detect_format(path) == "squad"
    ds = load_dataset(path)
    assert ds.format == "squad" and ds.has_unanswerable and not ds.closed_set
    assert [p.text for p in ds.corpus] == ["Denver won Super Bowl 50.", "It was played in 2016."]
    assert ds.corpus[0].title == "Super Bowl"
    q1, q2 = ds.examples
    assert (q1.id, q1.answers, q1.answerable, q1.gold_passage) == ("q1", ["Denver"], True, ds.corpus[0].id)
    assert (q2.answers, q2.answerable, q2.meta["plausible_answers"]) == ([], False, ["Denver"])


def test_select_held_out_articles(tmp_path):
    two = json.loads(json.dumps(SQUAD))
    two["data"].append(
        {
            "title": "Other_Topic",
            "paragraphs": [
                {"context": "Other text.", "qas": [{"id": "q3", "question": "Other?", "answers": [{"text": "x"}]}]}
            ],
        }
    )
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(two))
    ds = select_articles(load_dataset(path), ["Other_Topic"])
    assert [ex.id for ex in ds.examples] == ["q3"] and [p.text for p in ds.corpus] == ["Other text."]
    with pytest.raises(DatasetError, match="unknown article"):
        select_articles(load_dataset(path), ["Nope"])


def test_selfrag_jsonl_pools_ctxs(tmp_path):
    shared = {"title": "T", "text": "shared passage"}
    path = _jsonl(
        tmp_path / "hotpot.jsonl",
        [
            {"question": "a?", "answers": ["x"], "ctxs": [shared, {"title": "U", "text": "only a"}]},
            {"question": "b?", "answers": ["y", "z"], "ctxs": [shared]},
        ],
    )
    ds = load_dataset(path)
    assert ds.format == "selfrag-jsonl" and ds.has_given_passages
    assert [p.text for p in ds.corpus] == ["shared passage", "only a"]  # pooled without duplicates
    assert [p.text for p in ds.examples[0].passages] == ["shared passage", "only a"]
    assert ds.examples[1].answers == ["y", "z"]
    assert ds.examples[1].passages[0].id == ds.examples[0].passages[0].id


def test_popqa_with_popularity_filter(tmp_path):
    path = _jsonl(
        tmp_path / "popqa.jsonl",
        [
            {"id": 1, "question": "Who is A?", "answers": ["a"], "prop": "occupation", "s_wiki_title": "A", "pop": 50},
            {"id": 2, "question": "Who is B?", "possible_answers": '["b", "bee"]', "prop": "x", "pop": 5000},
        ],
    )
    assert detect_format(path) == "popqa"
    assert [ex.answers for ex in load_dataset(path).examples] == [["a"], ["b", "bee"]]
    longtail = load_dataset(path, max_popularity=100)
    assert [ex.id for ex in longtail.examples] == ["1"]


def test_arc_options(tmp_path):
    row = {
        "id": "m1",
        "question": "Which is a planet?",
        "answer": "B",
        "options": [{"label": "A", "text": "Moon"}, {"label": "B", "text": "Mars"}],
    }
    ds = load_dataset(_jsonl(tmp_path / "arc.jsonl", [row]))
    ex = ds.examples[0]
    assert ds.format == "arc" and ds.closed_set
    assert ex.options == {"A": "Moon", "B": "Mars"} and ex.label == "B"
    assert ex.instruction.startswith("Given four answer candidates")


def test_arc_answer_must_be_an_option(tmp_path):
    row = {"question": "q?", "answer": "E", "options": [{"label": "A", "text": "x"}]}
    with pytest.raises(DatasetError, match=r"arc.jsonl:1: answer 'E' is not one of"):
        load_dataset(_jsonl(tmp_path / "arc.jsonl", [row]))


def test_selfaware(tmp_path):
    path = tmp_path / "selfaware.json"
    path.write_text(
        json.dumps(
            {
                "example": [
                    {"question_id": 1, "question": "Capital of France?", "answer": ["Paris"], "answerable": True},
                    {"question_id": 2, "question": "What is the meaning of life?", "answer": None, "answerable": False},
                ]
            }
        )
    )
    ds = load_dataset(path)
    assert ds.format == "selfaware" and ds.has_unanswerable
    assert [(e.id, e.answers, e.answerable) for e in ds.examples] == [("1", ["Paris"], True), ("2", [], False)]


def test_plain_jsonl_and_explicit_format(tmp_path):
    path = _jsonl(
        tmp_path / "qa.jsonl", [{"question": "2+2?", "answers": ["4"]}, {"question": "Sky?", "answer": "blue"}]
    )
    ds = load_dataset(path, "jsonl")
    assert [(e.id, e.answers) for e in ds.examples] == [("0", ["4"]), ("1", ["blue"])]


def test_malformed_jsonl_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "ok?", "answers": ["a"]}\n\n{"question": "broken", "answers": [}\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl:3: invalid JSON"):
        load_dataset(path, "jsonl")


def test_missing_field_names_the_line(tmp_path):
    path = _jsonl(tmp_path / "qa.jsonl", [{"question": "a?", "answers": ["a"]}, {"answers": ["b"]}])
    with pytest.raises(DatasetError, match=r"qa.jsonl:2: missing field 'question'"):
        load_dataset(path, "jsonl")
    path = _jsonl(tmp_path / "ctx.jsonl", [{"question": "a?", "answers": ["a"], "ctxs": [{"title": "no text"}]}])
    with pytest.raises(DatasetError, match=r"ctx.jsonl:1: ctxs\[0\] must be an object with a 'text'"):
        load_dataset(path)


def test_malformed_json_names_the_line(tmp_path):
    path = tmp_path / "squad.json"
    path.write_text('{"data": [\n  {"title": "x",\n   "paragraphs": [}\n]}')
    with pytest.raises(DatasetError, match=r"squad.json:3: invalid JSON"):
        load_dataset(path, "squad")
    path.write_text(json.dumps({"data": [{"title": "x", "paragraphs": [{"qas": []}]}]}))
    with pytest.raises(DatasetError, match=r"data\[0\]\.paragraphs\[0\]: missing field 'context'"):
        load_dataset(path)


def test_unknown_format_and_missing_file(tmp_path):
    path = _jsonl(tmp_path / "odd.jsonl", [{"prompt": "x"}])
    with pytest.raises(DatasetError, match="cannot tell the format"):
        load_dataset(path)
    with pytest.raises(DatasetError, match="data file not found"):
        load_dataset(tmp_path / "nope.json")
    with pytest.raises(DatasetError, match="unknown format"):
        load_dataset(path, "csv")
    with pytest.raises(DatasetError, match="only apply to PopQA"):
        load_dataset(_jsonl(tmp_path / "qa.jsonl", [{"question": "a", "answers": ["b"]}]), max_popularity=3)


def test_load_corpus(tmp_path):
    path = _jsonl(tmp_path / "passages.jsonl", [{"title": "A", "text": "alpha"}, {"text": "beta"}])
    assert [(p.title, p.text) for p in load_corpus(path)] == [("A", "alpha"), ("", "beta")]
    squad = tmp_path / "squad.json"
    squad.write_text(json.dumps(SQUAD))
    assert len(load_corpus(squad)) == 2


def test_duplicate_ids_are_made_unique(tmp_path):
    path = _jsonl(
        tmp_path / "qa.jsonl",
        [{"id": 1, "question": "a", "answers": ["x"]}, {"id": 1, "question": "b", "answers": ["y"]}],
    )
    ids = [ex.id for ex in load_dataset(path).examples]
    assert len(set(ids)) == 2
