"""write_top: IsRel of every retrieved passage read first, answers generated only for the most relevant."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from langchain_selfrag import tokens as T
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.config import ConfigError, SelfRAGConfig
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from langchain_selfrag.graph.nodes.generate import written_passages

DOCS = [Document("Lyon is a large French city.", metadata={"source": "lyon.md"}),
        Document("Paris is the capital of France.", metadata={"source": "france.md"}),
        Document("Marseille is a port.", metadata={"source": "marseille.md"})]


def fake() -> FakeReflectionLM:
    return FakeReflectionLM(retrieve=0.9, passages={
        "Paris": FakeSegment("Paris.", isrel=0.95), "Lyon": FakeSegment("Lyon.", isrel=0.6),
        "Marseille": FakeSegment("Marseille.", isrel=0.1)})


def run(write_top):
    lm = fake()
    chain = SelfRAGChain.from_retriever(lm, lambda q: DOCS, write_top=write_top, abstain_isrel=0.9)
    return lm, chain.invoke("What is the capital of France?")


def test_only_the_most_relevant_passage_is_answered_and_it_wins():
    lm, out = run(1)
    generated = [args[0] for name, args in lm.calls if name == "generate"]
    assert len(generated) == 1 and len(generated[0]) == 1 and "Paris" in generated[0][0]
    assert out["answer"] == "Paris." and [d.metadata["source"] for d in out["citations"]] == ["france.md"]
    _, every = run(None)
    assert out["answer"] == every["answer"] and out["citations"] == every["citations"]


def test_the_unanswered_passages_still_count_for_abstention():
    lm = FakeReflectionLM(retrieve=0.9, passages={"Paris": FakeSegment("Paris.", isrel=0.5),
                                                   "Lyon": FakeSegment("Lyon.", isrel=0.4),
                                                   "Marseille": FakeSegment("Marseille.", isrel=0.3)})
    chain = SelfRAGChain.from_retriever(lm, lambda q: DOCS, write_top=1, abstain_isrel=0.9)
    out = chain.invoke("What is the capital of France?")
    assert out["abstained"]


def test_written_passages_are_chosen_per_beam_by_relevance():
    isrel = [{T.RELEVANT: 0.2, T.IRRELEVANT: 0.8}, {T.RELEVANT: 0.9, T.IRRELEVANT: 0.1},
             {T.RELEVANT: 0.5, T.IRRELEVANT: 0.5}, {T.RELEVANT: 0.1, T.IRRELEVANT: 0.9}]
    assert written_passages(isrel, ["a", "a", "b", "b"], 1) == [1, 2]
    assert written_passages(isrel, ["a"] * 4, 2) == [1, 2]
    assert written_passages(isrel, ["a"] * 4, None) == [0, 1, 2, 3]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_write_top_must_be_a_positive_integer(bad):
    with pytest.raises(ConfigError, match="write_top"):
        SelfRAGConfig(write_top=bad)
