"""Reflection-token model backends behind one protocol, and ``load_reflection_lm``.

* :mod:`.protocol`: the :class:`ReflectionLM` protocol, its results and errors;
* :mod:`.base`: :class:`ReflectionLMBase`, the logic every backend shares, with
  :mod:`.sampling` (sampled decoding), :mod:`.streaming` (streamed answer text) and
  :mod:`.stopping` (stop rules);
* the backends: :mod:`.llamacpp` (GGUF on llama.cpp), :mod:`.transformers_lm` (Hugging Face
  transformers) and :mod:`.remote` (an OpenAI-compatible completions server);
* :mod:`.scheduler`: one batching scheduler per loaded model;
* :mod:`.chat_reflection`: :class:`ChatReflectionLM`, Self-RAG over any chat model (a LangChain
  ``BaseChatModel`` or a local chat GGUF), each reflection group one question
  (:mod:`langchain_selfrag.questions`) read from the reply's token probabilities (:mod:`.logprobs`),
  put to the model through a transport (:mod:`.transports`);
  :mod:`.question_layout`: :class:`QuestionLayoutLM`, the same questions answered in reflection
  tokens by a model that records the ``chatml-questions`` layout (:func:`load_reflection_lm` returns one).

``__all__`` holds what a user loads (:func:`load_reflection_lm`, :class:`ChatReflectionLM`) or implements
(the protocol, its results and errors, :class:`ReflectionLMBase`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from .base import ReflectionLMBase
from .chat_reflection import ChatReflectionLM
from .protocol import Generation, ReflectionLM, ReflectionLMError, ReflectionPoint
from .question_layout import read_in_its_layout
from .transports import ChatModelError, chat_model_of

Backend = Literal["auto", "llamacpp", "transformers", "openai"]

__all__ = [
    "ChatModelError",
    "ChatReflectionLM",
    "Generation",
    "ReflectionLM",
    "ReflectionLMBase",
    "ReflectionLMError",
    "ReflectionPoint",
    "load_reflection_lm",
]


def is_url(path_or_id: str | os.PathLike) -> bool:
    """True for an ``http://`` or ``https://`` address (a remote completions server)."""
    return isinstance(path_or_id, str) and path_or_id.lower().startswith(("http://", "https://"))


def resolve_backend(path_or_id: str | os.PathLike, backend: Backend = "auto") -> str:
    """``openai`` for an http(s) URL, ``llamacpp`` for a ``.gguf`` file (or a folder holding only
    GGUF weights), else ``transformers``."""
    if backend not in ("auto", "llamacpp", "transformers", "openai"):
        raise ValueError(f"backend must be auto, llamacpp, transformers or openai, not {backend!r}")
    if backend != "auto":
        return backend
    if is_url(path_or_id):
        return "openai"
    path = Path(path_or_id)
    if path.suffix == ".gguf":
        return "llamacpp"
    if path.is_dir() and not (path / "config.json").exists() and any(path.glob("*.gguf")):
        return "llamacpp"
    return "transformers"


def load_reflection_lm(path_or_id: Any, backend: Backend = "auto", **options: Any) -> Any:
    """Load a Self-RAG reflection LM, picking the backend from the path unless told.

    Options go to :class:`LlamaCppReflectionLM`, :class:`TransformersReflectionLM` or, for an
    ``http(s)://host:port/v1`` URL (backend ``openai``), :class:`RemoteReflectionLM`. A LangChain chat
    model (``ChatOpenAI(...)``, ``ChatOllama(...)``, any ``BaseChatModel``) becomes a
    :class:`ChatReflectionLM` that reads each reflection group from its token log-probabilities; the
    options go to it (``writer``, ``write_top``, ``max_concurrency``...). A model that records the
    ``chatml-questions`` prompt layout comes back as a
    :class:`~langchain_selfrag.lm.question_layout.QuestionLayoutLM` over its backend.
    """
    if chat_model_of(path_or_id) is not None:
        return ChatReflectionLM(path_or_id, **options)
    chosen = resolve_backend(path_or_id, backend)
    if chosen == "openai":
        if not is_url(path_or_id):
            raise ReflectionLMError(f"backend 'openai' needs an http(s):// URL, not {str(path_or_id)!r}")
        from .remote import RemoteReflectionLM

        return read_in_its_layout(RemoteReflectionLM(str(path_or_id), **options))
    path = Path(path_or_id)
    looks_local = path.suffix == ".gguf" or str(path_or_id).startswith((".", "/", "~"))
    if looks_local and not path.expanduser().exists():
        raise ReflectionLMError(f"model path does not exist: {path_or_id}")
    if chosen == "llamacpp":
        from .llamacpp import LlamaCppReflectionLM

        if path.is_dir():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) != 1:
                raise ReflectionLMError(f"expected exactly one .gguf file in {path}, found {len(ggufs)}")
            path = ggufs[0]
        return read_in_its_layout(LlamaCppReflectionLM(path, **options))
    from .transformers_lm import TransformersReflectionLM

    return read_in_its_layout(TransformersReflectionLM(path_or_id, **options))
