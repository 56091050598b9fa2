"""The transports that put conversations to a chat model: through LangChain, or through a backend of this package.

Both answer the two calls :class:`~.chat_reflection.ChatReflectionLM` makes, batched over conversations:

* ``word_probs(conversations, words)``: the probability of each answer word as the reply's first token;
* ``write(conversations, ...)``: the reply text, with its log-probability when the model gives one.

:class:`LangChainTransport` calls any LangChain ``BaseChatModel`` through ``batch`` with a concurrency
limit and reads ``response_metadata["logprobs"]`` (:mod:`.logprobs`); :class:`BackendTransport` runs a
model of this package's backends (a GGUF on llama.cpp, a transformers model, or a completions server) on
the conversation laid out in ChatML and reads the words' probabilities exactly. :func:`init_chat` makes
the LangChain chat model a ``provider:model`` name stands for.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..chatml import chatml
from ..errors import SelfRAGError
from ..questions import Conversation
from .logprobs import MalformedLogprobs, MissingLogprobs, first_token_alternatives, reply_logprob, word_probs
from .protocol import ReflectionLMError
from .scheduler import scheduler_for

__all__ = ["BackendTransport", "ChatModelError", "LangChainTransport", "Written", "chat_model_of", "init_chat"]


class ChatModelError(ReflectionLMError, SelfRAGError):
    """A chat model could not be asked: no log-probabilities, an unreachable server, a malformed reply."""


@dataclass(frozen=True)
class Written:
    """A reply: its text, the sum and count of its tokens' log-probabilities (None when not given), and
    why it ended (``eos``, or ``length`` at the token budget)."""

    text: str
    logprob: float | None = None
    n_tokens: int = 0
    stop_reason: str = "eos"


def chat_model_of(model: Any) -> Any:
    """The ``BaseChatModel`` of ``model`` (itself, or the model a ``.bind(...)`` wraps); None when it is none."""
    from langchain_core.language_models import BaseChatModel

    for _ in range(4):
        if isinstance(model, BaseChatModel):
            return model
        model = getattr(model, "bound", None)
        if model is None:
            return None
    return None


def _family(model: Any) -> str:
    names = {cls.__name__ for cls in type(model).__mro__}
    if "BaseChatOpenAI" in names:
        return "openai"
    if "ChatOllama" in names:
        return "ollama"
    return "other"


#: What turns log-probabilities on, by integration, for the error that says they are missing.
_LOGPROBS_HINT = {
    "openai": "ChatOpenAI(logprobs=True, top_logprobs=10) (this library asks for them per call; a server "
              "that drops them needs its own setting: vLLM and llama.cpp's server return them)",
    "ollama": "ChatOllama(logprobs=True, top_logprobs=10) (Ollama 0.12.11 or later)",
    "other": "the integration's log-probability setting (for example ChatOpenAI(logprobs=True, top_logprobs=10) "
             "or ChatOllama(logprobs=True, top_logprobs=10)): the reply's response_metadata['logprobs'] must "
             "hold the first token's top_logprobs",
}


def model_name_of(model: Any) -> str | None:
    """The model a chat model asks for (``model_name`` / ``model`` / ``model_id``), None when it does not say."""
    return next((getattr(model, a) for a in ("model_name", "model", "model_id") if isinstance(getattr(model, a, None), str)),
                None)


def describe(model: Any) -> str:
    """``ChatOpenAI 'qwen' at http://127.0.0.1:8080/v1``: the class, model name and server of a chat model."""
    name = model_name_of(model)
    server = server_of(model)
    return " ".join([type(model).__name__] + ([repr(name)] if name else []) + ([f"at {server}"] if server else []))


