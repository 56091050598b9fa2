"""The Self-RAG graph with the real SmolLM2 GGUF over a real Chroma store of the demo corpus (examples/corpus/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_selfrag import tokens as T
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.retrieval import index_path, open_store

DOCS_DIR = Path(__file__).resolve().parents[2] / "examples" / "corpus"  # what `make demo` indexes
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def docs_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("store")
    index_path(DOCS_DIR, path, progress=False)
    return open_store(path)


@pytest.fixture(scope="module")
def smol(smollm2_gguf):
    from langchain_selfrag.graph.context import default_lm

    return default_lm(str(smollm2_gguf))


def test_smollm2_short_form_adaptive_over_chroma(smol, docs_store) -> None:
    chain = SelfRAGChain.from_retriever(smol, docs_store, k=2, max_new_tokens=8)
    out = chain.invoke("What does the IsSup token measure?")
    p = out["retrieve_probability"]
    assert 0.0 <= p <= 1.0 and out["retrieved"] is (p > 0.2)
    assert not T.find_reflection_tokens(out["answer"])
    if out["retrieved"]:
        assert len(out["passages"]) == 2 and all(d.metadata["source"].endswith(".md") for d in out["passages"])
        assert len(out["trace"]) == 2
        assert all(0.0 <= t["isrel"] <= 1.0 and t["issup"] is not None for t in out["trace"])
        best = max(out["trace"], key=lambda t: t["score"])
        assert best["selected"] or out["abstained"]


def test_smollm2_long_form_always(smol, docs_store) -> None:
    chain = SelfRAGChain.from_retriever(smol, docs_store, mode="always", long_form=True, k=2, beam_width=1,
                                        max_segments=2, max_new_tokens=8)
    out = chain.invoke("How does long-form beam search cite sources?")
    assert out["retrieved"] and out["passages"]
    assert {t["depth"] for t in out["trace"]} <= {0, 1}
    cited = [d for d in out["citations"]]
    for n in range(1, len(cited) + 1):
        assert f"[{n}]" in out["answer"]
