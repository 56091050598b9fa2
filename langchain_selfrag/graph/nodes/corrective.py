"""Corrective retrieval driven by reflection tokens: rewrite the question, then fall back, then abstain.

Like the LangGraph Self-RAG and CRAG graphs, but the trigger is the model's own IsRel: when a
short-form round retrieved passages and none of them reaches the relevance bar
(:func:`~langchain_selfrag.graph.nodes.abstain.relevance_bar`: ``abstain_isrel``, or p([Relevant]) > 1/2
when that is 0), the ``correct`` node starts another round:

1. ``rewrite`` rounds: the context's ``rewrite`` (any LangChain chat model, LLM or Runnable; the
   reflection model writes no rewrites) turns the question into a new search query, which goes to
   the context's retriever;
2. a ``fallback`` round: the context's ``fallback_retriever`` (a retriever, vector store, tool
   such as a web search, or callable) gets the last query.

Rewrites come first and the fallback last, within ``max_retrieval_rounds`` rounds in all (the
first included): :func:`round_plan`. Each round's passages are generated from and graded like the
first round's; ``select`` then picks among the candidates of every round, and abstains as usual
when no passage of any round is relevant. It is off while the context has neither a rewriter nor
a fallback, and in long form.

Every round is a ``retrieval_round`` stream event when it starts, and a ``retrieval_round`` entry of
the output ``trace`` (``{"kind": "retrieval_round", "round", "source", "query", "passages",
"best_isrel", "relevant"}``) before the candidates it produced (each candidate says its ``round``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime

from ...errors import RetrieverError
from ...retrieval import fetch_documents
from ..context import SelfRAGContext
from ..state import SelfRAGState
from .abstain import candidates_of, relevance_bar, retrieved_and_kept
from .common import FINAL_STEPS, context_of, emit
from .retrieve import add_passages, doc_key

#: Graph steps one corrective round takes at most (correct, generate, 3 graders, rank).
CORRECTIVE_STEPS = 6

#: What a chat model or LLM is asked to do with the question (``{question}``, ``{tried}``).
REWRITE_PROMPT = (
    "Rewrite the question below as a short search query that is more likely to find passages that "
    "answer it. Queries already tried without success: {tried}\n"
    "Question: {question}\n"
    "Reply with the query only."
)


def corrective_enabled(ctx: SelfRAGContext) -> bool:
    """True when the context has a rewriter or a fallback and the run is short form."""
    return (ctx.rewrite is not None or ctx.fallback_retriever is not None) and not ctx.config.long_form


def round_plan(max_rounds: int, *, rewrite: bool, fallback: bool, retriever: bool) -> list[str]:
    """The sources of the rounds after the first, in order: ``"rewrite"`` rounds (only with a
    rewriter and a retriever to send the query to), then one ``"fallback"`` round; at most
    ``max_rounds - 1`` in all, a rewrite kept before the fallback when only one fits."""
    extra = max(max_rounds - 1, 0)
    rewrites = 0
    if rewrite and retriever:
        rewrites = max(extra - int(fallback), 1) if extra else 0
    plan = ["rewrite"] * rewrites + (["fallback"] if fallback else [])
    return plan[:extra]


def _plan(ctx: SelfRAGContext) -> list[str]:
    return round_plan(ctx.config.max_retrieval_rounds, rewrite=ctx.rewrite is not None,
                      fallback=ctx.fallback_retriever is not None, retriever=ctx.retriever is not None)


def _round_relevant(state: Mapping[str, Any], ctx: SelfRAGContext, n: int) -> bool:
    bar = relevance_bar(ctx.config)
    return any(retrieved_and_kept(c) and (c.get("isrel") or 0.0) >= bar
               for c in candidates_of(state.get("trace") or []) if (c.get("round") or 1) == n)


def needs_correction(state: Mapping[str, Any], ctx: SelfRAGContext) -> bool:
    """Another round is due: corrective retrieval is on, the run retrieved, no passage of the
    current round is relevant, the plan has a round left and the step budget can pay for it."""
    if not corrective_enabled(ctx) or not state.get("retrieval_attempted"):
        return False
    n = state.get("round") or 1
    if n - 1 >= len(_plan(ctx)) or _round_relevant(state, ctx, n):
        return False
    remaining = state.get("remaining_steps", CORRECTIVE_STEPS + FINAL_STEPS + 1)
    return remaining > CORRECTIVE_STEPS + FINAL_STEPS


# -- the rewriter ---------------------------------------------------------------------------------
def _text(value: Any) -> str:
    if isinstance(value, BaseMessage):
        value = value.content
    if isinstance(value, list):  # content blocks of a chat message
        value = " ".join(b.get("text", "") if isinstance(b, Mapping) else str(b) for b in value)
    return " ".join(str(value or "").split())


def rewrite_question(rewrite: Any, question: str, tried: Sequence[str]) -> str:
    """The rewriter's new query for ``question`` (``tried``: queries that found nothing relevant).

    A chat model or LLM gets :data:`REWRITE_PROMPT`; another Runnable gets ``{"question", "tried"}``;
    a plain callable gets the question. A message or string reply becomes one line of text.
    """
    if isinstance(rewrite, BaseLanguageModel):
        reply = rewrite.invoke(REWRITE_PROMPT.format(question=question, tried="; ".join(tried) or "none"))
    elif isinstance(rewrite, Runnable):
        reply = rewrite.invoke({"question": question, "tried": list(tried)})
    elif callable(rewrite):
        reply = rewrite(question)
    else:
        raise TypeError(f"rewrite must be a chat model, a Runnable or a callable, not {type(rewrite).__name__}")
    return _text(reply)


# -- the fallback ---------------------------------------------------------------------------------
def as_documents(result: Any) -> list[Document]:
    """A tool's output as Documents: Documents stay, a string is one Document, a dict's ``content``
    (or ``page_content`` / ``text``) becomes the text and its ``url`` / ``title`` the metadata."""
    if isinstance(result, (str, Document, Mapping)):
        result = [result]
    docs = []
    for item in result or []:
        if isinstance(item, Document):
            docs.append(item)
        elif isinstance(item, Mapping):
            text = item.get("content") or item.get("page_content") or item.get("text") or ""
            meta = {k: item[k] for k in ("url", "title", "source") if item.get(k)}
            meta.setdefault("source", meta.get("url", "fallback"))
            if str(text).strip():
                docs.append(Document(page_content=str(text), metadata=meta))
        elif str(item).strip():
            docs.append(Document(page_content=str(item), metadata={"source": "fallback"}))
    return docs


def fallback_documents(source: Any, query: str, k: int, *, timeout: float | None) -> list[Document]:
    """Up to ``k`` Documents from the fallback: a tool is invoked with the query and its output
    converted (:func:`as_documents`); anything else goes through ``fetch_documents``."""
    if isinstance(source, BaseTool):
        return fetch_documents(lambda q: as_documents(source.invoke(q)), query, k, timeout=timeout)
    return fetch_documents(source, query, k, timeout=timeout)


# -- the node -------------------------------------------------------------------------------------
def _first_round(state: Mapping[str, Any]) -> dict[str, Any]:
    source = "given" if state.get("given_passages") is not None else "retriever"
    return {"round": 1, "source": source, "query": state["question"].strip(),
            "passages": list(range(len(state.get("passages") or [])))}


def correct(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Start the next retrieval round: rewrite the question or ask the fallback, then set up a
    fresh short-form beam over the new passages (no passage found: the beam stays without
    evidence and :func:`~langchain_selfrag.graph.routes.route_after_correct` moves on)."""
    ctx = context_of(runtime)
    n = (state.get("round") or 1) + 1
    rounds = list(state.get("rounds") or [_first_round(state)])
    source = _plan(ctx)[n - 2]
    tried = [r["query"] for r in rounds if r.get("query")]
    query = tried[-1]
    note = None
    if source == "rewrite":
        query = rewrite_question(ctx.rewrite, state["question"].strip(), tried)
    if not query:
        docs, note = [], "the rewriter returned no query"
    else:
        try:
            if source == "rewrite":
                docs = fetch_documents(ctx.retriever, query, ctx.config.k, timeout=ctx.retriever_timeout)
            else:
                docs = fallback_documents(ctx.fallback_retriever, query, ctx.config.k, timeout=ctx.retriever_timeout)
        except RetrieverError as exc:
            docs, note = [], f"{source} failed: {exc}"
    passages = list(state.get("passages") or [])
    evidence = add_passages(passages, {doc_key(d): i for i, d in enumerate(passages)}, docs)
    record = {"round": n, "source": source, "query": query, "passages": evidence, **({"note": note} if note else {})}
    emit(runtime, "retrieval_round", round=n, source=source, query=query,
         passages=[passages[i].page_content[:200] for i in evidence], note=note)
    beams = list(state.get("beams") or [])
    root = {"id": max((b["id"] for b in beams), default=0) + 1, "prefix": "", "segments": [], "score_sum": 0.0,
            "done": False, "need_retrieval": bool(evidence), "evidence": evidence, "last_stop": None,
            "last_marker": None, "current_passage": None}
    return {"round": n, "rounds": [*rounds, record], "passages": passages, "beams": [*beams, root],
            "candidates": [], "depth": 0}


# -- the trace ------------------------------------------------------------------------------------
def with_round_entries(state: Mapping[str, Any], ctx: SelfRAGContext,
                       trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The public trace with a ``retrieval_round`` entry before each round's candidates (only when
    corrective retrieval is on and the run retrieved; the trace is returned unchanged otherwise)."""
    if not corrective_enabled(ctx) or not state.get("retrieval_attempted"):
        return trace
    rounds = list(state.get("rounds") or [_first_round(state)])
    bar = relevance_bar(ctx.config)
    out: list[dict[str, Any]] = []
    for record in rounds:
        mine = [t for t in trace if t.get("round", 1) == record["round"]]
        scores = [t["isrel"] for t in mine if t.get("passage") is not None and t.get("isrel") is not None]
        best = max(scores, default=None)
        out.append({"kind": "retrieval_round", **record, "best_isrel": best,
                    "relevant": best is not None and best >= bar})
        out.extend(mine)
    return out


__all__ = ["CORRECTIVE_STEPS", "REWRITE_PROMPT", "as_documents", "correct", "corrective_enabled",
           "fallback_documents", "needs_correction", "rewrite_question", "round_plan", "with_round_entries"]
