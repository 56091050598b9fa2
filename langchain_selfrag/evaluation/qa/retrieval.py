"""Candidate passages for evaluation questions: the given ``ctxs`` or a pooled Chroma collection.

The pooled collection holds every passage of the data set's own corpus once, chunked with the
splitter and chunk sizes of ``selfrag index`` (:func:`langchain_selfrag.retrieval.split_documents`),
so a long document becomes several passages. It is persisted under the run directory, keyed by a
hash of the corpus and the chunk sizes, so a resumed run does not embed it again.
Queries are embedded in batches and looked up once per question; every system then sees the same
ranked candidates (plain RAG the first, Self-RAG the first ``k``).
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from tqdm.auto import tqdm

from ...retrieval import split_documents
from ..common.errors import EvalError
from .data import Example, Passage

#: Chunk sizes of the pooled collection: the defaults of ``selfrag index`` (``split_documents``).
CHUNK_SIZES: dict[str, int] = {
    name: param.default
    for name, param in inspect.signature(split_documents).parameters.items()
    if name in ("chunk_size", "chunk_overlap")
}


class RetrievalSetupError(EvalError):
    """The evaluation retrieval could not be set up (no corpus, no embeddings); ``selfrag eval``
    reports it as a one-line error."""


def passage_document(p: Passage) -> Document:
    return Document(page_content=p.text, metadata={"title": p.title, "id": p.id})


def given_candidates(examples: Sequence[Example], k: int) -> dict[str, list[Document]]:
    """The first ``k`` given passages of each example, in their given order."""
    return {ex.id: [passage_document(p) for p in (ex.passages or [])[:k]] for ex in examples}


def corpus_key(corpus: Sequence[Passage]) -> str:
    digest = hashlib.sha1()
    for p in corpus:
        digest.update(p.title.encode())
        digest.update(b"\x00")
        digest.update(p.text.encode())
        digest.update(b"\x01")
    return digest.hexdigest()[:16]


def corpus_chunks(corpus: Sequence[Passage]) -> list[tuple[str, Document]]:
    """(id, chunk) pairs of ``corpus``, split as ``selfrag index`` splits files (:data:`CHUNK_SIZES`);
    ids are ``N-M`` (passage N, chunk M) and each chunk keeps its passage's title and id."""
    out = []
    for n, p in enumerate(corpus):
        doc = Document(page_content=p.text, metadata={"title": p.title, "id": p.id})
        out.extend((f"{n}-{c.metadata['chunk']}", c) for c in split_documents([doc], **CHUNK_SIZES))
    return out


def pooled_store(corpus: Sequence[Passage], directory: Path, embeddings: Any, batch_size: int = 64) -> Any:
    """A persistent Chroma collection of ``corpus``, chunked (:func:`corpus_chunks`), under
    ``directory`` (built once, then reused)."""
    if not corpus:
        raise RetrievalSetupError("the data set has no passages to pool; use --retrieval given or pass --corpus")
    from langchain_chroma import Chroma

    directory.mkdir(parents=True, exist_ok=True)
    sizes = f"{CHUNK_SIZES['chunk_size']}-{CHUNK_SIZES['chunk_overlap']}"
    store = Chroma(
        collection_name=f"eval-{corpus_key(corpus)}-{sizes}",
        embedding_function=embeddings,
        persist_directory=str(directory),
        collection_metadata={"hnsw:space": "cosine"},
    )
    have = set(store.get(include=[])["ids"])
    todo = [(i, doc) for i, doc in corpus_chunks(corpus) if i not in have]
    for start in tqdm(range(0, len(todo), batch_size), desc="index passages", unit="batch", disable=not todo):
        batch = todo[start : start + batch_size]
        store.add_texts(
            texts=[doc.page_content for _, doc in batch],
            metadatas=[doc.metadata for _, doc in batch],
            ids=[i for i, _ in batch],
        )
    return store


def pooled_candidates(
    store: Any, embeddings: Any, examples: Sequence[Example], k: int, batch_size: int = 64
) -> tuple[dict[str, list[Document]], float]:
    """Top-``k`` pooled passages per example, and the mean retrieval seconds per question."""
    out: dict[str, list[Document]] = {}
    started = time.perf_counter()
    for start in tqdm(range(0, len(examples), batch_size), desc="retrieve", unit="batch", disable=len(examples) < 2):
        chunk = list(examples[start : start + batch_size])
        vectors = embeddings.embed_documents([ex.question for ex in chunk])
        for ex, vec in zip(chunk, vectors):
            out[ex.id] = store.similarity_search_by_vector(vec, k=k)
    per_query = (time.perf_counter() - started) / max(len(examples), 1)
    return out, per_query


def empty_retriever() -> Any:
    """A retriever that finds nothing: the chain's retriever when every call brings its passages."""
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.retrievers import BaseRetriever

    class _NoPassages(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
            return []

    return _NoPassages()
