"""SelfRAGMiddleware in create_agent, and SelfRAGChain.as_tool, with a scripted reflection model and a scripted
tool-calling chat model: passages dropped and kept, the answer kept with its citations or replaced by the
abstention, flag-only mode, the bound on retrieval rounds, errors passed through, bad settings, async, streaming."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.tools.tool_node import ToolCallRequest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.prompts import PromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import create_retriever_tool, tool
from langgraph.checkpoint.memory import InMemorySaver
from scripted_agent import ScriptedModel, tool_call

from langchain_selfrag import load_reflection_lm
from langchain_selfrag import tokens as T
from langchain_selfrag.abstention import AbstentionCalibration, sidecar_path
from langchain_selfrag.agents import SelfRAGMiddleware
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.config import ConfigError, SelfRAGConfig
from langchain_selfrag.fakes import FakeLogprobsChatModel, FakeReflectionLM, FakeSegment
from langchain_selfrag.graph.nodes.abstain import ABSTAIN_ANSWER

# A chunk that holds a blank line: a split of the tool's text on "\n\n" would make two passages of it.
PARIS = Document("Paris is the capital of France.\n\nIt lies on the Seine.", metadata={"source": "france.md"})
BANANA = Document("A banana is a yellow fruit.", metadata={"source": "fruit.md"})
LOUVRE = Document("The Louvre is a museum in Paris.", metadata={"source": "louvre.md"})
QUESTION = "What is the capital of France?"
ISSUP = T.GROUPS[T.Kind.ISSUP]


class SupportLM(FakeReflectionLM):
    """The fake reflection model, with IsSup scripted: an answer is fully supported by a passage that holds
    the word ``supports[key]`` of the passage's key, and not supported otherwise."""

    supports: dict[str, str] = {"Paris is the capital": "Paris"}

    def candidate_probs(self, prompts, candidates):
        if not set(candidates) <= set(ISSUP):
            return super().candidate_probs(prompts, candidates)
        self.calls.append(("candidate_probs", (list(prompts), list(candidates))))
        out = []
        for prompt in prompts:
            evidence, answer = self.evidence_of(prompt) or "", prompt.rsplit(T.RELEVANT, 1)[-1]
            ok = any(key in evidence and word in answer for key, word in self.supports.items())
            probs = {T.FULLY_SUPPORTED: 0.9 if ok else 0.05, T.PARTIALLY_SUPPORTED: 0.05,
                     T.NO_SUPPORT: 0.05 if ok else 0.9}
            out.append({c: probs[c] for c in candidates})
        return out


def reflection_lm() -> SupportLM:
    return SupportLM(passages={"Paris is the capital": FakeSegment(isrel=0.9), "banana": FakeSegment(isrel=0.1),
                               "Louvre": FakeSegment(isrel=0.8)},
                     default=FakeSegment(isrel=0.2))


class Listed(BaseRetriever):
    """A retriever that returns its documents and counts its calls."""

    docs: list[Document]
    calls: int = 0

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None) -> list[Document]:
        self.calls += 1
        return list(self.docs)


def search(query: str = "capital of France", name: str = "search", n: int = 1) -> AIMessage:
    return tool_call(name, {"query": query}, f"call-{name}-{n}")


def agent_with(replies: list[AIMessage], tools: list[Any], middleware: SelfRAGMiddleware, **kw: Any) -> Any:
    return create_agent(ScriptedModel(messages=iter(replies)), tools=tools, middleware=[middleware], **kw)


def retriever_tool(*docs: Document, **kw: Any) -> Any:
    return create_retriever_tool(Listed(docs=list(docs)), "search", "Search the documents.", **kw)


def run(agent: Any, question: str = QUESTION) -> list[Any]:
    return agent.invoke({"messages": [("human", question)]})["messages"]


# -- retrieval tools -----------------------------------------------------------------------------------------

def test_irrelevant_passages_are_dropped_and_the_text_rebuilt_from_the_documents_kept():
    tool_ = retriever_tool(BANANA, PARIS, document_prompt=PromptTemplate.from_template("[{source}] {page_content}"),
                           document_separator="\n---\n")
    messages = run(agent_with([search(), AIMessage("The capital of France is Paris.")], [tool_],
                              SelfRAGMiddleware(reflection_lm())))
    result = next(m for m in messages if isinstance(m, ToolMessage))
    assert result.content == "[france.md] Paris is the capital of France.\n\nIt lies on the Seine."
    assert result.artifact == [PARIS]  # the Documents themselves, the chunk with a blank line whole
    meta = result.response_metadata["selfrag"]
    assert meta["isrel"] == pytest.approx([0.1, 0.9]) and meta["kept"] == [1] and meta["bar"] == 0.5
    assert meta["query"] == "capital of France"


