"""The model reads each passage under its document's title and section path (``passage_heading``)."""

from __future__ import annotations

from langchain_core.documents import Document

from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.fakes import FakeReflectionLM
from langchain_selfrag.passage_reads import evidence_prompt
from langchain_selfrag.retrieval import passage_heading


def test_the_heading_is_the_title_then_the_section_path() -> None:
    assert passage_heading(Document("x", metadata={"title": "glom", "section": "glom > Changelog > 23.1.0"})) \
        == "glom > Changelog > 23.1.0"
    assert passage_heading(Document("x", metadata={"source": "docs/cli.md", "section": "Usage > Flags"})) \
        == "cli > Usage > Flags"
    assert passage_heading(Document("x", metadata={"source": "docs/cli.md"})) == "cli"
    assert passage_heading(Document("x", metadata={"section": " > Install"})) == "Install"
    assert passage_heading(Document("x")) == ""


def test_the_model_reads_the_passage_under_its_heading() -> None:
    doc = Document("Fixed the star behaviour.", metadata={"title": "glom", "section": "Changelog > 23.1.0",
                                                         "source": "glom-changelog.md"})
    lm = FakeReflectionLM()
    SelfRAGChain.from_retriever(lm, None, mode="always", k=1).invoke({"question": "What did 23.1.0 fix?",
                                                                        "passages": [doc]})
    (prompts, *_), = lm.calls_of("generate")
    assert "<paragraph>glom > Changelog > 23.1.0\nFixed the star behaviour.</paragraph>" in prompts[0]
    # a store's passages are read ahead as the graph reads them
    assert "<paragraph>glom > Changelog > 23.1.0\nFixed the star behaviour.</paragraph>" in evidence_prompt(doc)
