"""The critique nodes: IsRel, IsSup (and the hard constraint) and IsUse of every candidate."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from ... import scoring as S
from ..context import SelfRAGContext
from ..state import SelfRAGState
from .common import ISREL, context_of, emit


def grade_relevance(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """IsRel of every evidence candidate from its first-position probabilities.

    Candidates without first-position probabilities are scored in one ``candidate_probs`` call;
    if the model still gives none, IsRel is 0. Candidates without evidence get IsRel None. A
    [Continue to Use Evidence] candidate has the probabilities of the segment that retrieved its
    passage (its own prompt does not end with evidence, so it is never asked).
    """
    ctx = context_of(runtime)
    cands = [dict(c) for c in state.get("candidates", [])]
    missing = [c for c in cands if c.get("passage") is not None and not c.get("continued")
               and not any((c.get("first_probs") or {}).values())]
    if missing:
        probs = ctx.lm.candidate_probs([c["prompt"] for c in missing], ISREL)
        for cand, p in zip(missing, probs):
            cand["first_probs"] = dict(p)
    for cand in cands:
        cand["isrel"] = S.isrel_score(cand["first_probs"]) if cand.get("passage") is not None else None
        if cand["isrel"] is not None:
            emit(runtime, "critique", aspect="isrel", candidate=cand["id"], passage=cand["passage"],
                 value=cand["isrel"], probs=cand["first_probs"])
    return {"candidates": cands}


def grade_support(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """IsSup of every evidence candidate; with ``hard_constraints`` drop [No support / Contradictory]."""
    ctx = context_of(runtime)
    cands = [dict(c) for c in state.get("candidates", [])]
    for cand in cands:
        if cand.get("passage") is None:
            cand["issup"] = None
            continue
        probs = cand.get("issup_probs")
        cand["issup"] = S.issup_score(probs)
        cand["dropped"] = bool(ctx.config.hard_constraints and S.violates_hard_constraint(probs))
        emit(runtime, "critique", aspect="issup", candidate=cand["id"], passage=cand["passage"],
             value=cand["issup"], probs=probs, dropped=cand["dropped"])
    return {"candidates": cands}


def grade_utility(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """IsUse of every candidate (0 when the model generated no utility token)."""
    cands = [dict(c) for c in state.get("candidates", [])]
    for cand in cands:
        cand["isuse"] = S.isuse_score(cand.get("isuse_probs"))
        emit(runtime, "critique", aspect="isuse", candidate=cand["id"], passage=cand.get("passage"),
             value=cand["isuse"], probs=cand.get("isuse_probs"))
    return {"candidates": cands}
