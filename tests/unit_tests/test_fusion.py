"""Reciprocal rank fusion and FusionRetriever (hybrid retrieval)."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field

from langchain_selfrag.retrieval import with_k
from langchain_selfrag.retrieval.fusion import FusionRetriever, document_key, reciprocal_rank_fusion


def doc(name: str, **meta) -> Document:
    return Document(page_content=f"text of {name}", metadata={"id": name, **meta})


def names(docs) -> list[str]:
    return [d.metadata["id"] for d in docs]


def test_fusion_orders_by_summed_reciprocal_ranks():
    # a: 1/61 + 1/62 = 0.032522; c: 1/63 + 1/61 = 0.032266; b: 1/62; d: 1/63
    fused = reciprocal_rank_fusion([[doc("a"), doc("b"), doc("c")], [doc("c"), doc("a"), doc("d")]])
    assert names(fused) == ["a", "c", "b", "d"]


def test_weights_can_reorder_and_are_checked():
    # c: 1/63 + 3/61 = 0.065053 beats a: 1/61 + 3/62 = 0.064780; d: 3/63 beats b: 1/62
    rankings = [[doc("a"), doc("b"), doc("c")], [doc("c"), doc("a"), doc("d")]]
    assert names(reciprocal_rank_fusion(rankings, weights=[1, 3])) == ["c", "a", "d", "b"]
    with pytest.raises(ValueError, match="2 weights for 1 rankings"):
        reciprocal_rank_fusion(rankings[:1], weights=[1, 1])
    with pytest.raises(ValueError, match="rrf_k"):
        reciprocal_rank_fusion(rankings, rrf_k=-1)


def test_same_document_is_counted_once_per_ranking_and_kept_as_first_seen():
    first = Document(page_content="same passage", metadata={"id": 7, "from": "lexical"})
    again = Document(page_content="same passage, other chunking", metadata={"id": 7, "from": "dense"})
    fused = reciprocal_rank_fusion([[first, first, doc("x")], [doc("y"), again]])
    assert [d.metadata.get("from") for d in fused] == ["lexical", None, None]
    assert document_key(first) == document_key(again)
    # without ids, source + chunk + text decide
    plain = [Document(page_content="t", metadata={"source": "a.md", "chunk": 0}),
             Document(page_content="t", metadata={"source": "b.md", "chunk": 0})]
    assert len(reciprocal_rank_fusion([plain, plain[::-1]])) == 2


def test_empty_rankings_fuse_to_nothing():
    assert reciprocal_rank_fusion([[], []]) == []


class Recording(BaseRetriever):
    """Returns its ranking cut to ``k`` and records the ``k`` it was asked for."""

    ranking: list[Document]
    k: int = 4
    asked: list[int] = Field(default_factory=list)

    def _get_relevant_documents(self, query, *, run_manager):
        self.asked.append(self.k)
        return self.ranking[: self.k]


def test_fusion_retriever_asks_each_source_for_depth_and_returns_k():
    lexical = Recording(ranking=[doc("a"), doc("b"), doc("c")], asked=[])
    calls: list[str] = []

    def dense(query: str) -> list[Document]:  # a plain callable source: results are cut to depth
        calls.append(query)
        return [doc("c"), doc("a"), doc("d"), doc("e")]

    fusion = FusionRetriever(sources=[lexical, dense], k=2, depth=3)
    assert names(fusion.invoke("q")) == ["a", "c"]
    assert lexical.asked == [3] and calls == ["q"]
    # the chain sets k through with_k; depth stays at least k
    five = with_k(fusion, 5)
    assert five.k == 5 and fusion.k == 2
    assert names(five.invoke("q")) == ["a", "c", "b", "d", "e"]
    assert lexical.asked[-1] == 5


def test_fusion_retriever_async_matches_sync():
    fusion = FusionRetriever(sources=[Recording(ranking=[doc("a"), doc("b")], asked=[]),
                                      Recording(ranking=[doc("b"), doc("z")], asked=[])], k=3)
    assert names(asyncio.run(fusion.ainvoke("q"))) == names(fusion.invoke("q")) == ["b", "a", "z"]


def test_fusion_retriever_rejects_bad_settings():
    with pytest.raises(ValueError, match="at least one source"):
        FusionRetriever(sources=[])
    with pytest.raises(ValueError, match="1 weights for 2 sources"):
        FusionRetriever(sources=[lambda q: [], lambda q: []], weights=[1.0])
    with pytest.raises(ValueError, match="k and depth"):
        FusionRetriever(sources=[lambda q: []], k=0)


def test_a_failing_source_is_a_retriever_error():
    from langchain_selfrag.errors import RetrieverError

    def broken(query: str) -> list[Document]:
        raise ConnectionError("store is down")

    with pytest.raises(RetrieverError, match="store is down"):
        FusionRetriever(sources=[lambda q: [doc("a")], broken]).invoke("q")
