"""``ChatSelfRAG``: a LangChain chat model over a Self-RAG reflection LM.

The conversation becomes one Self-RAG prompt (system messages -> task instruction, earlier turns
-> a transcript before the last user message). The answer runs through the Self-RAG graph (with
retrieval when a ``retriever`` is given), its content is clean text, and the reflection tokens the
model produced, with their probabilities, are in ``response_metadata["reflections"]``, next to the
critique ``trace``, ``citations``, ``retrieved`` and ``abstained``.

>>> chat = ChatSelfRAG(lm=load_reflection_lm("selfrag.gguf"), retriever=store.as_retriever())
>>> chat.invoke("Who wrote Hamlet?").response_metadata["reflections"]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, field_validator

from .chain import SelfRAGChain, _split_answer
from .config import SelfRAGConfig
from .errors import InvalidInputError


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

    lm: a loaded reflection LM; without it, ``model`` (a GGUF path, HF directory or hub id; default:
    the bundled model) is loaded on first use. retriever: optional BaseRetriever / VectorStore.
    settings: SelfRAGConfig fields (mode, k, weights, ...). max_tokens: the segment token budget.
    Decoding is greedy, so ``temperature`` may only be 0 or None. ``timeout`` bounds each retriever
    call. ``api_key``, ``max_retries`` and ``streaming`` are accepted for drop-in compatibility.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    lm: Any = Field(default=None, exclude=True)
    model: str | None = None
    retriever: Any = Field(default=None, exclude=True)
    settings: dict[str, Any] = Field(default_factory=dict)
    temperature: float | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None
    timeout: float | None = None
    max_retries: int = 0
    streaming: bool = False
    api_key: SecretStr | None = None

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

    def _model_name(self) -> str:
        if self.model:
            return self.model
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
            lm = self.lm
            if lm is None:
                from .graph.context import default_lm

                lm = default_lm(self.model)
            settings = dict(self.settings)
            if self.max_tokens:
                settings["max_new_tokens"] = self.max_tokens
            self._chain = SelfRAGChain(lm, self.retriever, SelfRAGConfig.from_mapping(settings),
                                       retriever_timeout=self.timeout or 60.0)
        return self._chain

    def _answer(self, messages: list[BaseMessage], stop: list[str] | None) -> AIMessage:
        out = self.chain().invoke(messages_to_input(messages))
        text = out["answer"]
        for seq in stop or self.stop or []:
            if seq and seq in text:
                text = text[: text.index(seq)]
        selected = [t for t in out["trace"] if t.get("selected")]
        metadata = {
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
        return AIMessage(content=text, response_metadata=metadata)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        message = self._answer(messages, stop)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        message = self._answer(messages, stop)
        pieces = _split_answer(message.text) or [""]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            chunk = ChatGenerationChunk(message=AIMessageChunk(
                content=piece, response_metadata=message.response_metadata if last else {},
                chunk_position="last" if last else None,
            ))
            if run_manager:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk
