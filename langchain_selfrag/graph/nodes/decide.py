"""The ``decide_retrieval`` node: does each live beam retrieve before its next segment?"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from ... import scoring as S
from ... import tokens as T
from ..context import SelfRAGContext
from ..state import Beam, SelfRAGState
from .common import context_of, emit, has_source

#: A retrieve decision: (retrieve?, normalised p([Retrieval]) or None, what decided it).
Decision = tuple[bool, float | None, str]


def _first_decision(ctx: SelfRAGContext, state: Mapping[str, Any], can_retrieve: bool) -> Decision:
    cfg = ctx.config
    if not can_retrieve:
        return False, None, "no_source"
    if cfg.mode != "adaptive":
        return cfg.mode == "always", None, "mode"
    probs = ctx.lm.candidate_probs([state["prompt"]], [T.NO_RETRIEVAL, T.RETRIEVAL])[0]
    return S.should_retrieve(probs, cfg.threshold), S.retrieve_probability(probs), "threshold"


def _later_decisions(ctx: SelfRAGContext, state: Mapping[str, Any], beams: list[Beam],
                     can_retrieve: bool) -> dict[int, Decision]:
    """Decisions before a later long-form segment, reading p([Retrieval]) in one batched call."""
    cfg = ctx.config
    if not can_retrieve:
        return {b["id"]: (False, None, "no_source") for b in beams}
    if cfg.mode != "adaptive":
        return {b["id"]: (cfg.mode == "always", None, "mode") for b in beams}
    out: dict[int, Decision] = {b["id"]: (True, None, "token") for b in beams if b.get("last_stop") == "retrieval"}
    asked = [b for b in beams if b["id"] not in out]
    if asked:
        probs = ctx.lm.candidate_probs([state["prompt"] + b.get("prefix", "") for b in asked],
                                       [T.NO_RETRIEVAL, T.RETRIEVAL])
        for beam, p in zip(asked, probs):
            out[beam["id"]] = (S.should_retrieve(p, cfg.threshold), S.retrieve_probability(p), "threshold")
    return out


def decide_retrieval(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Set ``need_retrieval`` on every live beam.

    Modes ``always`` / ``never`` decide alone, at every segment. ``adaptive``: the first segment
    reads ``lm.candidate_probs([prompt], [NO_RETRIEVAL, RETRIEVAL])`` and retrieves iff the
    normalised p([Retrieval]) exceeds ``threshold`` (it becomes ``retrieve_probability``). A later
    (long-form) segment retrieves iff the previous one stopped at the model's own ``[Retrieval]``
    token, or the same normalised probability, read at the beam's continuation point
    (``prompt + prefix``, before the token that ended the previous segment), exceeds ``threshold``;
    the beams that need it are asked in one batched ``candidate_probs`` call. Without a retriever
    and without given passages nothing is retrieved and the model is not asked. Each decision is
    a ``retrieve_decision`` event with its ``probability`` (None when not read) and ``trigger``
    (``threshold``, ``token``, ``mode`` or ``no_source``).
    """
    ctx = context_of(runtime)
    can_retrieve = has_source(state, ctx)
    beams = [dict(b) for b in state.get("beams", [])]
    depth = state.get("depth", 0)
    live = [b for b in beams if not b.get("done")]
    first = [b for b in live if depth == 0 or not b.get("segments")]
    later = [b for b in live if not (depth == 0 or not b.get("segments"))]
    update: dict[str, Any] = {}
    decisions: dict[int, Decision] = {}
    if first:
        decision = _first_decision(ctx, state, can_retrieve)
        if decision[1] is not None:
            update["retrieve_probability"] = decision[1]
        decisions.update((b["id"], decision) for b in first)
    if later:
        decisions.update(_later_decisions(ctx, state, later, can_retrieve))
    for beam in live:
        need, probability, trigger = decisions[beam["id"]]
        beam["need_retrieval"] = bool(need and can_retrieve)
        emit(runtime, "retrieve_decision", depth=depth, beam=beam["id"], retrieve=beam["need_retrieval"],
             probability=probability, trigger=trigger, mode=ctx.config.mode)
    update["beams"] = beams
    return update
