"""FusionRetriever under langchain-tests' ``RetrieversIntegrationTests``: BM25 over a corpus fused
with the embedded Chroma store of the same corpus (real MiniLM embeddings), as in hybrid retrieval."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_selfrag.retrieval import FusionRetriever, index_path, open_store
from langchain_selfrag.retrieval.rerank import bm25_scores

CORPUS = {
    "travik.txt": "Mount Travik is 4123 metres tall. Ilsa Brenner first climbed it in 1911.",
    "zorblat.md": "# Zorblat\n\nEvery March the town of Quenby holds the Zorblat festival.",
    "kessar.txt": "Coins of the Kessari empire were struck from tin and cobalt.",
    "orvel.txt": "The Orvel river floods the plain of Dask every spring.",
}


class Lexical:
    """BM25 over the corpus's documents: a ``query -> list[Document]`` source, best first."""

    def __init__(self, docs: list[Document]) -> None:
        self.docs = docs

    def __call__(self, query: str) -> list[Document]:
        scores = bm25_scores(query, [d.page_content for d in self.docs])
        return [d for _, d in sorted(zip(scores, self.docs), key=lambda pair: -pair[0])]


class TestFusionRetrieverStandard(RetrieversIntegrationTests):
    sources: list = []

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _sources(cls, tmp_path_factory: pytest.TempPathFactory) -> None:
        root: Path = tmp_path_factory.mktemp("fusion-standard")
        (root / "corpus").mkdir()
        for name, text in CORPUS.items():
            (root / "corpus" / name).write_text(text + "\n")
        assert index_path(root / "corpus", root / "store", progress=False).total == len(CORPUS)
        store = open_store(root / "store")
        docs = [Document(text, metadata={"source": name}) for name, text in CORPUS.items()]
        cls.sources = [Lexical(docs), store]

    @property
    def retriever_constructor(self) -> type[FusionRetriever]:
        return FusionRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"sources": self.sources, "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "Who first climbed Mount Travik?"

    def test_both_sources_agree_on_the_best_document(self, retriever: FusionRetriever) -> None:
        """Not a formality: the fused top document is the one both sources rank first."""
        assert retriever.invoke(self.retriever_query_example)[0].metadata["source"].endswith("travik.txt")
