"""``selfrag calibrate``: questions from documents, the bars chosen offline, the calibration written and read."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_selfrag.abstention import AbstentionCalibration, sidecar_path
from langchain_selfrag.calibrate import LabelledQuestion, calibration, choose, collect, load_questions
from langchain_selfrag.calibrate.questions import (
    OFF_TOPIC,
    gap_questions,
    prose_questions,
    questions_from_documents,
    stated_questions,
)
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.config import SelfRAGConfig
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from keyword_embeddings import KeywordEmbeddings

README = """fastcsv is a library for reading CSV files quickly.

Install it with:

pip install fastcsv

fastcsv supports Python 3.9 and newer. It is released under the MIT License.

The delimiter option (default: ",") sets the field separator.
"""


def test_stated_questions_have_their_answer_in_the_passage() -> None:
    pairs = stated_questions("fastcsv", README, random.Random(0))
    answers = {a for _, a in pairs}
    assert {"pip install fastcsv", "3.9", "MIT"} <= answers
    assert all(a.lower() in README.lower() for a in answers)
    assert any(q.startswith("What") and "fastcsv" in q for q, _ in pairs)


def test_gap_questions_ask_only_what_the_document_does_not_state() -> None:
    gaps = gap_questions("fastcsv", README, random.Random(0), limit=14)
    assert gaps and not any("license" in g.lower() or "python version" in g.lower() for g in gaps)
    prose = prose_questions("The Orrin Dam was completed in 1961 by Ada Lowe and holds 40 megalitres.", random.Random(0))
    assert prose and all(a in ("1961", "Ada Lowe", "40") for _, a in prose)


def test_questions_from_documents_label_three_kinds() -> None:
    qs = questions_from_documents({"fastcsv.md": [README]}, random.Random(0), off_topic=5)
    kinds = {q.kind for q in qs}
    assert kinds == {"answerable", "near_miss", "off_topic"}
    assert all(q.source == "fastcsv.md" for q in qs if q.kind != "off_topic")
    assert sum(q.kind == "off_topic" for q in qs) == 5 and all(q.question in OFF_TOPIC for q in qs if q.kind == "off_topic")


def test_load_questions_infers_kinds_and_rejects_bad_rows() -> None:
    rows = [{"question": "Q1?", "answers": ["a"]}, {"question": "Q2?", "source": "d.md"}, {"question": "Q3?"}]
    assert [q.kind for q in load_questions(rows)] == ["answerable", "near_miss", "off_topic"]
    with pytest.raises(ValueError, match="row 1"):
        load_questions([{"answers": ["a"]}])
    with pytest.raises(ValueError, match="needs answers"):
        load_questions([{"question": "Q?", "kind": "answerable"}])


def _chain() -> SelfRAGChain:
    """Relevant and supported on the CSV document, irrelevant elsewhere (IsRel 0.3)."""
    lm = FakeReflectionLM(retrieve=0.9, passages={"fastcsv": FakeSegment("pip install fastcsv", isrel=0.9)},
                          default=FakeSegment("Paris", isrel=0.3, issup="partial"))
    docs = [Document(README, metadata={"source": "fastcsv.md"}),
            Document("The Orrin Dam holds back the river Tesk.", metadata={"source": "dam.md"}),
            Document("France is a country of western Europe.", metadata={"source": "france.md"})]
    store = InMemoryVectorStore.from_documents(docs, KeywordEmbeddings())
    return SelfRAGChain(lm, store, SelfRAGConfig.paper(k=1))


def test_calibration_picks_bars_between_relevant_and_irrelevant_and_round_trips(tmp_path: Path) -> None:
    qs = [LabelledQuestion("How do you install fastcsv?", "answerable", ("pip install fastcsv",), "fastcsv.md"),
          LabelledQuestion("Who built the Orrin Dam?", "near_miss", (), "dam.md"),
          LabelledQuestion("What is the capital of France?", "off_topic")]
    records = collect(_chain(), qs, progress=False)
    assert [r["right"] for r in records] == [True, False, False]
    row, rows = choose(records)
    assert 0.3 < row["abstain_isrel"] <= 0.9
    cal = calibration(records, "fake.gguf")
    assert cal.expected["handled"] == {"answerable": 1.0, "near_miss": 1.0, "off_topic": 1.0}
    assert cal.expected["bars_off"]["handled"]["near_miss"] == 0.0
    path = cal.save(sidecar_path(tmp_path / "fake.gguf"))
    assert AbstentionCalibration.load(path) == cal
    assert json.loads(path.read_text())["schema"].startswith("langchain-selfrag/abstention-calibration")
