"""Self-RAG for LangChain and LangGraph.

Heavy pieces are imported on first use, so ``import langchain_selfrag`` stays fast.
"""

from __future__ import annotations

from importlib import import_module, metadata
from typing import Any

try:
    __version__ = metadata.version("langchain-selfrag")
except metadata.PackageNotFoundError:  # a checkout on sys.path that was never installed
    __version__ = ""

_LAZY = {
    "SelfRAGChain": "langchain_selfrag.chain",
    "ChatSelfRAG": "langchain_selfrag.chat_models",
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
