"""Self-RAG inside LangChain agents: :class:`SelfRAGMiddleware` for ``langchain.agents.create_agent``.

>>> from langchain.agents import create_agent
>>> from langchain_selfrag.agents import SelfRAGMiddleware
>>> agent = create_agent(model, tools=[retriever_tool], middleware=[SelfRAGMiddleware(lm)])

It needs ``langchain`` (the ``agents`` extra). :mod:`.middleware` holds the hooks, :mod:`.critique` the
reflection asked and the verdicts, :mod:`.tools` the agent's retrieval tools, :mod:`.state` what the
middleware keeps in the agent's state.
"""

from __future__ import annotations

try:
    import langchain.agents.middleware  # noqa: F401 - the agents API this package plugs into
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("langchain_selfrag.agents needs langchain's agents: pip install 'langchain-selfrag[agents]'"
                      ) from exc

from .middleware import SelfRAGMiddleware, abstention
from .state import SelfRAGAgentState

__all__ = ["SelfRAGAgentState", "SelfRAGMiddleware", "abstention"]
