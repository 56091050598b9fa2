"""ChatSelfRAG: the langchain-tests standard unit tests, plus Self-RAG specific behaviour."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_tests.unit_tests import ChatModelUnitTests

from langchain_selfrag import tokens as T
from langchain_selfrag.chat_model import ChatSelfRAG, messages_to_input
from langchain_selfrag.errors import InvalidInputError
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment

DOCS = [Document("Paris is the capital of France.", metadata={"source": "france.md", "title": "France"})]


class TestChatSelfRAGStandard(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ChatSelfRAG]:
        return ChatSelfRAG

    @property
    def chat_model_params(self) -> dict:
        return {"lm": FakeReflectionLM(), "model": "fake-selfrag"}


def _lm() -> FakeReflectionLM:
    return FakeReflectionLM(retrieve=0.9, passages={"Paris": FakeSegment("Paris is the capital.", isrel=0.9)})


def test_content_is_clean_and_reflections_are_in_metadata() -> None:
    chat = ChatSelfRAG(lm=_lm(), retriever=lambda q: DOCS)
    msg = chat.invoke("What is the capital of France?")
    assert msg.content == "Paris is the capital."
    assert not T.find_reflection_tokens(msg.content)
    meta = msg.response_metadata
    tokens = [r["token"] for r in meta["reflections"]]
    assert tokens == [T.RELEVANT, T.FULLY_SUPPORTED, T.UTILITY[4]]
    assert meta["reflections"][0]["probs"][T.RELEVANT] == pytest.approx(0.9)
    assert meta["retrieved"] is True and meta["retrieve_probability"] == pytest.approx(0.9)
    assert meta["citations"] == [{"source": "france.md", "text": DOCS[0].page_content}]


def test_without_retriever_answers_without_retrieval() -> None:
    lm = FakeReflectionLM(retrieve=0.9, no_retrieval=FakeSegment("Just an answer.", isuse=4))
    msg = ChatSelfRAG(lm=lm).invoke("hi")
    assert msg.content == "Just an answer."
    assert msg.response_metadata["retrieved"] is False
    assert [r["token"] for r in msg.response_metadata["reflections"]] == [T.UTILITY[3]]


def test_stream_concatenates_to_invoke_and_stop_truncates() -> None:
    chat = ChatSelfRAG(lm=_lm(), retriever=lambda q: DOCS)
    chunks = list(chat.stream("capital?"))
    assert "".join(c.content for c in chunks) == chat.invoke("capital?").content
    assert chunks[-1].response_metadata["reflections"]
    assert ChatSelfRAG(lm=_lm(), retriever=lambda q: DOCS, stop=["capital"]).invoke("q").content == "Paris is the "


def test_messages_become_instruction_and_transcript() -> None:
    msgs = [SystemMessage("Answer briefly."), HumanMessage("Hi"), AIMessage("Hello"), HumanMessage("Capital?")]
    assert messages_to_input(msgs) == {"question": "User: Hi\nAssistant: Hello\nUser: Capital?",
                                       "instruction": "Answer briefly."}
    with pytest.raises(InvalidInputError):
        messages_to_input([HumanMessage("a"), AIMessage("b")])


def test_rejects_sampling_temperature() -> None:
    with pytest.raises(ValueError, match="greedily"):
        ChatSelfRAG(lm=_lm(), temperature=0.7)