def test_nothing_kept_tells_the_agent_and_the_final_answer_abstains():
    messages = run(agent_with([search(), AIMessage("Bananas.")], [retriever_tool(BANANA)],
                              SelfRAGMiddleware(reflection_lm())))
    result = next(m for m in messages if isinstance(m, ToolMessage))
    assert result.content.startswith("Nothing relevant was found for 'capital of France'")
    assert "best IsRel 0.10" in result.content and result.artifact == []
    final = messages[-1]
    assert final.content.startswith(ABSTAIN_ANSWER) and "no retrieved passage was judged relevant" in final.content
    assert final.response_metadata["selfrag"]["abstained"] is True


def test_a_supported_answer_is_kept_with_the_passages_that_support_it_as_citations():
    messages = run(agent_with([search(), AIMessage("The capital of France is Paris.")],
                              [retriever_tool(PARIS, LOUVRE, BANANA)], SelfRAGMiddleware(reflection_lm())))
    final = messages[-1]
    meta = final.response_metadata["selfrag"]
    assert final.content == "The capital of France is Paris."
    assert meta["supported"] is True and meta["abstained"] is False and meta["reason"] is None
    assert meta["citations"] == [PARIS]  # the Louvre passage was kept (IsRel 0.8) but does not support it
    assert [p["source"] for p in meta["passages"]] == ["france.md", "louvre.md"]
    assert meta["issup"] == pytest.approx(0.925)


def test_an_unsupported_answer_is_replaced_by_the_abstention_with_its_reason():
    messages = run(agent_with([search(), AIMessage("The capital of France is Lyon.")], [retriever_tool(PARIS)],
                              SelfRAGMiddleware(reflection_lm())))
    final = messages[-1]
    meta = final.response_metadata["selfrag"]
    assert final.content == (f"{ABSTAIN_ANSWER} Reason: the answer is not supported by the passages kept "
                             "(best IsSup 0.08; the bar is IsSup >= 0.25).")
    assert meta["answer"] == "The capital of France is Lyon." and meta["citations"] == []
    assert not final.tool_calls


def test_flag_mode_keeps_the_unsupported_answer_and_marks_it():
    messages = run(agent_with([search(), AIMessage("The capital of France is Lyon.")], [retriever_tool(PARIS)],
                              SelfRAGMiddleware(reflection_lm(), on_unsupported="flag")))
    final = messages[-1]
    meta = final.response_metadata["selfrag"]
    assert final.content == "The capital of France is Lyon."
    assert meta["supported"] is False and meta["abstained"] is False and "not supported" in meta["reason"]


def test_the_bars_are_the_chain_s_settings():
    """A lower IsSup bar keeps the answer that the default bar refuses; an IsRel bar of 0.95 drops every passage."""
    kept = run(agent_with([search(), AIMessage("The capital of France is Lyon.")], [retriever_tool(PARIS)],
                          SelfRAGMiddleware(reflection_lm(), abstain_issup=0.05)))[-1]
    assert kept.content == "The capital of France is Lyon." and kept.response_metadata["selfrag"]["supported"]
    strict = SelfRAGMiddleware(reflection_lm(), SelfRAGConfig(abstain_isrel=0.95))
    messages = run(agent_with([search(), AIMessage("Paris.")], [retriever_tool(PARIS)], strict))
    assert next(m for m in messages if isinstance(m, ToolMessage)).artifact == []
    assert messages[-1].response_metadata["selfrag"]["abstained"]


def test_an_answer_that_says_nothing_abstains_even_where_the_support_bar_is_off():
    final = run(agent_with([search(), AIMessage(" ... ")], [retriever_tool(PARIS)],
                           SelfRAGMiddleware(reflection_lm(), abstain_issup=0.0)))[-1]
    assert final.content == f"{ABSTAIN_ANSWER} Reason: the agent's answer says nothing."


