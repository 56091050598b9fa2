"""Self-RAG for LangChain and LangGraph.

Heavy pieces are imported on first use, so ``import langchain_selfrag`` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "SelfRAGChain": "langchain_selfrag.chain",
    "ChatSelfRAG": "langchain_selfrag.chat_model",
    "SelfRAGConfig": "langchain_selfrag.config",
    "load_reflection_lm": "langchain_selfrag.lm",
    "ReflectionLM": "langchain_selfrag.lm",
    "build_graph": "langchain_selfrag.graph",
    "compile_graph": "langchain_selfrag.graph",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'langchain_selfrag' has no attribute {name!r}")
