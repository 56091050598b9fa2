"""The ``select`` node: pick the answer, its citations and the public trace, or a reason to abstain."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.runtime import Runtime

from ... import scoring as S
from ...answer_sentence import quoted_answer
from ...lm.protocol import approximation
from ..context import SelfRAGContext
from ..state import SelfRAGState
from .abstain import answer_confidence, reason_to_abstain, says_something
from .citations import cites, segment_texts, short_citations
from .common import context_of, emit
from .corrective import with_round_entries
from .rank import mean_score


def closed_set_key(answer: str, options: Sequence[str] | Mapping[str, str] | None = None) -> str:
    """The answer normalised for closed-set aggregation (an option label when options are given)."""
    norm = re.sub(r"\s+", " ", answer.strip().lower()).strip(" .!?:;,\"'")
    if options:
        items = list(options.items()) if isinstance(options, Mapping) else [
            (chr(ord("A") + i), text) for i, text in enumerate(options)
        ]
        first = re.split(r"[\s:.)]", norm, maxsplit=1)[0] if norm else ""
        for label, _ in items:
            if first == str(label).lower():
                return str(label)
        for label, text in items:
            if text.strip() and text.strip().lower() in norm:
                return str(label)
    return norm


def _public(cand: Mapping[str, Any], selected: set[int], chosen: set[int], approximate: str | None,
            answer: str) -> dict[str, Any]:
    """The trace entry of a candidate. ``chosen``: ``select`` picked it (even when the run then
    abstained); ``selected``: it is in the answer. ``round``: the retrieval round it came from.
    ``approximate``: why the backend's critique probabilities are not the model's own, else None.
    ``answer``: the answer the candidate gives (``text``, or the passage sentence that holds it)."""
    return {
        "passage": cand.get("passage"),
        "text": cand.get("text", ""),
        "answer": answer,
        "isrel": cand.get("isrel"),
        "issup": cand.get("issup"),
        "isuse": cand.get("isuse"),
        "seq_prob": cand.get("seq_prob", 0.0),
        "score": cand.get("score", 0.0),
        "dropped": bool(cand.get("dropped")),
        "selected": cand.get("id") in selected,
        "chosen": cand.get("id") in chosen,
        "round": cand.get("round", 1),
        "depth": cand.get("depth", 0),
        "stop_reason": cand.get("stop_reason"),
        "decoding_guard": bool(cand.get("decoding_guard")),
        "guarded": int(cand.get("guarded") or 0),
        "truncated": bool(cand.get("truncated")),
        "passage_tokens": cand.get("passage_tokens"),
        "passage_tokens_total": cand.get("passage_tokens_total"),
        "reflections": cand.get("reflections", []),
        "approximate": approximate,
    }


def _choose_short(state: Mapping[str, Any], cfg: Any) -> list[Mapping[str, Any]]:
    beams = [b for b in state.get("beams", []) if b.get("segments")]
    cands = [b["segments"][-1] for b in beams]
    with_text = [c for c in cands if says_something(c)] or cands
    if not with_text:
        return []
    if cfg.closed_set:
        options = state.get("options")
        best, _ = S.aggregate_closed_set((closed_set_key(c["text"], options), c["score"]) for c in with_text)
        winners = [c for c in with_text if closed_set_key(c["text"], options) == best]
        return sorted(winners, key=lambda c: c["score"], reverse=True)
    return [max(with_text, key=lambda c: c["score"])]


def quotes_answers(state: Mapping[str, Any], cfg: Any) -> bool:
    """Answers are quoted sentences (``answer_form="sentence"``): short form, no options to choose from."""
    return cfg.answer_form == "sentence" and not cfg.long_form and not cfg.closed_set and not state.get("options")


def candidate_answer(cand: Mapping[str, Any], passages: Sequence[Any], question: str, quote: bool) -> str:
    """What a short-form candidate answers: its text, or with ``quote`` (:func:`quotes_answers`), when it
    cites its passage (:func:`~.citations.cites`), the sentence of that passage that holds its text
    (:func:`~langchain_selfrag.answer_sentence.quoted_answer`)."""
    text = cand.get("text", "")
    index = cand.get("passage")
    if not quote or not isinstance(index, int) or index >= len(passages) or not cites(cand):
        return text
    return quoted_answer(text, passages[index].page_content, question)


def select(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Pick the answer: the best candidate (short form, closed-set aggregated) or the best beam.

    Abstains (via ``pending_abstain``) when every candidate was dropped by the hard constraint, when
    no candidate has answer text, or, if retrieval was attempted, when no retrieved passage reaches
    ``abstain_isrel`` or the selected answer's IsSup is below ``abstain_issup``
    (:func:`.abstain.evidence_reason`). An answer the model chose to give without retrieval is not held to
    the bars; with ``abstain_closed_book`` it is an abstention when a source was there.

    With ``answer_form="sentence"`` a short-form answer from a passage is the sentence of that passage
    that holds the generated text (:func:`candidate_answer`).

    Long-form segments generated from a passage carry ``[n]``, n indexing ``citations`` (from 1),
    when the model judged the passage [Relevant] and the segment not [No support / Contradictory]
    (:func:`.citations.cites`; short form cites by the same rule). Sets ``pending_abstain``
    when the answer must not be given (see :func:`~langchain_selfrag.graph.routes.route_after_select`).
    """
    ctx = context_of(runtime)
    cfg = ctx.config
    passages = state.get("passages") or []
    if cfg.long_form:
        beams = [b for b in state.get("beams", []) if b.get("segments")]
        best = max(beams, key=mean_score) if beams else None
        chosen = list(best["segments"]) if best else []
    else:
        chosen = _choose_short(state, cfg)
    reason = reason_to_abstain(state, ctx, chosen)
    quote = quotes_answers(state, cfg)
    answers: dict[Any, str] = {}  # per candidate id, each computed once (the chosen one is in the trace too)
    for cand in [*(state.get("trace") or []), *chosen[:1]]:
        if cand.get("id") not in answers:
            answers[cand.get("id")] = candidate_answer(cand, passages, state.get("question", ""), quote)
    picked = {c["id"] for c in chosen}
    selected = picked if reason is None else set()
    if cfg.long_form:
        texts, citations = segment_texts(chosen, passages)
    else:
        texts = [answers[c.get("id")] for c in chosen[:1]]
        citations = short_citations(chosen, passages)
    approximate = approximation(ctx.lm)
    trace = [_public(c, selected, picked, approximate, answers[c.get("id")]) for c in state.get("trace") or []]
    trace = with_round_entries(state, ctx, trace)
    emit(runtime, "selection", selected=sorted(selected), abstain_reason=reason)
    return {
        "answer": " ".join(t for t in texts if t).strip(),
        "citations": citations,
        "trace": trace,
        "abstained": False,
        "abstain_reason": None,
        "confidence": answer_confidence(chosen),
        "pending_abstain": reason,
    }
