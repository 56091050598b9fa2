"""What ``SelfRAGMiddleware`` keeps in the agent's state: the passages it kept and the retrieval rounds of a run."""

from __future__ import annotations

from typing import Annotated, Any

from langchain.agents.middleware.types import AgentState, PrivateStateAttr
from typing_extensions import NotRequired


def run_list(left: list[Any] | None, right: list[Any] | None) -> list[Any]:
    """A list that grows within a run (parallel tool calls append side by side); None starts it again."""
    if right is None:
        return []
    return [*(left or []), *right]


class SelfRAGAgentState(AgentState):
    """The agent's state with the middleware's two lists, private to it (neither input nor output).

    ``selfrag_passages``: ``{"document", "isrel", "tool", "query"}`` for each passage a retrieval tool
    returned and IsRel kept in this run. ``selfrag_rounds``: ``{"message", "tool", "query",
    "retrieved", "kept", "best_isrel"}`` for each retrieval tool call of this run; ``message`` is the id of
    the model's message that asked for it (one round, whatever number of calls it holds).
    """

    selfrag_passages: NotRequired[Annotated[list[dict[str, Any]], PrivateStateAttr, run_list]]
    selfrag_rounds: NotRequired[Annotated[list[dict[str, Any]], PrivateStateAttr, run_list]]


def _field(state: Any, name: str) -> list[dict[str, Any]]:
    value = state.get(name) if isinstance(state, dict) else getattr(state, name, None)
    return list(value or [])


def rounds_of(state: Any) -> list[dict[str, Any]]:
    return _field(state, "selfrag_rounds")


def passages_of(state: Any) -> list[dict[str, Any]]:
    return _field(state, "selfrag_passages")


def round_count(state: Any) -> int:
    """Retrieval rounds of this run: the model's messages whose retrieval calls ran."""
    return len({r["message"] for r in rounds_of(state)})
