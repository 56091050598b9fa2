"""Read a store's passages before the questions come: ``selfrag index --read-ahead``.

A model that asks about the passage first (the ``chatml-questions`` layout of ``selfrag-qwen2.5-coder-1.5b``)
on llama.cpp keeps its reading of each passage on disk (:mod:`langchain_selfrag.lm.llamacpp.prefix_states`);
a question then prefills only its own part for each passage read before. :func:`read_ahead` reads passages
now, so that the first question about them is as fast as the later ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.documents import Document

from .errors import InvalidInputError
from .prompts import format_prompt, with_evidence
from .retrieval import passage_heading

__all__ = ["evidence_prompt", "read_ahead", "store_documents"]

#: The question of the evidence prompts read ahead: questions come after the passage, so any will do.
PLACEHOLDER_QUESTION = "?"


def evidence_prompt(doc: Document) -> str:
    """The Self-RAG evidence prompt that the graph gives the model for ``doc`` (its question aside)."""
    return with_evidence(format_prompt(PLACEHOLDER_QUESTION), passage_heading(doc), doc.page_content)


def store_documents(store: Any) -> list[Document]:
    """Every chunk a Chroma vector store holds, as the retriever returns them."""
    get = getattr(store, "get", None)
    if not callable(get):
        raise InvalidInputError(f"cannot list the chunks of a {type(store).__name__}: reading ahead needs a Chroma store")
    got = get(include=["documents", "metadatas"])
    return [Document(page_content=text or "", metadata=dict(meta or {}))
            for text, meta in zip(got.get("documents") or [], got.get("metadatas") or [])]


def read_ahead(lm: Any, documents: Sequence[Document],
               on_progress: Callable[[int, int], None] | None = None) -> tuple[int, int, int]:
    """Read ``documents`` with ``lm`` (a reflection LM that keeps its passage reads); returns (passages read
    now, passages found read before, passages left unread because the folder of reads is full:
    ``$SELFRAG_PREFIX_CACHE_MB``). InvalidInputError for a model that reads each passage anew."""
    read = getattr(lm, "read_passages", None)
    if not callable(read) or not getattr(lm, "reads_passages_once", False):
        name = getattr(lm, "name", type(lm).__name__)
        raise InvalidInputError(f"{name} reads each passage with its question, so there is nothing to read ahead "
                                "(a model in the chatml-questions layout on llama.cpp keeps its reads)")
    return read([evidence_prompt(doc) for doc in documents], on_progress)
