"""The evaluation's LangChain retrievers over SQuAD passages: BM25 and the MiniLM Chroma store.

Shared by the SmolLM2 recipe's evaluation (``cookbook/selfrag_smollm2/evaluate.py``) and
``benchmarks/retrieval_recall.py``, which measures their gold-passage recall.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from .qa_data import Passage


def passage_document(p: Passage) -> Document:
    """A LangChain Document for a SQuAD passage; ``metadata["id"]`` identifies gold passages."""
    return Document(page_content=p.text, metadata={"id": p.id, "title": p.title, "article": p.article})


class BM25DocumentRetriever(BaseRetriever):
    """``training.selfrag.bm25.BM25Retriever`` as a LangChain retriever (``k`` is set per call by the chain)."""

    bm25: Any
    k: int = 5

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [passage_document(p) for p in self.bm25(query, self.k)]


def dense_store(passages: Sequence[Passage], directory: Path) -> Any:
    """The MiniLM Chroma store of ``passages`` that ``selfrag eval`` pools (built once under ``directory``)."""
    from langchain_selfrag.evaluation.qa.data import Passage as EvalPassage
    from langchain_selfrag.evaluation.qa.retrieval import pooled_store
    from langchain_selfrag.retrieval import default_embeddings

    return pooled_store([EvalPassage(p.title, p.text, p.id) for p in passages], directory, default_embeddings())
