"""A backend's approximate reflection probabilities reach the chain output and ``selfrag ask``.

(The same through a real llama.cpp server whose probabilities come from top-k log-probs:
``tests/test_lm_remote.py``.)
"""

from __future__ import annotations

import json

import pytest
from langchain_core.documents import Document

import langchain_selfrag.graph.context as context
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.cli import format_result, main, result_to_json
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from langchain_selfrag.lm.protocol import approximation
from langchain_selfrag.lm.scheduler import BatchScheduler

PARIS = Document("Paris is the capital of France.", metadata={"source": "france.md", "title": "France"})
WHY = "read from the top-5 log-probs; ids outside them count as 0"


def fake_lm() -> FakeReflectionLM:
    return FakeReflectionLM(retrieve=0.9, passages={"Paris": FakeSegment("Paris.", isrel=0.95)})


def approximate_lm() -> FakeReflectionLM:
    """A fake whose backend found out, while it answered, that its probabilities were approximate."""
    lm = fake_lm()
    scripted = lm.candidate_probs

    def candidate_probs(prompts, candidates):
        lm.approximate, lm.approximate_reason = True, WHY
        return scripted(prompts, candidates)

    lm.candidate_probs = candidate_probs
    return lm


def test_approximation_reads_the_model_through_its_scheduler() -> None:
    lm = fake_lm()
    assert approximation(lm) is None and approximation(BatchScheduler(lm)) is None
    lm.approximate, lm.approximate_reason = True, WHY
    assert approximation(lm) == WHY and approximation(BatchScheduler(lm)) == WHY
    lm.approximate_reason = None
    assert approximation(lm) == "the backend does not say why"
    lm.approximate = "yes"  # only True counts: a mock's truthy attribute is no claim
    assert approximation(lm) is None


def test_chain_output_says_whether_probabilities_are_approximate() -> None:
    exact = SelfRAGChain.from_retriever(fake_lm(), lambda q: [PARIS]).invoke("What is the capital of France?")
    assert exact["approximate"] is False and exact["approximate_reason"] is None
    assert all(entry["approximate"] is None for entry in exact["trace"])
    # read after the run: the backend became approximate during this very question
    out = SelfRAGChain.from_retriever(approximate_lm(), lambda q: [PARIS]).invoke("What is the capital of France?")
    assert out["approximate"] is True and out["approximate_reason"] == WHY
    assert out["trace"] and all(entry["approximate"] == WHY for entry in out["trace"])  # each critique says so
    streamed: dict = {}
    for chunk in SelfRAGChain.from_retriever(approximate_lm(), lambda q: [PARIS]).stream("Capital of France?"):
        streamed.update({k: v for k, v in chunk.items() if k != "answer"})
    assert streamed["approximate"] is True and streamed["approximate_reason"] == WHY


def test_selfrag_ask_reports_it_in_json_and_on_the_terminal(monkeypatch, capsys) -> None:
    question = "What is the capital of France?"
    flags = ["--model", "fake", "--mode", "never"]  # no store needed
    monkeypatch.setattr(context, "default_lm", lambda model: _already_approximate())
    assert main(["ask", question, *flags, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["approximate"] is True and data["approximate_reason"] == WHY
    assert main(["ask", question, *flags]) == 0
    assert f"reflection probabilities are approximate: {WHY}" in capsys.readouterr().out
    monkeypatch.setattr(context, "default_lm", lambda model: fake_lm())
    assert main(["ask", question, *flags, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["approximate"] is False and data["approximate_reason"] is None


def _already_approximate() -> FakeReflectionLM:
    lm = fake_lm()
    lm.approximate, lm.approximate_reason = True, WHY
    return lm


@pytest.mark.parametrize("flag", [True, False])
def test_result_to_json_and_format_result(flag: bool) -> None:
    out = SelfRAGChain.from_retriever(_already_approximate() if flag else fake_lm(),
                                      lambda q: [PARIS]).invoke("What is the capital of France?")
    data = result_to_json(out)
    assert data["approximate"] is flag and data["approximate_reason"] == (WHY if flag else None)
    json.dumps(data)
    assert ("approximate:" in format_result(out)) is flag
