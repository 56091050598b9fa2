"""A LangChain chat model named on the command line: ``provider:model`` (``init_chat_model``'s names)."""

from __future__ import annotations

import os
from typing import Any

from .protocol import ReflectionLMError


def init_chat(spec: str, base_url: str | None = None, **options: Any) -> Any:
    """The chat model ``spec`` names (``openai:gpt-4o-mini``, ``ollama:qwen2.5-coder:1.5b``), talking to
    ``base_url`` when given. An OpenAI-compatible server on ``base_url`` (vLLM, llama.cpp's server) gets the
    key ``none`` when ``OPENAI_API_KEY`` is unset: such servers ask for none.
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
