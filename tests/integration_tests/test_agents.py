"""SelfRAGMiddleware and SelfRAGChain.as_tool on real models inside create_agent agents, over a tiny corpus in a
LangChain vector store: ``selfrag-smollm2-135m`` (``bundled_gguf``) for the outcomes, the default model
(``selfrag-qwen2.5-coder-1.5b``, marked slow) for the two that matter most. A scripted tool-calling model is
the agent's model (it calls the search tool once, then gives the answer under test); the reflection is real."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from keyword_embeddings import KeywordEmbeddings
from langchain.agents import create_agent
from langchain_core.documents import Document
from langchain_core.messages import ToolMessage
from langchain_core.tools import create_retriever_tool
from langchain_core.vectorstores import InMemoryVectorStore
from scripted_agent import calls_then_answers

from langchain_selfrag.agents import SelfRAGMiddleware
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.graph.nodes.abstain import ABSTAIN_ANSWER
from langchain_selfrag.lm import load_reflection_lm

# The tower's chunk holds a blank line: graded whole, it is one passage.
EIFFEL = Document("The Eiffel Tower in Paris was completed in 1889 for the World's Fair.\n\nIt is 330 metres tall.",
                  metadata={"source": "eiffel.md"})
BANANAS = Document("Bananas are rich in potassium and grow in tropical climates.", metadata={"source": "bananas.md"})
CURIE = Document("Marie Curie won the Nobel Prize in Physics in 1903 and in Chemistry in 1911.",
                 metadata={"source": "curie.md"})
QUESTION = "When was the Eiffel Tower completed?"
SUPPORTED = "The Eiffel Tower was completed in 1889."
INVENTED = "Gustave Dupont built it in Lyon in 1925."
#: The small model's bars here. Its calibration (IsRel 0.95, IsSup 0.1) leans on IsRel, and its IsSup of the
#: invented answer against the tower's passage is about 0.15 (the supported one's about 0.97): at 0.5 each
#: outcome stands 0.3 or more from its bar, which a CPU's or a batch's rounding cannot cross.
BARS = {"abstain_isrel": 0.5, "abstain_issup": 0.5}


@pytest.fixture(scope="module")
def small_lm(bundled_gguf) -> Any:
    lm = load_reflection_lm(bundled_gguf)
    yield lm
    lm.close()


@pytest.fixture(scope="module")
def store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(KeywordEmbeddings())
    store.add_documents([EIFFEL, BANANAS, CURIE])
    return store


@pytest.fixture(scope="module")
def search(store) -> Any:
    return create_retriever_tool(store.as_retriever(search_kwargs={"k": 2}), "search", "Search the encyclopedia.")


def ask(lm: Any, search: Any, answer: str, question: str = QUESTION, **settings: Any) -> list[Any]:
    """The messages of an agent run whose model searches for ``question`` once, then answers ``answer``
    (the small model's :data:`BARS` unless ``settings`` say otherwise)."""
    agent = create_agent(calls_then_answers("search", {"query": question}, answer), tools=[search],
                         middleware=[SelfRAGMiddleware(lm, **{**BARS, **settings})])
    return agent.invoke({"messages": [("human", question)]})["messages"]


def texts(docs: list[Document]) -> list[str]:
    return [d.page_content for d in docs]


def found(messages: list[Any]) -> ToolMessage:
    return next(m for m in messages if isinstance(m, ToolMessage))


def test_the_relevant_passage_is_kept_whole_and_the_irrelevant_dropped(small_lm, search):
    result = found(ask(small_lm, search, SUPPORTED))
    meta = result.response_metadata["selfrag"]
    assert meta["sources"] == ["eiffel.md", "curie.md"]  # what the store returned, in its order
    assert texts(result.artifact) == [EIFFEL.page_content] and result.content == EIFFEL.page_content
    assert meta["isrel"][0] >= meta["bar"] + 0.3 and meta["isrel"][1] <= meta["bar"] - 0.3


def test_a_supported_answer_is_kept_with_its_citation(small_lm, search):
    final = ask(small_lm, search, SUPPORTED)[-1]
    meta = final.response_metadata["selfrag"]
    assert final.content == SUPPORTED
    assert meta["supported"] and texts(meta["citations"]) == [EIFFEL.page_content]
    assert meta["issup"] >= meta["bar"] + 0.2


def test_an_answer_the_passages_do_not_support_becomes_the_abstention(small_lm, search):
    final = ask(small_lm, search, INVENTED)[-1]
    meta = final.response_metadata["selfrag"]
    assert final.content.startswith(ABSTAIN_ANSWER) and "not supported by the passages kept" in final.content
    assert meta["answer"] == INVENTED and meta["issup"] <= meta["bar"] - 0.2


def test_async_streams_the_same_verdict(small_lm, search):
    async def streamed() -> list[dict[str, Any]]:
        agent = create_agent(calls_then_answers("search", {"query": QUESTION}, INVENTED), tools=[search],
                             middleware=[SelfRAGMiddleware(small_lm, **BARS)])
        return [e async for e in agent.astream({"messages": [("human", QUESTION)]}, stream_mode="custom")]

    events = asyncio.run(streamed())
    assert [e["kept"] for e in events if e.get("aspect") == "isrel"] == [True, False]
    verdict, = [e for e in events if e["event"] == "verdict"]
    assert verdict["abstained"] and not verdict["supported"]


def test_the_chain_as_a_tool_of_an_agent(small_lm, store):
    chain = SelfRAGChain.from_retriever(small_lm, store, k=2, mode="always", **BARS)
    ask_docs = chain.as_tool(name="ask_docs", description="Answer from the encyclopedia.")
    agent = create_agent(calls_then_answers("ask_docs", {"question": QUESTION}, "See the tool."), tools=[ask_docs])
    result = found(agent.invoke({"messages": [("human", QUESTION)]})["messages"])
    out = result.artifact
    assert not out["abstained"] and "1889" in out["answer"] and texts(out["citations"]) == [EIFFEL.page_content]
    assert result.content == f"{out['answer']}\n\nSources:\n[1] eiffel.md"


@pytest.mark.slow
def test_the_default_model_keeps_a_supported_answer_and_abstains_where_nothing_relevant_is_found(search):
    """At its own calibrated bars (IsRel 0.85; its IsSup bar is 0, off: its IsSup does not tell an invented
    answer from a supported one over a relevant passage, so the passages' relevance decides)."""
    from langchain_selfrag.bundled import default_model_path

    lm = load_reflection_lm(default_model_path(progress=False))
    own_bars = {"abstain_isrel": None, "abstain_issup": None}
    try:
        kept = ask(lm, search, SUPPORTED, **own_bars)
        elsewhere = ask(lm, search, "Jorn Utzon designed it.", "Who designed the Sydney Opera House?", **own_bars)
    finally:
        lm.close()
    assert texts(found(kept).artifact) == [EIFFEL.page_content]
    assert kept[-1].content == SUPPORTED
    assert texts(kept[-1].response_metadata["selfrag"]["citations"]) == [EIFFEL.page_content]
    assert found(elsewhere).artifact == [] and found(elsewhere).content.startswith("Nothing relevant was found")
    assert elsewhere[-1].content.startswith(ABSTAIN_ANSWER) and "no retrieved passage" in elsewhere[-1].content
