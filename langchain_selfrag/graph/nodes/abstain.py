"""When the graph abstains, and the ``abstain`` node that says so.

The rules are functions of the state, the trace and the knobs: ``select`` asks
:func:`reason_to_abstain`; ``generate`` and ``rank`` ask :func:`closed_book_abstains` and
:func:`bars_settled` before they stream anything; the evaluation's threshold sweeps replay
:func:`evidence_reason` offline on the traces of runs that did not abstain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.runtime import Runtime

from ...abstention import DEFAULT_BARS
from ..context import SelfRAGContext
from ..state import SelfRAGState
from .common import emit, has_source

#: Answer text of an abstention (the reason is in ``abstain_reason``).
ABSTAIN_ANSWER = "I cannot answer this reliably from the available sources."


def abstain(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Replace the answer with an explicit abstention and its reason; nothing is cited."""
    reason = state.get("pending_abstain") or "abstained"
    emit(runtime, "abstain", reason=reason)
    trace = [{**t, "selected": False} if t.get("kind", "candidate") == "candidate" else t
             for t in state.get("trace") or []]
    return {"answer": ABSTAIN_ANSWER, "abstained": True, "abstain_reason": reason, "citations": [], "trace": trace}


def reason_to_abstain(state: Mapping[str, Any], ctx: SelfRAGContext, chosen: list[Mapping[str, Any]]) -> str | None:
    """Why ``select`` must not give the ``chosen`` candidates as the answer, or None (see ``select``)."""
    cfg = ctx.config
    trace = candidates_of(state.get("trace") or [])
    if trace and all(c.get("dropped") for c in trace):
        return "every candidate was dropped by the hard constraint ([No support / Contradictory])"
    if not chosen or not any(says_something(c) for c in chosen):
        return "the model produced no answer text"
    if not state.get("retrieval_attempted"):
        return _closed_book_reason(state, ctx)
    if bars_set(cfg):
        return evidence_reason(trace, chosen, bar(cfg, "abstain_isrel"), bar(cfg, "abstain_issup"))
    return None


def bar(cfg: Any, name: str) -> float:
    """The abstention bar ``name`` of ``cfg``; one left at None (the context had no model to take it
    from) is the documented default (:data:`langchain_selfrag.abstention.DEFAULT_BARS`)."""
    value = getattr(cfg, name)
    return DEFAULT_BARS[name] if value is None else float(value)


def bars_set(cfg: Any) -> bool:
    """An abstention bar (``abstain_isrel`` or ``abstain_issup``) is set."""
    return bar(cfg, "abstain_isrel") > 0 or bar(cfg, "abstain_issup") > 0


def retrieved_and_kept(cand: Mapping[str, Any]) -> bool:
    """A candidate generated from a passage and not dropped by the hard constraint."""
    return cand.get("passage") is not None and not cand.get("dropped")


def _closed_book_reason(state: Mapping[str, Any], ctx: SelfRAGContext) -> str | None:
    """Why a closed-book answer is not given (``abstain_closed_book``), or None when it is."""
    if not closed_book_abstains(state, ctx):
        return None
    p = state.get("retrieve_probability")
    why = f" (p(Retrieval) {p:.2f} <= threshold {ctx.config.threshold:g})" if p is not None else ""
    return (f"the model chose to answer without retrieval{why}, and a closed-book answer is not trusted "
            "(abstain_closed_book; set mode='always' to retrieve every time)")


def closed_book_abstains(state: Mapping[str, Any], ctx: SelfRAGContext) -> bool:
    """True when an answer given without retrieval will be an abstention: ``abstain_closed_book`` is
    on, a source was there (retriever or given passages) and the mode let the model choose."""
    cfg = ctx.config
    return cfg.abstain_closed_book and cfg.mode != "never" and has_source(state, ctx)