def test_an_answer_without_retrieval_abstains_as_the_chain_s_closed_book_answer():
    lm = reflection_lm()
    assert run(agent_with([AIMessage("Paris.")], [retriever_tool(PARIS)], SelfRAGMiddleware(lm)))[-1].content \
        .startswith(ABSTAIN_ANSWER)
    trusting = SelfRAGMiddleware(lm, abstain_closed_book=False)
    assert run(agent_with([AIMessage("Paris.")], [retriever_tool(PARIS)], trusting))[-1].content == "Paris."


def test_a_tool_that_returns_documents_and_a_tool_named_in_tools_are_graded_others_untouched():
    @tool
    def lookup(query: str) -> list[Document]:
        """Look the query up."""
        return [BANANA, PARIS]

    @tool
    def web(query: str) -> str:
        """Search the web."""
        return "A banana is yellow."

    @tool
    def clock() -> str:
        """The time."""
        return "noon"

    replies = [AIMessage("", tool_calls=[{"name": "lookup", "args": {"query": "capital"}, "id": "a"},
                                         {"name": "web", "args": {"query": "capital"}, "id": "b"},
                                         {"name": "clock", "args": {}, "id": "c"}]),
               AIMessage("Paris is the capital.")]
    messages = run(agent_with(replies, [lookup, web, clock], SelfRAGMiddleware(reflection_lm(), tools=["web"])))
    by_id = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    assert by_id["a"].content == PARIS.page_content and by_id["a"].artifact == [PARIS]
    assert by_id["b"].content.startswith("Nothing relevant was found") and by_id["b"].artifact == []
    assert by_id["c"].content == "noon" and "selfrag" not in by_id["c"].response_metadata
    assert messages[-1].response_metadata["selfrag"]["citations"] == [PARIS]


def test_a_retriever_tool_with_artifacts_is_graded_on_them():
    messages = run(agent_with([search(), AIMessage("Paris.")],
                              [retriever_tool(BANANA, PARIS, response_format="content_and_artifact")],
                              SelfRAGMiddleware(reflection_lm())))
    result = next(m for m in messages if isinstance(m, ToolMessage))
    assert result.artifact == [PARIS] and result.content == PARIS.page_content


def test_the_bound_on_retrieval_rounds_ends_the_run_with_the_abstention():
    retriever = Listed(docs=[BANANA])
    tool_ = create_retriever_tool(retriever, "search", "Search the documents.")
    replies = [search("capital", n=1), search("France capital", n=2), AIMessage("Paris.")]
    messages = run(agent_with(replies, [tool_], SelfRAGMiddleware(reflection_lm(), max_retrievals=1)))
    assert retriever.calls == 1
    final = messages[-1]
    assert final.content.startswith(ABSTAIN_ANSWER) and "max_retrievals=1" in final.content
    assert final.response_metadata["selfrag"]["abstained"] and not final.tool_calls
    # every call of the refused round is answered, so the history stays valid for the next turn
    refused = [m for m in messages if isinstance(m, ToolMessage) and m.status == "error"]
    assert [m.tool_call_id for m in refused] == ["call-search-2"]


def test_a_retrieval_tool_first_called_over_the_bound_is_refused_then_the_run_ends():
    first, second = Listed(docs=[BANANA]), Listed(docs=[PARIS])
    tools = [create_retriever_tool(first, "search", "Search."), create_retriever_tool(second, "lookup", "Look up.")]
    replies = [search(n=1), search(name="lookup", n=2), search(name="lookup", n=3), AIMessage("Paris.")]
    messages = run(agent_with(replies, tools, SelfRAGMiddleware(reflection_lm(), max_retrievals=1)))
    assert (first.calls, second.calls) == (1, 0)
    refused = next(m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == "call-lookup-2")
    assert refused.status == "error" and refused.content.startswith("Not searched: the retrieval limit")
    assert messages[-1].content.startswith(ABSTAIN_ANSWER) and "max_retrievals=1" in messages[-1].content


