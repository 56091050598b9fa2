"""The ``retrieve`` node: passages for every beam that asks, from the retriever or the given passages.

It runs sync (:func:`retrieve`) or async (:func:`aretrieve`, the queries sent concurrently);
:data:`retrieve_node` is the one graph node that does either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.runtime import Runtime, get_runtime

from ...retrieval import afetch_documents, fetch_documents, passage_heading
from ...retrieval.rerank import rerank
from ..context import SelfRAGContext
from ..state import Beam, SelfRAGState
from .common import context_of, emit


def doc_key(doc: Document) -> tuple[str, str]:
    return doc.page_content, str(doc.metadata.get("source", ""))


def _query(state: Mapping[str, Any], beam: Beam) -> str:
    segments = beam.get("segments") or []
    query = state["question"].strip()
    if segments and segments[-1].get("text"):
        query = f"{query}\n{segments[-1]['text']}"
    return query


def _plan_retrieval(state: Mapping[str, Any]) -> tuple[list[Beam], list[str | None], list[str]]:
    """Beam copies, each beam's query (None: no retrieval) and the distinct queries to send."""
    beams = [dict(b) for b in state.get("beams", [])]
    queries = [_query(state, b) if not b.get("done") and b.get("need_retrieval") else None for b in beams]
    distinct = [] if state.get("given_passages") is not None else list(dict.fromkeys(q for q in queries if q))
    return beams, queries, distinct


def _given_for(given: Sequence[Document], beam: Beam, query: str, k: int) -> list[Document]:
    """Given passages for one beam: the caller's first ``k`` for the first segment; for a later one
    the ``k`` that best match the segment query (BM25 over all of them, ties in the given order)."""
    if not beam.get("segments"):
        return list(given[:k])
    texts = [f"{passage_heading(d)}\n{d.page_content}" for d in given]
    return [given[i] for i in rerank(query, texts, k)]


def add_passages(passages: list[Document], index: dict[tuple[str, str], int], docs: Sequence[Document]) -> list[int]:
    """Append the documents not seen yet to ``passages`` (``index``: their keys); return the
    positions of ``docs`` in ``passages``, each once, in order."""
    evidence: list[int] = []
    for doc in docs:
        key = doc_key(doc)
        if key not in index:
            index[key] = len(passages)
            passages.append(doc)
        if index[key] not in evidence:
            evidence.append(index[key])
    return evidence


def _attach_evidence(state: Mapping[str, Any], runtime: Runtime[SelfRAGContext] | None, k: int, beams: list[Beam],
                     queries: list[str | None], found: Mapping[str, list[Document]]) -> dict[str, Any]:
    passages = list(state.get("passages") or [])
    index = {doc_key(d): i for i, d in enumerate(passages)}
    given = state.get("given_passages")
    for beam, query in zip(beams, queries):
        if query is None:
            continue
        docs = _given_for(given, beam, query, k) if given is not None else found[query]
        evidence = add_passages(passages, index, docs)
        beam["evidence"] = evidence
        if not evidence:
            beam["need_retrieval"] = False
        emit(runtime, "retrieval", depth=state.get("depth", 0), beam=beam["id"], query=query,
             passages=[passages[i].page_content[:200] for i in evidence])
    return {"beams": beams, "passages": passages, "retrieved": True, "retrieval_attempted": True}


def retrieve(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Fetch ``k`` passages for each beam that needs them.

    The query is the question for the first segment and the question plus the previous segment
    afterwards; each distinct query is sent once. Given passages (input ``passages``) replace the
    retriever: the first segment takes the first ``k``, a later one the ``k`` that match its query
    best (:func:`langchain_selfrag.retrieval.rerank.rerank`). Passages are collected, without duplicates,
    in ``passages``; each beam keeps the indices of its evidence. A beam whose retrieval finds
    nothing falls back to generation without retrieval. :func:`aretrieve` is the same node for
    async runs.
    """
    ctx = context_of(runtime)
    beams, queries, distinct = _plan_retrieval(state)
    found = {q: fetch_documents(ctx.retriever, q, ctx.config.k, timeout=ctx.retriever_timeout) for q in distinct}
    return _attach_evidence(state, runtime, ctx.config.k, beams, queries, found)


async def aretrieve(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Async :func:`retrieve`: the distinct queries go to the retriever concurrently (``afetch_documents``)."""
    ctx = context_of(runtime)
    beams, queries, distinct = _plan_retrieval(state)
    tasks = [asyncio.ensure_future(afetch_documents(ctx.retriever, q, ctx.config.k, timeout=ctx.retriever_timeout))
             for q in distinct]
    try:
        results = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    return _attach_evidence(state, runtime, ctx.config.k, beams, queries, dict(zip(distinct, results)))


class SyncAsyncNode(Runnable[Any, dict[str, Any]]):
    """A graph node with a sync and an async function of ``(state, runtime)``.

    LangGraph calls ``invoke`` when the graph runs sync and ``ainvoke`` under ``ainvoke`` /
    ``astream``; both read the run's ``Runtime`` with ``langgraph.runtime.get_runtime``.
    """

    def __init__(self, name: str, func: Callable[..., dict[str, Any]],
                 afunc: Callable[..., Awaitable[dict[str, Any]]]) -> None:
        self.name = name
        self.func = func
        self.afunc = afunc

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return self.func(input, get_runtime())

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return await self.afunc(input, get_runtime())


#: The ``retrieve`` node as the graph adds it: :func:`retrieve` in sync runs, :func:`aretrieve` in async ones.
retrieve_node = SyncAsyncNode("retrieve", retrieve, aretrieve)
