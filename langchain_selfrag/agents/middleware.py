"""``SelfRAGMiddleware``: Self-RAG's critique around a LangChain agent's retrieval tools and final answer.

>>> agent = create_agent(model, tools=[retriever_tool], middleware=[SelfRAGMiddleware(lm)])

* **Around each retrieval tool call** (``wrap_tool_call``): the Documents the tool returned, not its joined
  text, are graded one by one with IsRel for the call's query; those under the IsRel bar are dropped and the
  tool's text is rebuilt from those kept, as the tool writes it. When none is kept, the tool message says that
  nothing relevant was found and the best IsRel, so the agent can search again or stop. Retrieval tools:
  every ``create_retriever_tool`` tool, every tool that returns Documents, and those named in ``tools``
  (a named tool whose output is text has that text graded as one passage). A tool that raises, or answers
  with an error message, is passed through unchanged; other tools are not touched.
* **On the final answer** (``after_model``, a model message without tool calls): IsSup of the answer against
  each passage kept in this run; the best against the IsSup bar. Under it, the answer is replaced by the
  abstention with its reason (``on_unsupported="abstain"``), or kept and flagged (``"flag"``). A kept answer
  carries as citations the kept passages whose IsSup reaches the bar. An answer given without any retrieval
  is an abstention when ``abstain_closed_book`` is on, as in the chain.
* **A bound on retrieval rounds** (``max_retrievals``; default ``max_retrieval_rounds``): a model message that
  asks for one more retrieval round ends the run with the abstention.

The scores ride in ``response_metadata["selfrag"]`` of the tool messages and of the final message, and go out
as custom stream events (``stream_mode="custom"``): ``{"event": "critique", "aspect": "isrel" | "issup", ...}``,
``{"event": "retrieval", ...}``, ``{"event": "verdict", ...}``. The bars, their calibration for the model and
the settings are the chain's (:class:`~langchain_selfrag.config.SelfRAGConfig`,
:mod:`langchain_selfrag.abstention`): the IsRel bar is ``abstain_isrel`` (the model's own [Relevant] decision
when 0), the IsSup bar ``abstain_issup``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Literal

from langchain.agents.middleware.types import AgentMiddleware, hook_config
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command

from ..config import ConfigError, SelfRAGConfig
from ..graph.context import SelfRAGContext, with_model_bars
from ..graph.nodes.abstain import ABSTAIN_ANSWER, bar, relevance_bar
from ..lm.scheduler import scheduler_for
from ..chain_tool import source_of, with_reason
from .critique import Verdict, answer_support, nothing_relevant, passage_relevance, verdict
from .state import SelfRAGAgentState, passages_of, round_count, rounds_of
from .tools import (asking_message, documents_of, is_retriever_tool, message_text, query_of, question_of,
                    returns_documents, tool_text, with_documents)

OnUnsupported = Literal["abstain", "flag"]
#: Metadata key (``response_metadata``) and stream-event source of the middleware.
KEY = "selfrag"


def abstention(reason: str) -> str:
    """The text that replaces an answer: the chain's abstention and its reason."""
    return with_reason(ABSTAIN_ANSWER, reason)