def test_each_run_starts_with_no_passage_kept():
    agent = agent_with([search(), AIMessage("Paris is the capital."), AIMessage("Paris, as I said.")],
                       [retriever_tool(PARIS)], SelfRAGMiddleware(reflection_lm()), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    first = agent.invoke({"messages": [("human", QUESTION)]}, config)["messages"][-1]
    second = agent.invoke({"messages": [("human", "Sure?")]}, config)["messages"][-1]
    assert first.response_metadata["selfrag"]["supported"]
    assert "without retrieving" in second.response_metadata["selfrag"]["reason"]


def _request(tool_: Any, call_id: str = "x") -> ToolCallRequest:
    call = {"name": tool_.name, "args": {"query": "capital"}, "id": call_id}
    return ToolCallRequest(tool_call=call, tool=tool_, state={"messages": [AIMessage("", tool_calls=[call])]},
                           runtime=None)


def test_a_tool_that_raises_or_answers_an_error_is_passed_through_unchanged():
    middleware = SelfRAGMiddleware(reflection_lm())
    boom = ConnectionError("index offline")

    def raises(request: Any) -> Any:
        raise boom

    with pytest.raises(ConnectionError) as caught:
        middleware.wrap_tool_call(_request(retriever_tool(PARIS)), raises)
    assert caught.value is boom
    error = ToolMessage("search failed", tool_call_id="x", name="search", status="error")
    assert middleware.wrap_tool_call(_request(retriever_tool(PARIS)), lambda request: error) is error

    @tool
    def broken(query: str) -> list[Document]:
        """Fails."""
        raise ConnectionError("index offline")

    agent = agent_with([search(name="broken"), AIMessage("?")], [broken], middleware)
    with pytest.raises(ConnectionError, match="index offline"):
        run(agent)


@pytest.mark.parametrize("kwargs, message", [
    ({"on_unsupported": "ignore"}, "on_unsupported must be"),
    ({"max_retrievals": 0}, "max_retrievals must be a positive integer"),
    ({"tools": "search"}, "tools must be a list"),
    ({"abstain_isrel": 2.0}, "abstain_isrel must lie in"),
    ({"isrel_bar": 0.5}, "unknown Self-RAG setting"),
    ({"config": {"k": 3}}, "config must be a SelfRAGConfig"),
])
def test_bad_settings_are_one_clear_error(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SelfRAGMiddleware(reflection_lm(), **kwargs)


def test_a_chat_model_with_log_probabilities_is_the_reflection_model(tmp_path):
    chat = FakeLogprobsChatModel(script=[
        (r"Answer: The capital of France is Paris(?s:.*)support the answer", "Yes",
         {"Yes": 0.9, "Partially": 0.05, "No": 0.05}),
        (r"Paris is the capital(?s:.*)state the answer", "Yes", {"Yes": 0.9, "No": 0.1})])
    lm = load_reflection_lm(chat, calibration_dir=tmp_path)
    middleware = SelfRAGMiddleware(lm, abstain_isrel=0.5, abstain_issup=0.5)
    kept = run(agent_with([search(), AIMessage("The capital of France is Paris.")], [retriever_tool(BANANA, PARIS)],
                          middleware))
    assert next(m for m in kept if isinstance(m, ToolMessage)).artifact == [PARIS]
    assert kept[-1].response_metadata["selfrag"]["citations"] == [PARIS]
    replaced = run(agent_with([search(), AIMessage("The capital of France is Lyon.")], [retriever_tool(PARIS)],
                              middleware))[-1]
    assert replaced.content.startswith(ABSTAIN_ANSWER) and "IsSup 0.20" in replaced.content


def test_the_bars_come_from_the_model_s_calibration_as_the_chain_s_do(tmp_path):
    lm = load_reflection_lm(FakeLogprobsChatModel(), calibration_dir=tmp_path)
    AbstentionCalibration(Path(lm.model_path).name, 0.7, 0.4).save(sidecar_path(lm.model_path))
    middleware = SelfRAGMiddleware(lm, tools=[retriever_tool(PARIS)])
    assert (middleware.isrel_bar, middleware.issup_bar) == (0.7, 0.4)
    chain_config = SelfRAGChain(lm).config
    assert (chain_config.abstain_isrel, chain_config.abstain_issup) == (0.7, 0.4)
    assert middleware.tool_names == {"search"}


@pytest.mark.parametrize("lm, message", [(None, "needs a reflection model"),
                                         (FakeLogprobsChatModel(), "load_reflection_lm")])
def test_a_model_that_is_no_reflection_model_is_one_clear_error(lm, message):
    with pytest.raises(ConfigError, match=message):
        SelfRAGMiddleware(lm)


# -- async and streaming -------------------------------------------------------------------------------------

def test_async_gives_the_same_outcome():
    async def both() -> list[Any]:
        outs = []
        for answer in ("The capital of France is Paris.", "The capital of France is Lyon."):
            agent = agent_with([search(), AIMessage(answer)], [retriever_tool(PARIS, BANANA)],
                               SelfRAGMiddleware(reflection_lm()))
            outs.append((await agent.ainvoke({"messages": [("human", QUESTION)]}))["messages"])
        return outs

    kept, replaced = asyncio.run(both())
    assert kept[-1].content == "The capital of France is Paris."
    assert kept[-1].response_metadata["selfrag"]["citations"] == [PARIS]
    assert next(m for m in kept if isinstance(m, ToolMessage)).artifact == [PARIS]
    assert replaced[-1].content.startswith(ABSTAIN_ANSWER)


def test_the_scores_stream_as_custom_events():
    agent = agent_with([search(), AIMessage("The capital of France is Paris.")], [retriever_tool(BANANA, PARIS)],
                       SelfRAGMiddleware(reflection_lm()))
    events = [e for e in agent.stream({"messages": [("human", QUESTION)]}, stream_mode="custom")]
    isrel = [(e["passage"], e["kept"]) for e in events if e.get("aspect") == "isrel"]
    assert isrel == [(0, False), (1, True)]
    assert [e["value"] for e in events if e.get("aspect") == "issup"] == [pytest.approx(0.925)]
    verdict, = [e for e in events if e["event"] == "verdict"]
    assert verdict["supported"] and verdict["source"] == "selfrag" and not verdict["abstained"]


# -- the chain as a tool ---------------------------------------------------------------------------------------

def chain() -> SelfRAGChain:
    lm = FakeReflectionLM(retrieve=0.9, passages={"Paris": FakeSegment("Paris.", isrel=0.95)},
                          default=FakeSegment("Bananas.", isrel=0.05, issup="none"))
    return SelfRAGChain(lm, Listed(docs=[PARIS]))


def test_as_tool_needs_only_a_name_and_a_description():
    ask = chain().as_tool(name="ask_docs", description="Answer from the documents.")
    assert ask.name == "ask_docs" and ask.description == "Answer from the documents."
    assert ask.args == {"question": {"description": "the question to answer from the documents, in full",
                                     "title": "Question", "type": "string"}}
    assert ask.invoke({"question": QUESTION}) == "Paris.\n\nSources:\n[1] france.md"
    message = ask.invoke({"name": "ask_docs", "args": {"question": QUESTION}, "id": "1", "type": "tool_call"})
    assert message.content == "Paris.\n\nSources:\n[1] france.md"
    assert message.artifact["answer"] == "Paris." and message.artifact["citations"] == [PARIS]


def test_as_tool_says_an_abstention_and_its_reason():
    lm = FakeReflectionLM(retrieve=0.9, default=FakeSegment("Bananas.", isrel=0.05, issup="none"))
    out = SelfRAGChain(lm, Listed(docs=[BANANA])).as_tool(name="ask").invoke(
        {"name": "ask", "args": {"question": QUESTION}, "id": "1", "type": "tool_call"})
    assert out.content == f"{ABSTAIN_ANSWER} Reason: {out.artifact['abstain_reason']}."
    assert out.artifact["abstained"] is True


def test_as_tool_with_arg_types_is_runnable_s_own():
    ask = chain().as_tool(name="ask", arg_types={"question": str})
    assert ask.invoke({"question": QUESTION})["answer"] == "Paris."


def test_as_tool_in_an_agent():
    ask = chain().as_tool(name="ask_docs", description="Answer from the documents.")
    replies = [AIMessage("", tool_calls=[{"name": "ask_docs", "args": {"question": QUESTION}, "id": "1"}]),
               AIMessage("Paris, says the tool.")]
    messages = create_agent(ScriptedModel(messages=iter(replies)), tools=[ask]).invoke(
        {"messages": [("human", QUESTION)]})["messages"]
    result = next(m for m in messages if isinstance(m, ToolMessage))
    assert result.content.startswith("Paris.") and result.artifact["citations"] == [PARIS]


def test_async_as_tool():
    ask = chain().as_tool(name="ask_docs")
    assert asyncio.run(ask.ainvoke({"question": QUESTION})).startswith("Paris.")
