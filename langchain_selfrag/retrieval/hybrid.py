"""The embedded store searched two ways: Chroma's embeddings and the lexical index, fused.

:class:`HybridStore` is a LangChain ``VectorStore`` over a Chroma store and its
:class:`~.lexical.LexicalIndex`. Every write and delete goes to both (``selfrag index`` writes through it,
so re-indexing and deletions keep them in step); a search ranks the chunks by embedding similarity
and by BM25 and fuses the two rankings by reciprocal rank fusion (:func:`~.fusion.reciprocal_rank_fusion`).
On the trust suite's documentation (``benchmarks/docs_retrieval.py``) the fused top 5 held the
answer's chunk for more questions than the embeddings alone. A search with a metadata ``filter`` is
the dense store's alone (the lexical index has no filter), and so are scored searches and MMR. Anything
else (``get``, the collection) is the Chroma store's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from .fusion import reciprocal_rank_fusion
from .lexical import LexicalIndex

#: How deep each index is searched for the fused ranking: at least this many, and at least 4 x k.
FUSION_DEPTH = 20


def fusion_depth(k: int) -> int:
    """Chunks each index contributes to a fused search of the top ``k``."""
    return max(FUSION_DEPTH, 4 * k)


def _key(doc: Document) -> str:
    return f"id:{doc.id}"


class HybridStore(VectorStore):
    """``dense`` (a Chroma store) and ``lexical`` (its lexical index) written together, searched fused."""

    def __init__(self, dense: VectorStore, lexical: LexicalIndex) -> None:
        self.dense = dense
        self.lexical = lexical

    def __getattr__(self, name: str) -> Any:  # get, _collection, ...: the Chroma store's
        if name in ("dense", "lexical"):
            raise AttributeError(name)
        return getattr(self.dense, name)

    def __repr__(self) -> str:
        return f"HybridStore({self.dense!r}, lexical={self.lexical.path})"

    @property
    def embeddings(self) -> Embeddings | None:
        return self.dense.embeddings

    def add_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *, ids: list[str] | None = None,
                  **kwargs: Any) -> list[str]:
        texts = list(texts)
        metadatas = metadatas or [{} for _ in texts]
        ids = list(ids) if ids is not None else [str(uuid.uuid4()) for _ in texts]
        written = self.dense.add_texts(texts, metadatas, ids=ids, **kwargs)
        self.lexical.add(written, [Document(t, metadata=dict(m or {})) for t, m in zip(texts, metadatas)])
        return written

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete chunks by id, or (as Chroma's ``delete``) those whose metadata matches ``where``."""
        if ids is None:
            if not kwargs.get("where"):
                raise ValueError("HybridStore.delete needs the ids to delete, or a metadata filter `where`")
            ids = self.dense.get(where=kwargs.pop("where"), include=[])["ids"]  # type: ignore[attr-defined]
            if not ids:
                return True
        done = self.dense.delete(ids=ids, **kwargs)
        self.lexical.delete(ids)
        return done

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The top ``k`` chunks by the fused ranking (by embeddings alone with a ``filter``)."""
        if kwargs.get("filter") or kwargs.get("where_document"):
            return self.dense.similarity_search(query, k=k, **kwargs)
        depth = fusion_depth(k)
        dense = self.dense.similarity_search(query, k=depth, **kwargs)
        return reciprocal_rank_fusion([dense, self.lexical.search(query, depth)], key=_key)[:k]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """The embeddings' own ranking with Chroma's distances (a fused ranking has no comparable score)."""
        return self.dense.similarity_search_with_score(query, k=k, **kwargs)  # type: ignore[attr-defined]

    def max_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5,
                                      **kwargs: Any) -> list[Document]:
        """Chroma's MMR over the embeddings."""
        return self.dense.max_marginal_relevance_search(query, k=k, fetch_k=fetch_k, lambda_mult=lambda_mult, **kwargs)

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings, metadatas: list[dict] | None = None, *,
                   ids: list[str] | None = None, collection_name: str = "selfrag", **kwargs: Any) -> HybridStore:
        """A hybrid store in memory holding ``texts`` (Chroma's in-memory client and a lexical index in
        memory), as ``Chroma.from_texts`` makes one; an on-disk store is made by ``index_path`` and
        opened by ``open_store``."""
        from langchain_chroma import Chroma

        store = cls(Chroma(collection_name=collection_name, embedding_function=embedding, **kwargs),
                    LexicalIndex(":memory:", collection_name))
        store.add_texts(texts, metadatas, ids=ids)
        return store


def refill_lexical(dense: VectorStore, lexical: LexicalIndex, *, batch: int = 1000) -> int:
    """Make the lexical index hold exactly the chunks of the Chroma store (read back, not embedded
    again); the number of chunks indexed."""
    lexical.clear()
    done = 0
    while True:
        got = dense.get(include=["documents", "metadatas"], limit=batch, offset=done)  # type: ignore[attr-defined]
        if not got["ids"]:
            return done
        lexical.add(got["ids"], [Document(text or "", metadata=dict(meta or {}))
                                 for text, meta in zip(got["documents"], got["metadatas"])])
        done += len(got["ids"])


def in_step(dense: VectorStore, lexical: LexicalIndex) -> bool:
    """Whether the lexical index holds the same chunk ids as the Chroma store."""
    return set(dense.get(include=[])["ids"]) == lexical.ids()  # type: ignore[attr-defined]