def server_of(model: Any) -> str | None:
    """The server a chat model talks to (``openai_api_base`` / ``base_url``, else the URL its client resolved:
    ``ChatOpenAI`` built without one reads ``$OPENAI_BASE_URL``), None when it does not say."""
    for attr in ("openai_api_base", "base_url", "api_base", "endpoint"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    resolved = getattr(getattr(model, "root_client", None), "base_url", None)
    return str(resolved) if resolved else None


def _compatible_server(model: Any) -> bool:
    """``model`` talks to an OpenAI-compatible server, not OpenAI's own API. ``ChatOpenAI`` renames the token
    limit ``max_completion_tokens``, which llama-cpp-python's server ignores: without ``max_tokens`` in the
    body too, a one-token question is answered at full length, log-probabilities and all."""
    server = server_of(model)
    return bool(server) and "api.openai.com" not in server


class LangChainTransport:
    """Conversations put to a LangChain chat model through ``batch`` (at most ``max_concurrency`` at once).

    Each question asks for one token with the first token's ``top_logprobs`` alternatives; ChatOpenAI
    (and every ``BaseChatOpenAI``: vLLM, llama.cpp's server, Ollama's ``/v1``) and ChatOllama get those
    settings per call, any other integration must be built with them on. Answers are asked with
    ``temperature`` (greedy at 0), ``max_new_tokens`` and their log-probabilities where the integration
    takes them per call.
    """

    def __init__(self, chat_model: Any, *, max_concurrency: int = 4, top_logprobs: int = 10) -> None:
        base = chat_model_of(chat_model)
        if base is None:
            raise TypeError(f"expected a LangChain chat model (BaseChatModel), not {type(chat_model).__name__}")
        if int(max_concurrency) < 1 or not 2 <= int(top_logprobs) <= 20:
            raise ValueError("max_concurrency must be >= 1 and top_logprobs from 2 to 20")
        self.model, self.base = chat_model, base
        self.max_concurrency, self.top_logprobs = int(max_concurrency), int(top_logprobs)
        self.family = _family(base)
        self.name = describe(base)

    def _options(self, *, question: bool, max_tokens: int | None = None, temperature: float | None = None,
                 seed: int | None = None) -> dict[str, Any]:
        if self.family == "other":
            return {}
        # an answer asks for one alternative too: llama.cpp's server returns no log-probabilities without it
        options: dict[str, Any] = {"logprobs": True, "top_logprobs": self.top_logprobs if question else 1}
        if self.family == "openai":
            if max_tokens is not None:
                options["max_tokens"] = max_tokens
                if _compatible_server(self.base):  # ChatOpenAI sends max_completion_tokens, which they may ignore
                    options["extra_body"] = {**(getattr(self.base, "extra_body", None) or {}), "max_tokens": max_tokens}
            if temperature is not None:
                options["temperature"] = temperature
            if seed is not None:
                options["seed"] = seed
        return options

    def _call(self, conversations: Sequence[Conversation], options: dict[str, Any]) -> list[Any]:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        runnable = self.model.bind(**options) if options else self.model
        inputs = [[SystemMessage(system), HumanMessage(user)] for system, user in conversations]
        try:
            replies = runnable.batch(inputs, config={"max_concurrency": self.max_concurrency})
        except Exception as exc:  # noqa: BLE001 - any failure of the integration or its server, said once
            raise ChatModelError(f"{self.name} could not answer: {type(exc).__name__}: {exc}") from exc
        for reply in replies:
            if not isinstance(reply, AIMessage) or not isinstance(reply.content, (str, list)):
                raise ChatModelError(f"{self.name} gave a malformed reply: {reply!r:.200}")
        return replies

    def word_probs(self, conversations: Sequence[Conversation], words: Sequence[Sequence[str]]) -> list[dict[str, float]]:
        """For each conversation, the probability of each of its words as the reply's first token."""
        if not conversations:
            return []
        replies = self._call(conversations, self._options(question=True, max_tokens=1, temperature=0.0))
        out = []
        for reply, group in zip(replies, words):
            try:
                alternatives = first_token_alternatives(reply.response_metadata)
            except MissingLogprobs as exc:
                raise ChatModelError(f"{self.name} returned no token log-probabilities ({exc}); Self-RAG reads "
                                     f"its reflection from them: turn them on with {_LOGPROBS_HINT[self.family]}") from None
            except MalformedLogprobs as exc:
                raise ChatModelError(f"{self.name} gave a malformed reply: {exc}") from None
            out.append(word_probs(alternatives, group))
        return out

    def write(self, conversations: Sequence[Conversation], *, max_new_tokens: int, temperature: float = 0.0,
              seed: int | None = None, on_text: Callable[[int, str], None] | None = None) -> list[Written]:
        """The reply to each conversation (``on_text(i, text)`` is called with each whole reply)."""
        if not conversations:
            return []
        replies = self._call(conversations, self._options(question=False, max_tokens=max_new_tokens,
                                                          temperature=temperature, seed=seed))
        out = []
        for i, reply in enumerate(replies):
            text = reply.text if isinstance(reply.text, str) else str(reply.content)
            try:
                scored = reply_logprob(reply.response_metadata)
            except MalformedLogprobs as exc:
                raise ChatModelError(f"{self.name} gave a malformed reply: {exc}") from None
            meta = reply.response_metadata or {}
            stop = "length" if (meta.get("finish_reason") or meta.get("done_reason")) == "length" else "eos"
            logprob, n_tokens = scored or (None, 0)
            out.append(Written(text.strip(), logprob, n_tokens, stop))
            if on_text is not None and out[-1].text:
                on_text(i, out[-1].text)
        return out


class BackendTransport:
    """Conversations put to a model of this package's backends (a chat GGUF on llama.cpp, a transformers
    model, a completions server), laid out by ``chat`` (ChatML by default: Qwen2.5's and SmolLM2's layout)
    and run through the model's one scheduler.

    The words' probabilities are the model's own (each word's whole tokenization, renormalised over the
    words), not a top-k cut.
    """

    def __init__(self, lm: Any, chat: Callable[[str, str, str], str] = chatml) -> None:
        self.lm = scheduler_for(lm)
        self.chat = chat
        self.name = f"{type(self.lm.lm).__name__} {getattr(self.lm, 'model_path', '')}".strip()

    @property
    def model_path(self) -> Any:
        return getattr(self.lm, "model_path", None)

    def render(self, conversation: Conversation) -> str:
        system, user = conversation
        return self.chat(system, user, "")

    def word_probs(self, conversations: Sequence[Conversation], words: Sequence[Sequence[str]]) -> list[dict[str, float]]:
        """For each conversation, its words' probabilities as the reply's start, renormalised over the words."""
        out: list[dict[str, float]] = [{} for _ in conversations]
        by_words: dict[tuple[str, ...], list[int]] = {}
        for i, group in enumerate(words):
            by_words.setdefault(tuple(group), []).append(i)
        for group, indices in by_words.items():
            probs = self.lm.candidate_probs([self.render(conversations[i]) for i in indices], list(group))
            for i, p in zip(indices, probs):
                total = sum(p.get(w, 0.0) for w in group)
                out[i] = {w: (p.get(w, 0.0) / total if total > 0 else 1.0 / len(group)) for w in group}
        return out

    def write(self, conversations: Sequence[Conversation], *, max_new_tokens: int, temperature: float = 0.0,
              seed: int | None = None, on_text: Callable[[int, str], None] | None = None) -> list[Written]:
        """The reply to each conversation; ``on_text(i, piece)`` streams each reply's text as it is decoded."""
        if not conversations:
            return []
        extra = {"on_token": on_text} if on_text is not None else {}
        gens = self.lm.generate([self.render(c) for c in conversations], max_new_tokens=max_new_tokens,
                                stop_at_retrieval=False, temperature=temperature, seed=seed, **extra)
        return [Written(g.answer, g.cumulative_logprob, len(g.token_ids), "length" if g.stop_reason == "length" else "eos")
                for g in gens]


def init_chat(spec: str, base_url: str | None = None, **options: Any) -> Any:
    """The LangChain chat model ``spec`` names (``openai:gpt-4o-mini``, ``ollama:qwen2.5-coder:1.5b``:
    ``init_chat_model``'s names), talking to ``base_url`` when given. An OpenAI-compatible server on
    ``base_url`` (vLLM, llama.cpp's server) gets the key ``none`` when ``OPENAI_API_KEY`` is unset: such
    servers ask for none.
    """
    if not spec or ":" not in spec:
        raise ReflectionLMError(f"a chat model is named provider:model (openai:gpt-4o-mini, ollama:llama3.2), not {spec!r}")
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        raise ReflectionLMError("a chat model by name needs langchain and the provider's integration: "
                                "pip install 'langchain-selfrag[openai]' (or langchain-ollama for ollama:)") from exc
    if base_url:
        options["base_url"] = base_url
        if spec.startswith("openai:") and not os.environ.get("OPENAI_API_KEY"):
            options.setdefault("api_key", "none")
    try:
        return init_chat_model(spec, **options)
    except Exception as exc:  # noqa: BLE001 - an unknown provider or a missing integration, said once
        raise ReflectionLMError(f"cannot make the chat model {spec!r}: {exc}") from exc
