"""The Self-RAG graph for ``langgraph dev`` / LangGraph server.

Start it from this folder (graph paths are relative to it): ``langgraph dev --config langgraph.json``.
Context is JSON (``ServerContext``): SelfRAGConfig fields plus optional ``model``, and ``store`` or
``chroma_url``; without them the nodes load ``$SELFRAG_MODEL`` (a path or a model-server URL; else
the bundled model) and the Chroma server at ``$SELFRAG_CHROMA_URL`` or the store folder at
``$SELFRAG_STORE`` (or ``.selfrag/store``). Invoke with ``{"question": "..."}`` and a
``recursion_limit`` equal to the step budget (64 by default).
"""

from langchain_selfrag.graph import build_graph
from langchain_selfrag.graph.context import ServerContext

graph = build_graph(context_schema=ServerContext).compile(name="selfrag")
