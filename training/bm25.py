"""A small dependency-free BM25 retriever over :class:`~training.qa_data.Passage` objects."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from .qa_data import Passage

_WORD = re.compile(r"\w+")
_STOP = frozenset(
    "a an the of in on at to for by with from and or is are was were be been what which who whom whose when "
    "where why how did do does that this these those it its as".split()
)


def terms(text: str) -> list[str]:
    """Lower-case word tokens without common stop words."""
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


class BM25Retriever:
    """Okapi BM25 (k1=1.5, b=0.75) with title + text as the document. Callable as ``(query, k)``."""

    def __init__(self, passages: Sequence[Passage], *, k1: float = 1.5, b: float = 0.75) -> None:
        if not passages:
            raise ValueError("BM25Retriever needs at least one passage")
        self.passages = list(passages)
        self.k1, self.b = k1, b
        self._tf = [Counter(terms(f"{p.title} {p.text}")) for p in self.passages]
        self._len = [sum(tf.values()) for tf in self._tf]
        self._avg = sum(self._len) / len(self._len) or 1.0
        df: Counter[str] = Counter()
        for tf in self._tf:
            df.update(tf.keys())
        n = len(self.passages)
        self._idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self._postings: dict[str, list[int]] = {}
        for i, tf in enumerate(self._tf):
            for t in tf:
                self._postings.setdefault(t, []).append(i)

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every passage sharing a term with ``query`` (index -> score)."""
        out: dict[int, float] = {}
        for t in set(terms(query)):
            idf = self._idf.get(t)
            if idf is None:
                continue
            for i in self._postings[t]:
                tf = self._tf[i][t]
                denom = tf + self.k1 * (1 - self.b + self.b * self._len[i] / self._avg)
                out[i] = out.get(i, 0.0) + idf * tf * (self.k1 + 1) / denom
        return out

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
