"""What every node shares: the run's context, its stream events, the live beams and the step budget."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from ... import tokens as T
from ..context import SelfRAGContext, resolve_context
from ..state import Beam

#: Graph steps one long-form round takes at most (decide, retrieve, generate, 3 graders, rank).
STEPS_PER_ROUND = 7
#: Steps after the last round (select, then abstain or restrain).
FINAL_STEPS = 2

#: The IsRel tokens, read at the first generated position of an evidence prompt.
ISREL = T.GROUPS[T.Kind.ISREL]


def context_of(runtime: Runtime[SelfRAGContext] | None) -> SelfRAGContext:
    """The run's context, completed (:func:`~langchain_selfrag.graph.context.resolve_context`)."""
    return resolve_context(runtime.context if runtime is not None else None)


def emit(runtime: Runtime[SelfRAGContext] | None, event: str, **data: Any) -> None:
    """Send ``{"event": event, **data}`` to the run's stream writer (LangGraph ``custom`` mode), if any."""
    if runtime is not None and runtime.stream_writer is not None:
        runtime.stream_writer({"event": event, **data})


def live_beams(state: Mapping[str, Any]) -> list[Beam]:
    """The beams not finished yet."""
    return [b for b in state.get("beams", []) if not b.get("done")]


def has_source(state: Mapping[str, Any], ctx: SelfRAGContext) -> bool:
    """The run can retrieve: a retriever, or passages given with the question."""
    return ctx.retriever is not None or state.get("given_passages") is not None