def candidates_of(trace: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The candidate entries of a trace (without the ``retrieval_round`` entries of corrective retrieval)."""
    return [t for t in trace if t.get("kind", "candidate") == "candidate"]


def answer_support(chosen: Sequence[Mapping[str, Any]]) -> float:
    """IsSup of the selected answer: the lowest IsSup of its candidates generated from a passage
    (long form: its segments; closed set: the candidates aggregated into it); 0 when none was."""
    evidence = [c for c in chosen if c.get("passage") is not None]
    return min((c.get("issup") or 0.0 for c in evidence), default=0.0)


def answer_confidence(chosen: Sequence[Mapping[str, Any]]) -> float | None:
    """The model's confidence that the selected answer is grounded: the lowest IsRel x IsSup of its
    candidates generated from a passage (the probability that the passage is relevant *and* supports
    the answer, read from the two reflection tokens; long form: its weakest segment). None for an
    answer given without evidence. Ranks answers for the risk-coverage curve (``selfrag eval``)."""
    evidence = [c for c in chosen if c.get("passage") is not None]
    if not evidence:
        return None
    return min((c.get("isrel") or 0.0) * (c.get("issup") or 0.0) for c in evidence)


def evidence_reason(trace: Sequence[Mapping[str, Any]], chosen: Sequence[Mapping[str, Any]],
                    isrel_bar: float, issup_bar: float) -> str | None:
    """Why a run that retrieved must abstain at these bars, or None (pure: also used offline by
    the evaluation's threshold sweeps on traces of runs that did not abstain).

    No retrieved (kept) candidate: nothing grounds the answer. Best IsRel over the retrieved
    passages below ``isrel_bar``: no passage is relevant. IsSup of the selected answer
    (:func:`answer_support`) below ``issup_bar``: its passage does not support it. 0 turns a bar off.
    """
    evidence = [c for c in trace if retrieved_and_kept(c)]
    if not evidence:
        return "retrieval found no passages to ground the answer"
    best_rel = max(c.get("isrel") or 0.0 for c in evidence)
    if isrel_bar > 0 and best_rel < isrel_bar:
        return (f"no retrieved passage was judged relevant (best IsRel {best_rel:.2f}; the bar is "
                f"IsRel >= {isrel_bar:g})")
    support = answer_support(chosen)
    if issup_bar > 0 and support < issup_bar:
        return (f"the selected answer is not supported by its passage (IsSup {support:.2f}; the bar is "
                f"IsSup >= {issup_bar:g})")
    return None


def relevance_bar(cfg: Any) -> float:
    """The IsRel a passage needs to count as relevant: ``abstain_isrel``, or when that is 0, the
    model's own judgement (p([Relevant]) > 1/2)."""
    return bar(cfg, "abstain_isrel") if bar(cfg, "abstain_isrel") > 0 else 0.5


def says_something(cand: Mapping[str, Any]) -> bool:
    """True when the candidate's text holds a letter or digit (``":"`` alone is no answer)."""
    return any(ch.isalnum() for ch in cand.get("text") or "")


def _meets_isrel_bar(cand: Mapping[str, Any], cfg: Any) -> bool:
    """A retrieved, kept candidate whose passage reaches ``abstain_isrel``."""
    return retrieved_and_kept(cand) and (cand.get("isrel") or 0.0) >= bar(cfg, "abstain_isrel")


def bars_settled(state: Mapping[str, Any], ctx: SelfRAGContext, trace: Sequence[Mapping[str, Any]]) -> bool:
    """Abstention can no longer make the run abstain: before any retrieval, a closed-book answer
    is given (:func:`closed_book_abstains` is False) and the bars are unset or cannot apply;
    after retrieval, the bars are unset, or only the IsRel bar is set and a candidate of ``trace``
    met it (the trace only grows; the selected answer's IsSup is known only at the end)."""
    cfg = ctx.config
    attempted = state.get("retrieval_attempted")
    if not attempted and closed_book_abstains(state, ctx):
        return False
    if not bars_set(cfg):
        return True
    if bar(cfg, "abstain_issup") <= 0 and any(_meets_isrel_bar(c, cfg) for c in candidates_of(trace)):
        return True
    return not attempted and (cfg.mode == "never" or not has_source(state, ctx))
