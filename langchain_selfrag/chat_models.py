"""``ChatSelfRAG``: a LangChain chat model over a Self-RAG reflection LM.

The conversation becomes one Self-RAG prompt (system messages -> task instruction, earlier turns
-> a transcript before the last user message). The answer runs through the Self-RAG graph (with
retrieval when a ``retriever`` is given), its content is clean text, and the reflection tokens the
model produced, with their probabilities, are in ``response_metadata["reflections"]``, next to the
critique ``trace``, ``citations``, ``retrieved`` and ``abstained``.

>>> chat = ChatSelfRAG(lm=load_reflection_lm("selfrag.gguf"), retriever=store.as_retriever())
>>> chat.invoke("Who wrote Hamlet?").response_metadata["reflections"]

``stream`` / ``astream`` pass on the answer as ``SelfRAGChain.stream`` gives it: token by token while
it is decoded when it needs no retrieval (and cannot turn into an abstention), else once chosen.
The last chunk carries the ``response_metadata`` and the ``usage_metadata``.

The run's config and callbacks reach the chain, so the graph's runs nest under the chat model's run
(callback handlers, LangSmith). ``usage_metadata`` counts the tokens of every model call the run
made (:mod:`langchain_selfrag.lm.usage`): prompts read, and every candidate segment generated.

A model behind an OpenAI-compatible server (llama.cpp's, vLLM):

>>> chat = ChatSelfRAG(base_url="http://127.0.0.1:8001/v1", api_key="...", timeout=30, max_retries=2)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any
from uuid import UUID, uuid4

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.language_models import LanguageModelInput
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.utils import secret_from_env
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, field_validator

from .chain import SelfRAGChain
from .config import SelfRAGConfig
from .errors import InvalidInputError
from .lm.usage import TokenUsage, counting_tokens


#: The chat model run ``stream`` / ``astream`` opened: langchain-core calls ``_stream`` without its
#: run manager (it reports the chunks itself), so the run's id and config come this way.
_STREAM_RUN: ContextVar[tuple[UUID, RunnableConfig] | None] = ContextVar("selfrag_chat_stream_run", default=None)


def messages_to_input(messages: Sequence[BaseMessage]) -> dict[str, Any]:
    """``{"question", "instruction"}`` for a conversation (the last message must be from the user)."""
    system = [m.text for m in messages if isinstance(m, SystemMessage) and m.text.strip()]
    turns = [m for m in messages if not isinstance(m, SystemMessage)]
    if not turns or not isinstance(turns[-1], HumanMessage):
        raise InvalidInputError("the last message must be a user (human) message")
    if len(turns) == 1:
        question = turns[0].text
    else:
        lines = [f"{'User' if isinstance(m, HumanMessage) else 'Assistant'}: {m.text}" for m in turns]
        question = "\n".join(lines)
    return {"question": question, "instruction": "\n\n".join(system) or None}


class ChatSelfRAG(BaseChatModel):
    """Chat model over a reflection LM, answering through the Self-RAG graph.

    lm: a loaded reflection LM; without it, ``model`` (a GGUF path, HF directory, hub id or server
    URL; default: the bundled model) is loaded on first use. ``base_url``: an OpenAI-compatible
    completions server (``http://host:port/v1``) to use instead, ``model`` then naming the model it
    serves (default: the first it lists); ``api_key`` (default ``$SELFRAG_API_KEY``), ``timeout``
    (seconds per request) and ``max_retries`` go to it (:class:`~langchain_selfrag.lm.remote.RemoteReflectionLM`).
    retriever: optional BaseRetriever / VectorStore. settings: SelfRAGConfig fields (mode, k,
    weights, ...). max_tokens: the segment token budget. Decoding is greedy, so ``temperature`` may
    only be 0 or None. ``timeout`` also bounds each retriever call. ``streaming`` is accepted for
    drop-in compatibility (``stream`` always streams).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    lm: Any = Field(default=None, exclude=True)
    model: str | None = None
    base_url: str | None = None
    retriever: Any = Field(default=None, exclude=True)
    settings: dict[str, Any] = Field(default_factory=dict)
    temperature: float | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None
    timeout: float | None = None
    max_retries: int = 2
    streaming: bool = False
    api_key: SecretStr | None = Field(default_factory=secret_from_env("SELFRAG_API_KEY", default=None))

    _chain: SelfRAGChain | None = PrivateAttr(default=None)

    @field_validator("temperature")
    @classmethod
    def _greedy_only(cls, value: float | None) -> float | None:
        if value not in (None, 0, 0.0):
            raise ValueError("ChatSelfRAG decodes greedily (Self-RAG's setting): temperature must be 0 or None")
        return value

    @field_validator("settings")
    @classmethod
    def _valid_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        SelfRAGConfig.from_mapping(value)
        return value

    @property
    def _llm_type(self) -> str:
        return "selfrag"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self._model_name(), "settings": dict(self.settings), "max_tokens": self.max_tokens}

    @property
    def lc_secrets(self) -> dict[str, str]:
        return {"api_key": "SELFRAG_API_KEY"}

    def _model_name(self) -> str:
        if self.model:
            return self.model
        if self.base_url:
            return self.base_url
        path = getattr(self.lm, "model_path", None)
        return str(path) if path else type(self.lm).__name__ if self.lm is not None else "selfrag-default"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(ls_provider="selfrag", ls_model_name=kwargs.get("model") or self._model_name(),
                                 ls_model_type="chat", ls_temperature=self.temperature)
        if self.max_tokens:
            params["ls_max_tokens"] = self.max_tokens
        if stop or self.stop:
            params["ls_stop"] = stop or self.stop
        return params

    def chain(self) -> SelfRAGChain:
        """The SelfRAGChain behind this chat model (the LM is loaded on first use)."""
        if self._chain is None:
            lm = self.lm if self.lm is not None else self._load_lm()
            settings = dict(self.settings)
            if self.max_tokens:
                settings["max_new_tokens"] = self.max_tokens
            self._chain = SelfRAGChain(lm, self.retriever, SelfRAGConfig.from_mapping(settings),
                                       retriever_timeout=self.timeout or 60.0)
        return self._chain

    def _load_lm(self) -> Any:
        """The model named by ``base_url`` / ``model``: a remote server (with the key, timeout and
        retries), else a local file or hub id (loaded once per path), else the bundled model."""
        from .lm import is_url

        url = self.base_url or (self.model if self.model and is_url(self.model) else None)
        if url:
            from .lm.remote import RemoteReflectionLM

            served = self.model if self.base_url and self.model and not is_url(self.model) else None
            key = self.api_key.get_secret_value() if self.api_key else None
            return RemoteReflectionLM(url, served, timeout=self.timeout or 60.0, max_retries=self.max_retries,
                                      api_key=key)
        from .graph.context import default_lm

        return default_lm(self.model)

    @staticmethod
    def _run_config(run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None,
                    *, is_async: bool = False) -> RunnableConfig:
        """The chain's config: its runs become children of the chat model's run (what a chain's
        ``run_manager.get_child()`` gives, which a model's run manager does not offer)."""
        kind = AsyncCallbackManager if is_async else CallbackManager
        if run_manager is not None:
            child = kind(handlers=[], parent_run_id=run_manager.run_id)
            child.set_handlers(run_manager.inheritable_handlers)
            child.add_tags(run_manager.inheritable_tags)
            child.add_metadata(run_manager.inheritable_metadata)
            return RunnableConfig(callbacks=child)
        if (opened := _STREAM_RUN.get()) is None:
            return RunnableConfig()
        run_id, config = opened
        child = kind.configure(config.get("callbacks"), None, False, config.get("tags"), None, config.get("metadata"))
        child.parent_run_id = run_id
        return RunnableConfig(callbacks=child)

    @staticmethod
    def _open_stream_run(config: RunnableConfig | None) -> tuple[RunnableConfig, Any]:
        """``config`` with the chat model run's id fixed, and the token that closes it again."""
        config = ensure_config(config)
        run_id = config.get("run_id") or uuid4()
        config = RunnableConfig(**{**config, "run_id": run_id})
        return config, _STREAM_RUN.set((run_id, config))

    def stream(self, input: LanguageModelInput, config: RunnableConfig | None = None, *,
               stop: list[str] | None = None, **kwargs: Any) -> Iterator[AIMessageChunk]:
        """As any chat model's; the graph's runs nest under this run (see :meth:`_run_config`)."""
        config, token = self._open_stream_run(config)
        try:
            yield from super().stream(input, config, stop=stop, **kwargs)
        finally:
            _STREAM_RUN.reset(token)

    async def astream(self, input: LanguageModelInput, config: RunnableConfig | None = None, *,
                      stop: list[str] | None = None, **kwargs: Any) -> AsyncIterator[AIMessageChunk]:
        """As any chat model's; the graph's runs nest under this run (see :meth:`_run_config`)."""
        config, token = self._open_stream_run(config)
        try:
            async for chunk in super().astream(input, config, stop=stop, **kwargs):
                yield chunk
        finally:
            _STREAM_RUN.reset(token)

    def _answer(self, messages: list[BaseMessage], stop: list[str] | None,
                run_manager: CallbackManagerForLLMRun | None = None) -> AIMessage:
        with counting_tokens() as usage:
            out = self.chain().invoke(messages_to_input(messages), self._run_config(run_manager))
        cutter = StopCutter(stop or self.stop or [])
        text = cutter.feed(out["answer"]) + cutter.finish()
        return AIMessage(content=text, response_metadata=self._metadata(out),
                         usage_metadata=usage.as_usage_metadata())

    def _metadata(self, out: Mapping[str, Any]) -> dict[str, Any]:
        """``response_metadata`` of an answer: reflections, critiques, citations and why it ended."""
        selected = [t for t in out["trace"] if t.get("selected")]
        return {
            "model_name": self._model_name(),
            "finish_reason": selected[-1].get("stop_reason", "eos") if selected else "abstained",
            "reflections": [r for t in selected for r in t.get("reflections", [])],
            "retrieved": out["retrieved"],
            "retrieve_probability": out["retrieve_probability"],
            "abstained": out["abstained"],
            "abstain_reason": out["abstain_reason"],
            "citations": [{"source": d.metadata.get("source"), "text": d.page_content} for d in out["citations"]],
            "trace": [{k: v for k, v in t.items() if k != "reflections"} for t in out["trace"]],
        }

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        message = self._answer(messages, stop, run_manager)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        cutter, fields, answer = StopCutter(stop or self.stop or []), {}, []
        with counting_tokens() as usage:
            for part in self.chain().stream(messages_to_input(messages), self._run_config(run_manager)):
                if "answer" not in part:
                    fields.update(part)
                    continue
                answer.append(part["answer"])
                if piece := cutter.feed(part["answer"]):
                    yield self._chunk(piece, None, run_manager)
        yield self._chunk(cutter.finish(), self._metadata({**fields, "answer": "".join(answer)}), run_manager, usage)

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        cutter, fields, answer = StopCutter(stop or self.stop or []), {}, []
        with counting_tokens() as usage:
            async for part in self.chain().astream(messages_to_input(messages),
                                                   self._run_config(run_manager, is_async=True)):
                if "answer" not in part:
                    fields.update(part)
                    continue
                answer.append(part["answer"])
                if piece := cutter.feed(part["answer"]):
                    chunk = self._chunk(piece, None, None)
                    if run_manager:
                        await run_manager.on_llm_new_token(piece, chunk=chunk)
                    yield chunk
        chunk = self._chunk(cutter.finish(), self._metadata({**fields, "answer": "".join(answer)}), None, usage)
        if run_manager:
            await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        yield chunk

    @staticmethod
    def _chunk(piece: str, metadata: dict[str, Any] | None,
               run_manager: CallbackManagerForLLMRun | None, usage: TokenUsage | None = None) -> ChatGenerationChunk:
        """A chunk of the answer; the last one (``metadata`` given) carries the response and usage metadata."""
        chunk = ChatGenerationChunk(message=AIMessageChunk(
            content=piece, response_metadata=metadata or {}, chunk_position="last" if metadata is not None else None,
            usage_metadata=usage.as_usage_metadata() if usage is not None else None,
        ))
        if run_manager:
            run_manager.on_llm_new_token(piece, chunk=chunk)
        return chunk


class StopCutter:
    """Cuts a streamed text before the first of the ``stop`` strings, piece by piece.

    :meth:`feed` returns the new text that is certain: up to the first stop string, and holding back
    a tail that may be the start of one. :meth:`finish` returns what was held back (nothing once
    a stop string was seen). Together: the text cut at its earliest stop string.
    """

    def __init__(self, stop: Sequence[str]) -> None:
        self.stop = [s for s in stop if s]
        self.text = ""
        self.sent = 0
        self.stopped = False

    def feed(self, piece: str) -> str:
        if self.stopped:
            return ""
        self.text += piece
        found = [self.text.find(s) for s in self.stop if s in self.text]
        if found:
            self.stopped = True
            ready = min(found)
        else:
            ready = len(self.text) - self._held()
        out = self.text[self.sent : ready]
        self.sent = max(self.sent, ready)
        return out

    def finish(self) -> str:
        if self.stopped:
            return ""
        out, self.sent = self.text[self.sent :], len(self.text)
        return out

    def _held(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of a stop string."""
        longest = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.text)), longest, -1):
                if self.text.endswith(s[:n]):
                    longest = n
                    break
        return longest
