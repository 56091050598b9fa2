"""Lexical re-ranking of caller-given passages: a small Okapi BM25 over the passages themselves.

Long-form Self-RAG retrieves again for each segment with the question plus the previous segment
as the query. When the caller gives the passages (no retriever), the graph re-ranks them for each
segment with :func:`rerank`. Pure functions; no index, no dependency. The IDF is the
non-negative BM25 variant ``ln(1 + (N - n + 0.5) / (n + 0.5))`` computed over the given texts.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_WORD = re.compile(r"\w+")

#: Okapi BM25 defaults.
K1 = 1.5
B = 0.75


def terms(text: str) -> list[str]:
    """Case-folded word tokens of ``text`` (Unicode letters, digits, underscore)."""
    return _WORD.findall(text.casefold())


def idf(doc_freq: int, n_docs: int) -> float:
    """BM25 inverse document frequency, never negative."""
    return math.log(1.0 + (n_docs - doc_freq + 0.5) / (doc_freq + 0.5))


def bm25_scores(query: str, texts: Sequence[str], *, k1: float = K1, b: float = B) -> list[float]:
    """The BM25 score of each text for ``query``, with statistics from ``texts`` alone."""
    docs = [terms(t) for t in texts]
    if not docs:
        return []
    avg_len = sum(len(d) for d in docs) / len(docs) or 1.0
    doc_freq = Counter(term for d in docs for term in set(d))
    query_terms = list(dict.fromkeys(terms(query)))
    scores = []
    for doc in docs:
        tf = Counter(doc)
        norm = k1 * (1.0 - b + b * len(doc) / avg_len)
        scores.append(sum(idf(doc_freq[t], len(docs)) * tf[t] * (k1 + 1.0) / (tf[t] + norm)
                          for t in query_terms if tf[t]))
    return scores


def rerank(query: str, texts: Sequence[str], k: int) -> list[int]:
    """Indices of the ``k`` texts that score best for ``query``, best first; ties keep the given order."""
    scores = bm25_scores(query, texts)
    return sorted(range(len(texts)), key=lambda i: -scores[i])[: max(k, 0)]
