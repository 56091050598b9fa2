"""The models an evaluation loads from the command line: the reflection LM, and a chat model."""

from __future__ import annotations

from typing import Any

from .errors import EvalError


def default_model() -> str:
    """The bundled Self-RAG model (built on first use); an EvalError naming what to install if it cannot be had."""
    from ...errors import ModelLoadError
    from ...graph.context import default_model_path

    try:
        return default_model_path()
    except ModelLoadError as exc:
        raise EvalError(f"{exc}; or pass --model PATH (a .gguf file or an HF model dir)") from exc


def load_model(path: str) -> Any:
    """The reflection LM at ``path`` (patched in tests)."""
    from ...lm import load_reflection_lm

    return load_reflection_lm(path)


def chat_model(spec: str | None, base_url: str | None = None) -> Any:
    """A LangChain chat model from an ``init_chat_model`` spec (needs the ``langchain`` package)."""
    from ...lm.transports import init_chat
    from ...lm.protocol import ReflectionLMError

    if not spec:
        raise EvalError("--judge chat and --splitter llm need --chat-model SPEC")
    try:
        return init_chat(spec, base_url)
    except ReflectionLMError as exc:
        raise EvalError(str(exc)) from exc

