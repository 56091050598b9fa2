"""ChatSelfRAG: the langchain-tests standard unit tests, plus Self-RAG specific behaviour."""

from __future__ import annotations

from langchain_core.documents import Document
from langchain_core.messages import HumanMessage, SystemMessage

from langchain_selfrag import tokens as T
from langchain_selfrag.chat_model import ChatSelfRAG

DOCS = [Document("Paris is the capital of France.", metadata={"source": "france.md", "title": "France"})]


def test_tiny_real_model_reports_reflections(tiny_model_dir) -> None:
    from langchain_selfrag.lm import load_reflection_lm

    chat = ChatSelfRAG(lm=load_reflection_lm(tiny_model_dir), retriever=lambda q: DOCS, max_tokens=6,
                       settings={"mode": "always"})
    msg = chat.invoke([SystemMessage("Answer briefly."), HumanMessage("Capital of France?")])
    assert isinstance(msg.content, str) and not T.find_reflection_tokens(msg.content)
    meta = msg.response_metadata
    assert meta["retrieved"] is True and meta["trace"][0]["isrel"] is not None
    for r in meta["reflections"]:
        assert r["token"] in T.REFLECTION_TOKENS and abs(sum(r["probs"].values())) <= 1.0 + 1e-6
