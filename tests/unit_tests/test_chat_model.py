"""ChatSelfRAG: the langchain-tests standard unit tests, plus Self-RAG specific behaviour."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_tests.unit_tests import ChatModelUnitTests

from langchain_selfrag import tokens as T
from langchain_selfrag.chat_models import ChatSelfRAG, messages_to_input
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

    @property
    def init_from_env_params(self) -> tuple[dict, dict, dict]:
        return {"SELFRAG_API_KEY": "secret-key"}, {"lm": FakeReflectionLM()}, {"api_key": "secret-key"}


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


class RunTree(BaseCallbackHandler):
    """Every run a callback handler sees: run id -> (parent run id, kind, name)."""

    def __init__(self) -> None:
        self.runs: dict[UUID, tuple[UUID | None, str, str]] = {}

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                            **kwargs: Any) -> None:
        self.runs[run_id] = (parent_run_id, "chat_model", kwargs.get("name") or "")

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       **kwargs: Any) -> None:
        self.runs[run_id] = (parent_run_id, "chain", kwargs.get("name") or "")

    def root(self) -> UUID:
        (chat,) = [r for r, (_, kind, _) in self.runs.items() if kind == "chat_model"]
        return chat

    def descends_from(self, run: UUID, ancestor: UUID) -> bool:
        while run is not None:
            if run == ancestor:
                return True
            run = self.runs[run][0] if run in self.runs else None
        return False


@pytest.mark.parametrize("how", ["invoke", "stream", "ainvoke", "astream"])
def test_the_graph_runs_nest_under_the_chat_model_run(how: str) -> None:
    """The chain gets the run's callbacks: a handler sees every graph run below the chat model's run."""
    tree = RunTree()
    chat = ChatSelfRAG(lm=_lm(), retriever=lambda q: DOCS)
    config = {"callbacks": [tree], "tags": ["outer"]}
    if how == "invoke":
        chat.invoke("capital?", config)
    elif how == "stream":
        list(chat.stream("capital?", config))
    elif how == "ainvoke":
        asyncio.run(chat.ainvoke("capital?", config))
    else:
        async def consume() -> None:
            async for _ in chat.astream("capital?", config):
                pass

        asyncio.run(consume())
    chat_run = tree.root()
    assert tree.runs[chat_run][0] is None
    chains = [r for r, (_, kind, _) in tree.runs.items() if kind == "chain"]
    names = {tree.runs[r][2] for r in chains}
    assert {"retrieve", "generate"} <= names  # the graph's nodes, seen by the caller's handler
    assert all(tree.descends_from(r, chat_run) for r in chains)
    assert [tree.runs[r][2] for r in chains if tree.runs[r][0] == chat_run] == ["SelfRAGChain"]


def test_usage_metadata_counts_the_model_calls_of_the_run() -> None:
    """input_tokens: the prompts of every model call; output_tokens: every generated token."""

    class CountingLM(FakeReflectionLM):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.read = self.written = 0
            self.inside = False  # the fake's generate scores first candidates through candidate_probs

        def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
            return list(range(len(text.split()) + int(add_bos)))

        def candidate_probs(self, prompts, candidates):
            if not self.inside:
                self.read += sum(len(self.tokenize(p, add_bos=True)) for p in prompts)
            return super().candidate_probs(prompts, candidates)

        def generate(self, prompts, **kw):
            self.inside = True
            try:
                gens = super().generate(prompts, **kw)
            finally:
                self.inside = False
            self.read += sum(len(self.tokenize(p, add_bos=True)) for p in prompts)
            self.written += sum(len(g.token_ids) for g in gens)
            return gens

    lm = CountingLM(retrieve=0.9, passages={"Paris": FakeSegment("Paris is the capital.", isrel=0.9)})
    chat = ChatSelfRAG(lm=lm, retriever=lambda q: DOCS * 2)
    usage = chat.invoke("What is the capital of France?").usage_metadata
    assert usage == {"input_tokens": lm.read, "output_tokens": lm.written, "total_tokens": lm.read + lm.written}
    assert lm.read > 0 and lm.written > 0
    chunks = list(chat.stream("What is the capital of France?"))
    assert [c.usage_metadata for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1].usage_metadata == {"input_tokens": lm.read // 2, "output_tokens": lm.written // 2,
                                         "total_tokens": (lm.read + lm.written) // 2}


def test_remote_settings_reach_the_remote_model(monkeypatch) -> None:
    from langchain_selfrag.lm import remote

    made: list[tuple[tuple, dict]] = []

    class Recorded:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append((args, kwargs))

    monkeypatch.setattr(remote, "RemoteReflectionLM", Recorded)
    chat = ChatSelfRAG(base_url="http://127.0.0.1:9/v1", model="served", api_key="s3cret", timeout=7.5,
                       max_retries=4)
    chat.chain()
    assert made == [(("http://127.0.0.1:9/v1", "served"), {"timeout": 7.5, "max_retries": 4, "api_key": "s3cret"})]
    ChatSelfRAG(model="http://127.0.0.1:9/v1").chain()  # a URL as the model: the server's first model
    assert made[-1] == (("http://127.0.0.1:9/v1", None), {"timeout": 60.0, "max_retries": 2, "api_key": None})
    assert "s3cret" not in repr(chat) and chat.lc_secrets == {"api_key": "SELFRAG_API_KEY"}