class SelfRAGMiddleware(AgentMiddleware):
    """Self-RAG's critique for ``langchain.agents.create_agent`` (see the module docstring).

    ``lm``: a reflection model, as ``load_reflection_lm`` returns it (the bundled default, a Self-RAG
    checkpoint, a chat model with log-probabilities, which may be the agent's own model).
    ``config`` and ``settings``: the chain's knobs (``SelfRAGConfig`` and its field names); bars left at None
    come from the model's calibration. ``tools``: more retrieval tools, by name or as the tools themselves.
    ``on_unsupported``: ``"abstain"`` replaces an unsupported answer, ``"flag"`` only marks it.
    ``max_retrievals``: retrieval rounds a run may make (None: ``config.max_retrieval_rounds``).
    """

    state_schema = SelfRAGAgentState

    def __init__(self, lm: Any, config: SelfRAGConfig | None = None, *, tools: Sequence[str | BaseTool] = (),
                 on_unsupported: OnUnsupported = "abstain", max_retrievals: int | None = None,
                 **settings: Any) -> None:
        super().__init__()
        if isinstance(lm, BaseChatModel):
            raise ConfigError("SelfRAGMiddleware needs a reflection model: wrap the chat model with "
                              "load_reflection_lm(model) (it must return token log-probabilities)")
        if not callable(getattr(lm, "candidate_probs", None)):
            raise ConfigError(f"SelfRAGMiddleware needs a reflection model (langchain_selfrag.load_reflection_lm), "
                              f"not {type(lm).__name__}")
        if config is not None and not isinstance(config, SelfRAGConfig):
            raise ConfigError(f"config must be a SelfRAGConfig, not {type(config).__name__}")
        config = SelfRAGConfig.from_mapping({**(config or SelfRAGConfig()).to_dict(), **settings})
        if on_unsupported not in ("abstain", "flag"):
            raise ConfigError(f"on_unsupported must be 'abstain' or 'flag', not {on_unsupported!r}")
        if isinstance(tools, (str, BaseTool)) or not all(isinstance(t, (str, BaseTool)) for t in tools):
            raise ConfigError("tools must be a list of tool names or tools")
        limit = config.max_retrieval_rounds if max_retrievals is None else max_retrievals
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"max_retrievals must be a positive integer, not {max_retrievals!r}")
        self.config = with_model_bars(SelfRAGContext(lm=lm, config=config)).config  # the chain's bars for lm
        self.lm = scheduler_for(lm)
        self.tool_names = frozenset(t if isinstance(t, str) else t.name for t in tools)
        self.on_unsupported = on_unsupported
        self.max_retrievals = limit
        self.isrel_bar = relevance_bar(self.config)
        self.issup_bar = bar(self.config, "abstain_issup")

    # -- which calls are retrievals ----------------------------------------------------------------------
    def is_retrieval(self, tool: Any, name: str) -> bool:
        """A tool the middleware grades before it runs: named in ``tools``, a retriever tool, or one that
        returns Documents (any other tool's result is graded too when it turns out to hold Documents)."""
        return name in self.tool_names or (tool is not None and (is_retriever_tool(tool) or returns_documents(tool)))

    def _known(self, state: Any) -> set[str]:
        return set(self.tool_names) | {r["tool"] for r in rounds_of(state)}

    # -- per run -----------------------------------------------------------------------------------------
    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        """A run starts with no passages kept and no round made."""
        return {"selfrag_passages": None, "selfrag_rounds": None}

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        return self.before_agent(state, runtime)

    # -- around tool calls -------------------------------------------------------------------------------
    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Grade the Documents of a retrieval tool call and keep the relevant ones (module docstring)."""
        early, call = self._before_call(request)
        if early is not None:
            return early
        result = handler(call)
        docs = self._documents(request, result)
        if docs is None:
            return result
        query = query_of(request.tool_call, _messages(request.state))
        scores = passage_relevance(self.lm, query, docs, max_passage_tokens=self.config.max_passage_tokens)
        return self._graded(request, result, query, docs, scores)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        early, call = self._before_call(request)
        if early is not None:
            return early
        result = await handler(call)
        docs = self._documents(request, result)
        if docs is None:
            return result
        query = query_of(request.tool_call, _messages(request.state))
        scores = await asyncio.to_thread(passage_relevance, self.lm, query, docs,
                                         max_passage_tokens=self.config.max_passage_tokens)
        return self._graded(request, result, query, docs, scores)

    def _before_call(self, request: Any) -> tuple[Command | None, Any]:
        """``(answer, request)``: what answers the call at once (a retrieval over the bound: refused, and its tool
        remembered as a retrieval tool, so that asking again ends the run), or the request to run (a retrieval
        tool given its twin that returns Documents)."""
        name = request.tool_call["name"]
        if not self.is_retrieval(request.tool, name):
            return None, request
        state = request.state
        asking = asking_message(request.tool_call.get("id"), _messages(state))
        if round_count(state) >= self.max_retrievals and asking not in {r["message"] for r in rounds_of(state)}:
            refused = ToolMessage(f"Not searched: the retrieval limit (max_retrievals={self.max_retrievals}) is "
                                  "reached. Answer from the passages found, or say that the sources do not answer "
                                  "this.", tool_call_id=request.tool_call["id"], name=name, status="error")
            return Command(update={"messages": [refused], "selfrag_rounds": [
                {"message": asking, "tool": name, "query": None, "retrieved": 0, "kept": 0, "best_isrel": None}]}), \
                request
        if request.tool is None:
            return None, request
        twin = with_documents(request.tool)
        return None, request if twin is request.tool else replace(request, tool=twin)

    def _documents(self, request: Any, result: Any) -> list[Document] | None:
        """The Documents a tool's result holds (its artifact), a named tool's text as one passage, or None when
        the result is not one to grade (an error, a Command, a tool that returns no Documents)."""
        if not isinstance(result, ToolMessage) or result.status == "error":
            return None
        docs = documents_of(result.artifact)
        if docs is None and request.tool_call["name"] in self.tool_names:
            text = message_text(result)
            docs = [Document(page_content=text, metadata={"source": request.tool_call["name"]})] if text else []
        return docs

    def _graded(self, request: Any, result: ToolMessage, query: str, docs: list[Document],
                scores: list[float]) -> Command:
        """The tool message rebuilt from the passages kept, and the run's state told of them."""
        name = request.tool_call["name"]
        kept = [i for i, s in enumerate(scores) if s >= self.isrel_bar]
        best = max(scores, default=None)
        writer = _writer(request.runtime)
        for i, (doc, score) in enumerate(zip(docs, scores)):
            writer({"event": "critique", "aspect": "isrel", "source": KEY, "tool": name, "query": query, "passage": i,
                    "title": source_of(doc), "value": score, "kept": i in kept})
        writer({"event": "retrieval", "source": KEY, "tool": name, "query": query, "retrieved": len(docs),
                "kept": len(kept), "best_isrel": best})
        kept_docs = [docs[i] for i in kept]
        text = (tool_text(request.tool, kept_docs) if kept_docs
                else nothing_relevant(query, len(docs), best, self.isrel_bar))
        meta = {"query": query, "isrel": scores, "kept": kept, "bar": self.isrel_bar,
                "sources": [source_of(d) for d in docs]}
        message = result.model_copy(update={
            "content": text, "artifact": kept_docs,
            "response_metadata": {**result.response_metadata, KEY: meta}})
        asking = asking_message(request.tool_call.get("id"), _messages(request.state))
        return Command(update={
            "messages": [message],
            "selfrag_passages": [{"document": docs[i], "isrel": scores[i], "tool": name, "query": query} for i in kept],
            "selfrag_rounds": [{"message": asking, "tool": name, "query": query, "retrieved": len(docs),
                                "kept": len(kept), "best_isrel": best}],
        })

    # -- the final answer --------------------------------------------------------------------------------
    @hook_config(can_jump_to=["end"])
    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Judge the final answer, or end a run that asks for a retrieval round over the bound."""
        update, job = self._answer_job(state, runtime)
        if job is None:
            return update
        last, passages, args = job
        scores = answer_support(*args, max_passage_tokens=self.config.max_passage_tokens)
        return self._judged(state, last, passages, scores, runtime)

    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        update, job = self._answer_job(state, runtime)
        if job is None:
            return update
        last, passages, args = job
        scores = await asyncio.to_thread(answer_support, *args, max_passage_tokens=self.config.max_passage_tokens)
        return self._judged(state, last, passages, scores, runtime)

    def _answer_job(self, state: Any, runtime: Any) -> tuple[dict[str, Any] | None, tuple | None]:
        """``(update, None)`` when there is no answer to judge (the update ends a run over its bound), else
        ``(None, (answer message, kept passages, answer_support's arguments))``."""
        last = _last_ai(state)
        if last is None or KEY in (last.response_metadata or {}):
            return None, None
        if last.tool_calls:
            return self._over_bound(state, last, runtime), None
        passages = passages_of(state)
        args = (self.lm, question_of(_messages(state)), message_text(last), [p["document"] for p in passages])
        return None, (last, passages, args)

    def _judged(self, state: Any, last: AIMessage, passages: list[dict[str, Any]], scores: list[float],
                runtime: Any) -> dict[str, Any]:
        writer = _writer(runtime)
        for i, (p, score) in enumerate(zip(passages, scores)):
            writer({"event": "critique", "aspect": "issup", "source": KEY, "passage": i,
                    "title": source_of(p["document"]), "value": score})
        found = verdict(message_text(last), passages, scores, rounds_of(state), issup_bar=self.issup_bar,
                        isrel_bar=self.isrel_bar, closed_book_abstains=self._closed_book_abstains())
        abstains = found.reason is not None and self.on_unsupported == "abstain"
        meta = _answer_metadata(found, passages, self.issup_bar, abstained=abstains,
                                answer=message_text(last) if abstains else None)
        writer({"event": "verdict", "source": KEY,
                **{k: v for k, v in meta.items() if k not in ("citations", "answer")}})
        update: dict[str, Any] = {"response_metadata": {**(last.response_metadata or {}), KEY: meta}}
        if abstains:
            update["content"] = abstention(found.reason)
        return {"messages": [last.model_copy(update=update)]}

    def _closed_book_abstains(self) -> bool:
        return self.config.abstain_closed_book and self.config.mode != "never"

    def _over_bound(self, state: Any, last: AIMessage, runtime: Any) -> dict[str, Any] | None:
        """A message that asks for one more retrieval round than ``max_retrievals`` allows: its calls are
        answered as not run and the run ends with the abstention."""
        known = self._known(state)
        if round_count(state) < self.max_retrievals or not any(c["name"] in known for c in last.tool_calls):
            return None
        reason = (f"the retrieval limit was reached (max_retrievals={self.max_retrievals}) before an answer the "
                  "passages support")
        not_run = [ToolMessage(f"Not run: {reason}.", tool_call_id=c["id"], name=c["name"], status="error")
                   for c in last.tool_calls]
        found = Verdict(reason, None, [], [])
        meta = _answer_metadata(found, passages_of(state), self.issup_bar, abstained=True, answer=None)
        _writer(runtime)({"event": "verdict", "source": KEY, **{k: v for k, v in meta.items() if k != "citations"}})
        final = AIMessage(abstention(reason), response_metadata={KEY: meta})
        return {"messages": [*not_run, final], "jump_to": "end"}


def _messages(state: Any) -> list[Any]:
    """The messages of the agent's state (a dict in ``create_agent``; a model or a list in a plain ToolNode)."""
    if isinstance(state, dict):
        return list(state.get("messages") or [])
    return list(state) if isinstance(state, list) else list(getattr(state, "messages", None) or [])


def _last_ai(state: Any) -> AIMessage | None:
    messages = _messages(state)
    return messages[-1] if messages and isinstance(messages[-1], AIMessage) else None


def _answer_metadata(found: Verdict, passages: list[dict[str, Any]], issup_bar: float, *, abstained: bool,
                     answer: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "supported": found.reason is None, "abstained": abstained, "reason": found.reason, "issup": found.best,
        "bar": issup_bar, "citations": found.citations,
        "passages": [{"source": source_of(p["document"]), "isrel": p["isrel"],
                      "issup": found.scores[i] if i < len(found.scores) else None} for i, p in enumerate(passages)]}
    if answer is not None:
        meta["answer"] = answer  # the answer the abstention replaced
    return meta


def _writer(runtime: Any) -> Callable[[Any], None]:
    """The run's custom stream writer (a no-op outside a streamed run)."""
    writer = getattr(runtime, "stream_writer", None)
    return writer if callable(writer) else (lambda _event: None)
