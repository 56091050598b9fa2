"""The output contract every SelfRAGChain result keeps, whatever the model."""

from __future__ import annotations

from langchain_core.documents import Document

from langchain_selfrag import tokens as T
from langchain_selfrag.chain import OUTPUT_KEYS


def check_contract(out: dict) -> None:
    assert tuple(out) == OUTPUT_KEYS
    assert isinstance(out["answer"], str) and not T.find_reflection_tokens(out["answer"])
    assert isinstance(out["abstained"], bool) and isinstance(out["retrieved"], bool)
    assert all(isinstance(d, Document) for d in out["passages"] + out["citations"])
    for t in out["trace"]:
        for key in ("passage", "text", "isrel", "issup", "isuse", "seq_prob", "score", "dropped", "selected"):
            assert key in t
