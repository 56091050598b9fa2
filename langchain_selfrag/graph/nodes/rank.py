"""The ``rank`` node: score every candidate and expand the beams.

In long form it also streams each segment that every beam now shares (so every answer starts
with it) as a ``segment`` event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.runtime import Runtime

from ... import scoring as S
from ..context import SelfRAGContext
from ..state import Beam, SelfRAGState
from .abstain import bars_settled, says_something
from .citations import segment_texts
from .common import context_of, emit


def mean_score(beam: Mapping[str, Any]) -> float:
    """The beam's mean segment score (-inf while it has no segment)."""
    n = len(beam.get("segments") or [])
    return beam.get("score_sum", 0.0) / n if n else float("-inf")


def rank(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Score every candidate, ``f = p(y) + w_rel IsRel + w_sup IsSup + w_use IsUse``, and expand the beams.

    Short form keeps one finished beam per candidate (the answers ranked by score); long form keeps
    the ``beam_width`` best beams by mean segment score. In long form a beam whose segment stopped
    at end of sequence is finished; one that stopped at a Retrieve-group token (``retrieval``,
    ``segment``) or at ``length`` goes on until ``max_segments``. The candidates join ``trace``.
    """
    ctx = context_of(runtime)
    cfg = ctx.config
    cands = [dict(c) for c in state.get("candidates", [])]
    for cand in cands:
        cand["seq_prob"] = S.sequence_probability(cand["cum_logprob"], cand["n_tokens"])
        cand["score"] = S.segment_score(cand["seq_prob"], cand.get("isrel") or 0.0, cand.get("issup") or 0.0,
                                        cand.get("isuse") or 0.0, cfg.weights)
        emit(runtime, "score", candidate=cand["id"], passage=cand.get("passage"), score=cand["score"],
             seq_prob=cand["seq_prob"], dropped=cand.get("dropped", False))
    depth = state.get("depth", 0) + 1
    old = {b["id"]: b for b in state.get("beams", [])}
    pool = [b for b in state.get("beams", []) if b.get("done") and b.get("segments")]
    next_id = max(old, default=0) + 1
    children: set[int] = set()
    for cand in cands:
        if cand.get("dropped"):
            continue
        parent = old[cand["beam"]]
        children.add(parent["id"])
        beam: Beam = {
            "id": next_id,
            # Everything after the question prompt: earlier segments with their evidence, this one's too.
            "prefix": cand["prompt"][len(state["prompt"]):] + cand["raw"],
            "segments": [*parent.get("segments", []), cand],
            "score_sum": parent.get("score_sum", 0.0) + cand["score"],
            "done": (not cfg.long_form) or cand["stop_reason"] == "eos" or depth >= cfg.max_segments,
            "need_retrieval": False,
            "evidence": [],
            "last_stop": cand["stop_reason"],
            "last_marker": cand.get("marker"),
            "current_passage": cand["passage"] if cand.get("passage") is not None else parent.get("current_passage"),
        }
        next_id += 1
        pool.append(beam)
    # A live beam whose every continuation was dropped ends where it is.
    pool.extend({**b, "done": True} for b in old.values()
                if not b.get("done") and b.get("segments") and b["id"] not in children)
    pool.sort(key=mean_score, reverse=True)
    if cfg.long_form:
        pool = pool[: cfg.beam_width]
    trace = [*(state.get("trace") or []), *cands]
    if cfg.long_form:
        _emit_settled(state, runtime, ctx, pool, trace)
    return {"candidates": cands, "beams": pool, "depth": depth, "trace": trace}


def _shared_segments(beams: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The leading segments every beam with segments has (the same candidates), in order."""
    lists = [b["segments"] for b in beams if b.get("segments")]
    if not lists:
        return []
    n = 0
    while all(len(segs) > n for segs in lists) and len({segs[n]["id"] for segs in lists}) == 1:
        n += 1
    return list(lists[0][:n])


def _settled_answers(state: Mapping[str, Any], ctx: SelfRAGContext, beams: Sequence[Mapping[str, Any]],
                     trace: Sequence[Mapping[str, Any]]) -> list[str]:
    """Long form: the answer text after each segment every beam shares, as ``select`` will write it.

    Empty while the run could still abstain or rewrite the answer: with ``rho`` set, before the
    abstention bars are sure to be met (:func:`.abstain.bars_settled`), or while the shared segments say
    nothing (an answer without a letter or digit is an abstention).
    """
    cfg = ctx.config
    if not cfg.long_form or cfg.rho is not None or not bars_settled(state, ctx, trace):
        return []
    shared = _shared_segments(beams)
    if not any(says_something(c) for c in shared):
        return []
    texts, _ = segment_texts(shared, state.get("passages") or [])
    answers, parts = [], []
    for text in texts:
        if text:
            parts.append(text)
        answers.append(" ".join(parts).strip())
    return answers


def _emit_settled(state: Mapping[str, Any], runtime: Runtime[SelfRAGContext] | None, ctx: SelfRAGContext,
                  beams: Sequence[Mapping[str, Any]], trace: Sequence[Mapping[str, Any]]) -> None:
    """A ``segment`` event for each segment that became shared by every beam in this round.

    ``text`` is what the segment adds to the answer (its separating space and ``[n]`` marker included),
    ``index`` its position in the answer. What the previous round sent is recomputed from the state.
    """
    before = _settled_answers(state, ctx, state.get("beams") or [], state.get("trace") or [])
    after = _settled_answers(state, ctx, beams, trace)
    for n in range(len(before), len(after)):
        previous = after[n - 1] if n else ""
        emit(runtime, "segment", text=after[n][len(previous) :], index=n)
