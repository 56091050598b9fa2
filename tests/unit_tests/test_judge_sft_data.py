"""training.judge_sft's data: pairs from either file kind, records asked as the model is asked, the report."""

from __future__ import annotations

import json
from dataclasses import replace
from types import MappingProxyType

import numpy as np
import pytest

from langchain_selfrag import tokens as T
from langchain_selfrag.lm import ChatReflectionLM
from langchain_selfrag.prompts import format_prompt
from langchain_selfrag.questions import ReflectionQuestions
from training.core.config import TrainingError
from training.judge_sft import contrast_report, judge_records, read_pairs

SELFRAG_ROWS = [
    {"instruction": "What is the capital of Freedonia?", "variant": "doc_relevant",
     "output": "[Retrieval]<paragraph>Freedonia\nThe capital of Freedonia is Zubrowka.</paragraph>[Relevant]"
               "Zubrowka.[Fully supported][Utility:5]"},
    {"instruction": "What is the capital of Sylvania?", "variant": "doc_near_miss",
     "output": "[Retrieval]<paragraph>Freedonia\nThe capital of Freedonia is Zubrowka.</paragraph>[Irrelevant]"
               "I cannot tell.[Utility:1]"},
    {"instruction": "Write a poem.", "output": "[No Retrieval]Roses are red.[Utility:4]"},
]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_selfrag_training_file_gives_its_isrel_labels(tmp_path):
    pairs = read_pairs(write(tmp_path / "train.jsonl", SELFRAG_ROWS))
    assert sorted((p["question"], p["label"], p["variant"]) for p in pairs) == [
        ("What is the capital of Freedonia?", 1, "doc_relevant"), ("What is the capital of Sylvania?", 0, "doc_near_miss")]
    assert {p["title"] for p in pairs} == {"Freedonia"}
    assert {p["passage"] for p in pairs} == {"The capital of Freedonia is Zubrowka."}


def test_a_pairs_file_is_read_as_it_is_and_a_bad_row_is_named(tmp_path):
    rows = [{"question": "Q1?", "title": "T", "passage": "P1.", "label": 1},
            {"question": "Q2?", "passage": "P2.", "label": 0, "variant": "squad_unanswerable"}]
    assert read_pairs(write(tmp_path / "pairs.jsonl", rows)) == [
        {"question": "Q1?", "title": "T", "passage": "P1.", "label": 1, "variant": "pair"},
        {"question": "Q2?", "title": "", "passage": "P2.", "label": 0, "variant": "squad_unanswerable"}]
    with pytest.raises(TrainingError, match="row 2 is neither a Self-RAG record"):
        read_pairs(write(tmp_path / "bad.jsonl", [rows[0], {"question": "Q?", "passage": "P.", "label": "yes"}]))
    with pytest.raises(TrainingError, match="no IsRel label"):
        read_pairs(write(tmp_path / "none.jsonl", SELFRAG_ROWS[2:]))
    with pytest.raises(TrainingError, match="no rows"):
        read_pairs(write(tmp_path / "empty.jsonl", []))


def test_a_record_is_asked_exactly_as_a_chat_model_is_asked_and_answered_in_its_words(tmp_path):
    defaults = ReflectionQuestions()
    questions = replace(defaults, answer_words=MappingProxyType(
        {**defaults.answer_words, T.Kind.ISREL: MappingProxyType({"Sure": T.RELEVANT, "Nope": T.IRRELEVANT})}))
    pair = {"question": "What is X?", "title": "Doc", "passage": "X is 3.<|im_end|>", "label": 0}
    [record] = judge_records([pair], questions)
    asked = []

    class Recorder:
        def candidate_probs(self, prompts, words):
            asked.extend(prompts)
            return [{w: 0.5 for w in words} for _ in prompts]

        def generate(self, prompts, **_):
            raise AssertionError("not asked to write here")

    prompt = format_prompt("What is X?") + T.RETRIEVAL + "<paragraph>Doc\nX is 3.<|im_end|></paragraph>"
    ChatReflectionLM(Recorder(), questions=questions).candidate_probs([prompt], [T.RELEVANT, T.IRRELEVANT])
    assert record["prompt"] == asked[0] and record["output"] == "Nope"
    assert judge_records([pair | {"label": 1}], questions)[0]["output"] == "Sure"


def test_the_report_gives_each_contrast_the_pairs_hold_both_sides_of():
    pairs = [{"label": 1, "variant": "squad_pair_relevant"}, {"label": 0, "variant": "squad_unanswerable_more"},
             {"label": 1, "variant": "doc_relevant"}, {"label": 0, "variant": "off_topic"}]
    scores = {"untrained": np.array([0.9, 0.95, 0.8, 0.1]), "trained": np.array([0.9, 0.2, 0.8, 0.1])}
    report = contrast_report(pairs, scores)
    assert report["pairs"] == 4
    assert report["squad_unanswerable"] == {"pairs": 2, "untrained": 0.0, "trained": 1.0}
    assert report["all"] == {"untrained": 0.5, "trained": 1.0}  # 0.9 and 0.8 each above 0.1 only
    assert "doc_near_miss" not in report  # no near miss among the pairs


def test_squad_judge_pairs_take_each_question_on_its_own_paragraph(tmp_path):
    from cookbook.data.squad_judge_pairs import squad_judge_pairs
    from langchain_selfrag.evaluation.common.errors import DatasetError
    from langchain_selfrag.evaluation.qa.loaders import load_dataset

    squad = {"data": [{"title": "Old_Town", "paragraphs": [{"context": "The bridge was built in 1410.", "qas": [
        {"id": "a", "question": "When was the bridge built?", "is_impossible": False},
        {"id": "b", "question": "When was the bridge demolished?", "is_impossible": True},
        {"id": "c", "question": "Who built the bridge in 1410?", "is_impossible": True}]}]},
        {"title": "Other", "paragraphs": [{"context": "x", "qas": [{"id": "d", "question": "q", "is_impossible": False}]}]}]}
    (tmp_path / "squad.json").write_text(json.dumps(squad))
    squad = load_dataset(tmp_path / "squad.json", "squad")
    pairs = squad_judge_pairs(squad, ["Old_Town"], per_label=1, seed=0)
    assert sorted((p["id"], p["label"], p["variant"]) for p in pairs)[0] == ("a", 1, "squad_pair_relevant")
    assert [p["label"] for p in pairs].count(0) == 1 and {p["title"] for p in pairs} == {"Old Town"}
    assert all(p["passage"] == "The bridge was built in 1410." for p in pairs)
    with pytest.raises(DatasetError, match="unknown article\\(s\\): Nowhere"):
        squad_judge_pairs(squad, ["Nowhere"], per_label=1)
