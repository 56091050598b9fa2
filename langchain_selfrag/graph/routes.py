"""The graph's conditional edges: after ``decide_retrieval``, ``rank``, ``correct`` and ``select``.

Each router reads the state and, when it has one, the run's context; none of them changes the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from .context import SelfRAGContext
from .nodes.common import FINAL_STEPS, STEPS_PER_ROUND, context_of, live_beams
from .nodes.corrective import needs_correction
from .state import SelfRAGState


def route_after_decision(state: SelfRAGState) -> str:
    """``retrieve`` when any live beam needs evidence, else ``generate``."""
    return "retrieve" if any(b.get("need_retrieval") for b in live_beams(state)) else "generate"


def route_after_rank(state: SelfRAGState, runtime: Runtime[SelfRAGContext] | None = None) -> str:
    """Another long-form round (``decide_retrieval``), a corrective retrieval round (``correct``,
    short form: see :mod:`langchain_selfrag.graph.nodes.corrective`) or ``select``.

    Stops at ``max_segments``, when no beam is alive, or when the remaining step budget could not
    pay for another round: the loop is bounded twice.
    """
    if runtime is not None:
        if needs_correction(state, context_of(runtime)):
            return "correct"
    cfg = context_of(runtime).config if runtime is not None else None
    long_form = cfg.long_form if cfg else False
    max_segments = cfg.max_segments if cfg else 1
    remaining = state.get("remaining_steps", STEPS_PER_ROUND + FINAL_STEPS + 1)
    if (
        long_form
        and live_beams(state)
        and state.get("depth", 0) < max_segments
        and remaining > STEPS_PER_ROUND + FINAL_STEPS
    ):
        return "decide_retrieval"
    return "select"


def route_after_correct(state: SelfRAGState, runtime: Runtime[SelfRAGContext] | None = None) -> str:
    """``generate`` when the new round found passages; otherwise another round or ``select``."""
    if any(b.get("need_retrieval") and b.get("evidence") for b in state.get("beams") or [] if not b.get("done")):
        return "generate"
    if runtime is not None and needs_correction(state, context_of(runtime)):
        return "correct"
    return "select"


def rho_of(runtime: Runtime[Any] | None) -> float | None:
    """The ``rho`` knob of a run's context (a SelfRAGContext, a JSON dict or None) without loading a model."""
    context = runtime.context if runtime is not None else None
    if isinstance(context, SelfRAGContext):
        return context.config.rho
    if isinstance(context, Mapping):
        return context.get("rho")
    return None


def route_after_select(state: Mapping[str, Any], runtime: Runtime[Any] | None = None) -> str:
    """``abstain`` when ``select`` found a reason not to answer, ``restrain`` when ``rho`` is set, else the end."""
    if state.get("pending_abstain"):
        return "abstain"
    return "restrain" if rho_of(runtime) is not None else "__end__"
