"""BM25 retrieval over :class:`~training.selfrag.qa_data.Passage` objects, scored by the ``bm25s`` library."""

from __future__ import annotations

import re
from collections.abc import Sequence

import bm25s

from .qa_data import Passage

_WORD = re.compile(r"\w+")
_STOP = frozenset(
    "a an the of in on at to for by with from and or is are was were be been what which who whom whose when "
    "where why how did do does that this these those it its as".split()
)


def terms(text: str) -> list[str]:
    """Lower-case word tokens without common stop words."""
    # Own tokeniser: bm25s.tokenize drops one-character words and has another stop list.
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


class BM25Retriever:
    """Okapi BM25 (k1=1.5, b=0.75) with title + text as the document. Callable as ``(query, k)``.

    Per query term: ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))`` with
    ``idf = log(1 + (N - df + 0.5) / (df + 0.5))``: bm25s ``method="atire"``, ``idf_method="lucene"``, float64.
    """

    def __init__(self, passages: Sequence[Passage], *, k1: float = 1.5, b: float = 0.75) -> None:
        if not passages:
            raise ValueError("BM25Retriever needs at least one passage")
        self.passages = list(passages)
        self.k1, self.b = k1, b
        docs = [terms(f"{p.title} {p.text}") for p in self.passages]
        self._index = bm25s.BM25(k1=k1, b=b, method="atire", idf_method="lucene", dtype="float64")
        if any(docs):  # with no term at all the average length is 0, which bm25s divides by
            self._index.index(docs, create_empty_token=False, show_progress=False)

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every passage sharing a term with ``query`` (index -> score)."""
        vocab = getattr(self._index, "vocab_dict", {})
        ids = [vocab[t] for t in dict.fromkeys(terms(query)) if t in vocab]  # each query term counts once
        if not ids:
            return {}
        scores = self._index.get_scores_from_ids(ids)
        return {int(i): float(scores[i]) for i in scores.nonzero()[0]}

    def search(self, query: str, k: int = 5) -> list[tuple[Passage, float]]:
        """Top ``k`` passages with scores, best first (ties broken by corpus order)."""
        ranked = sorted(self.scores(query).items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [(self.passages[i], s) for i, s in ranked]

    def __call__(self, query: str, k: int = 5) -> list[Passage]:
        return [p for p, _ in self.search(query, k)]


def as_retriever_fn(retriever):
    """Turn a callable ``(query, k)``, a LangChain retriever or a vector store into ``(query, k) -> [Passage]``."""
    if isinstance(retriever, BM25Retriever) or (callable(retriever) and not hasattr(retriever, "invoke")):
        return retriever

    def _docs_to_passages(docs):
        out = []
        for j, doc in enumerate(docs):
            meta = getattr(doc, "metadata", {}) or {}
            out.append(Passage(str(meta.get("id", j)), str(meta.get("title", "")), doc.page_content, str(meta.get("article", ""))))
        return out

    if hasattr(retriever, "similarity_search"):
        return lambda query, k=5: _docs_to_passages(retriever.similarity_search(query, k=k))
    if hasattr(retriever, "invoke"):
        return lambda query, k=5: _docs_to_passages(retriever.invoke(query))[:k]
    raise TypeError(f"cannot use {type(retriever).__name__} as a retriever")
