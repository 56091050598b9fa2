"""Deterministic keyword embeddings for tests that rank tiny corpora without a real embedding model."""

from __future__ import annotations

import hashlib
import re

from langchain_core.embeddings import Embeddings


class KeywordEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings (hashed words), enough to rank tiny corpora."""

    def _vec(self, text: str) -> list[float]:
        vec = [0.0] * 64
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
        norm = sum(v * v for v in vec) ** 0.5 or 1.0
        return [v / norm for v in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)
