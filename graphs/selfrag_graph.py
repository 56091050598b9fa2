"""The Self-RAG graph for ``langgraph dev`` / LangGraph server.

Context is JSON (``ServerContext``): SelfRAGConfig fields plus optional ``model`` and ``store``
paths; without them the nodes load ``$SELFRAG_MODEL`` (or the bundled model) and the Chroma store
at ``$SELFRAG_STORE`` (or ``.selfrag/store``). Invoke with ``{"question": "..."}`` and a
``recursion_limit`` equal to the step budget (64 by default).
"""

from langchain_selfrag.graph import build_graph
from langchain_selfrag.graph.context import ServerContext

graph = build_graph(context_schema=ServerContext).compile(name="selfrag")
