"""Hybrid retrieval: reciprocal rank fusion (RRF) of several retrievers into one ranking.

RRF (Cormack, Clarke and Buettcher, SIGIR 2009) scores a document ``sum_i w_i / (rrf_k + rank_i)``
over the rankings it appears in (rank from 1). It needs no score calibration, so a lexical (BM25)
and a dense (embedding) retriever combine without tuning: each finds what the other misses.
:func:`reciprocal_rank_fusion` is the pure function; :class:`FusionRetriever` is the LangChain
retriever around it (the role of ``langchain_classic``'s ``EnsembleRetriever``, without that
package). Its sources are anything :func:`~langchain_selfrag.retrieval.fetch_documents` accepts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, model_validator

from .fetch import afetch_documents, fetch_documents
from .loading import chunk_id

#: The rank offset of the RRF paper (rank 1 scores 1/61).
RRF_K = 60


def document_key(doc: Document) -> str:
    """What makes two retrieved documents the same: ``metadata["id"]`` when set, else the store's
    :func:`~langchain_selfrag.retrieval.chunk_id` (source, chunk number and text)."""
    meta = doc.metadata or {}
    return f"id:{meta['id']}" if meta.get("id") is not None else f"chunk:{chunk_id(doc)}"


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Document]], *, weights: Sequence[float] | None = None,
                           rrf_k: int = RRF_K, key: Callable[[Document], str] = document_key) -> list[Document]:
    """Every document of ``rankings`` once, best fused score first.

    Ties keep first-seen order (earlier ranking, then earlier rank). A document found by several
    rankings is returned as the first ranking had it (its metadata, not a merge). ``key`` says which
    documents are the same (default :func:`document_key`).
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    if rrf_k < 0:
        raise ValueError(f"rrf_k must be >= 0, not {rrf_k}")
    scores: dict[str, float] = {}
    first: dict[str, Document] = {}
    for ranking, weight in zip(rankings, weights):
        seen: set[str] = set()
        for rank, doc in enumerate(ranking, start=1):
            name = key(doc)
            if name in seen:  # a ranking that repeats a document counts it at its best rank only
                continue
            seen.add(name)
            first.setdefault(name, doc)
            scores[name] = scores.get(name, 0.0) + weight / (rrf_k + rank)
    return [first[name] for name in sorted(first, key=lambda name: -scores[name])]  # stable: ties keep first-seen order


class FusionRetriever(BaseRetriever):
    """The top ``k`` of several retrievers fused by :func:`reciprocal_rank_fusion`.

    Each source is asked for ``depth`` documents (at least ``k``). Sources: ``BaseRetriever``,
    ``VectorStore`` or a ``query -> list[Document]`` callable. Async calls query the sources
    concurrently. ``k`` may also be given per call: ``retriever.invoke(query, k=3)``.

        FusionRetriever(sources=[bm25_retriever, store.as_retriever()], k=5)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    sources: list[Any]
    k: int = 5
    depth: int = 20
    weights: list[float] | None = None
    rrf_k: int = RRF_K

    @model_validator(mode="after")
    def _check(self) -> FusionRetriever:
        if not self.sources:
            raise ValueError("FusionRetriever needs at least one source")
        if self.weights is not None and len(self.weights) != len(self.sources):
            raise ValueError(f"{len(self.weights)} weights for {len(self.sources)} sources")
        if self.k < 1 or self.depth < 1 or self.rrf_k < 0:
            raise ValueError(f"k and depth must be >= 1 and rrf_k >= 0 (k={self.k}, depth={self.depth}, "
                             f"rrf_k={self.rrf_k})")
        return self

    def _k(self, k: int | None) -> int:
        if k is None:
            return self.k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an integer >= 1, not {k!r}")
        return k

    def _fused(self, rankings: Sequence[Sequence[Document]], k: int) -> list[Document]:
        return reciprocal_rank_fusion(rankings, weights=self.weights, rrf_k=self.rrf_k)[:k]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None) -> list[Document]:
        k = self._k(k)
        return self._fused([fetch_documents(source, query, max(self.depth, k)) for source in self.sources], k)

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None) -> list[Document]:
        k = self._k(k)
        rankings = await asyncio.gather(*(afetch_documents(s, query, max(self.depth, k)) for s in self.sources))
        return self._fused(rankings, k)
