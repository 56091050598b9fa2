"""documents_qa: questions over a folder of documents, each with its passages, in the Self-RAG QA format
that the data builders read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cookbook.own_data import documents_qa
from training.core.text import contains_answer
from training.selfrag.qa_data import load_selfrag_qa

SAMPLE = Path(documents_qa.__file__).parent / "sample"


def test_generated_and_given_questions_each_hold_their_evidence(tmp_path):
    for extra in ([], ["--questions", str(SAMPLE / "questions.jsonl")]):
        out = tmp_path / "qa.jsonl"
        assert documents_qa.main([str(SAMPLE / "docs"), "--out", str(out), "--k", "3", *extra]) == 0
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert rows and all(len(r["ctxs"]) <= 3 for r in rows)
        assert all(any(contains_answer(c["text"], r["answers"]) for c in r["ctxs"]) for r in rows)
        items = load_selfrag_qa(out)  # the builders' reader takes it, each question with a gold passage
        assert all(i.gold for i in items)
    given = [json.loads(line)["question"] for line in (SAMPLE / "questions.jsonl").read_text().splitlines()]
    assert [r["question"] for r in rows] == given


def test_a_folder_without_text_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(SystemExit) as exc:
        documents_qa.main([str(tmp_path / "docs"), "--out", str(tmp_path / "qa.jsonl")])
    assert exc.value.code == 2
    assert "no readable text" in capsys.readouterr().err
