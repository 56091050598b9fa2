"""Self-restraint at inference: the ``restrain`` graph node
("LLMs can learn self-restraint through iterative self-reflection", Eq. 1-4).

After ``select`` the chosen answer goes through :func:`~langchain_selfrag.restraint.answer.restrain_answer`:
it is split into claims, each claim gets a probability of being true, the claims with ``p > rho``
are kept and ``E[U]`` is computed over them. When nothing is worth saying (no claim kept, so
``E[U] <= 0``; an abstention scores 0) the graph abstains; otherwise the answer becomes the kept
claims: rewritten with P_rewrite when a rewriter is there (the context's ``claim_rewriter``, else
the chat model of an ``LLMClaimSplitter``), otherwise joined as whole sentences (with the default
sentence splitter: the original text of the kept sentences, the first naming its subject when the
sentence before it was dropped). ``rho`` is the ``SelfRAGConfig`` knob (None: the node does nothing).

The claims are judged against the passages the answer used: its citations, else the passages
retrieved for it, else the caller's given passages, else ``k`` passages fetched now for the question
when a retriever is there. Without any, an evidence-based scorer gives every claim its ``fallback``
and ``restraint["note"]`` says so.

The node reads ``question``, ``answer`` and, when present, ``citations``, ``passages``,
``given_passages``, ``trace``, ``prompt``, ``abstained`` and ``pending_abstain``; it works in any
graph whose state has ``question`` and ``answer`` (keys its state lacks are ignored by LangGraph).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.documents import Document
from langgraph.runtime import Runtime

from ...lm.scheduler import BatchScheduler, scheduler_for
from ...restraint.answer import renumber_citations, restrain_answer
from ...restraint.calibration import calibration_for
from ...restraint.claims import LLMClaimSplitter, SentenceSplitter, guess_entity
from ...restraint.rewrite import LLMRewriter
from ...restraint.scoring import IsSupScorer
from ...restraint.utility import lam
from ...retrieval import fetch_documents
from ..context import SelfRAGContext, resolve_context
from .abstain import ABSTAIN_ANSWER
from .common import emit


# -- the pieces ---------------------------------------------------------------------------------
def claim_splitter(ctx: SelfRAGContext) -> Any:
    """The context's ``claim_splitter``, else a :class:`SentenceSplitter`."""
    return ctx.claim_splitter if getattr(ctx, "claim_splitter", None) is not None else SentenceSplitter()


def claim_scorer(ctx: SelfRAGContext) -> Any:
    """The context's ``claim_scorer``, else an :class:`IsSupScorer` over the context's reflection LM,
    calibrated when a calibration was fitted for that very model
    (:func:`~langchain_selfrag.restraint.calibration.calibration_for`)."""
    scorer = getattr(ctx, "claim_scorer", None)
    return scorer if scorer is not None else IsSupScorer(ctx.lm, calibration=calibration_for(ctx.lm))


def claim_rewriter(ctx: SelfRAGContext) -> Any:
    """The context's ``claim_rewriter`` when it has one, else P_rewrite through the chat model of an
    :class:`LLMClaimSplitter`, else None (the kept sentences are joined)."""
    rewriter = getattr(ctx, "claim_rewriter", None)
    if rewriter is not None:
        return rewriter
    splitter = getattr(ctx, "claim_splitter", None)
    return LLMRewriter(splitter.model) if isinstance(splitter, LLMClaimSplitter) else None


def evidence_for(state: Mapping[str, Any], ctx: SelfRAGContext) -> tuple[list[Document], str]:
    """The passages to judge the answer's claims against, and where they came from.

    ``citations``, else ``passages`` (retrieved for the answer), else ``given`` (the input
    passages, first ``k``), else ``retrieved`` (``k`` fetched now for the question), else ``none``.
    """
    for key, label in (("citations", "citations"), ("passages", "passages")):
        docs = [d for d in state.get(key) or [] if isinstance(d, Document)]
        if docs:
            return docs, label
    given = [d for d in state.get("given_passages") or [] if isinstance(d, Document)]
    if given:
        return given[: ctx.config.k], "given"
    if ctx.retriever is not None:
        question = str(state.get("question") or "").strip()
        docs = fetch_documents(ctx.retriever, question, ctx.config.k, timeout=ctx.retriever_timeout) if question else []
        if docs:
            return docs, "retrieved"
    return [], "none"


def answers_so_far(state: Mapping[str, Any]) -> list[str]:
    """The chosen answer and every candidate's text (the samples of self-consistency)."""
    texts = [state.get("answer") or ""] + [t.get("text") or "" for t in state.get("trace") or []
                                            if isinstance(t, Mapping)]
    return [t for t in dict.fromkeys(texts) if t.strip()]


def _scheduled(scorer: Any) -> Any:
    """A scorer that uses a reflection LM calls it through the model's scheduler, never beside it."""
    lm = getattr(scorer, "lm", None)
    if lm is not None and not isinstance(lm, BatchScheduler) and hasattr(lm, "candidate_probs"):
        scorer.lm = scheduler_for(lm)
    return scorer


def _note(source: str, scorer: Any, fallbacks: int) -> str | None:
    if fallbacks <= 0:
        return None
    why = "no passage to judge the claims against" if source == "none" else "the scorer could not judge them"
    return f"{fallbacks} claim(s) got the scorer's fallback p = {getattr(scorer, 'fallback', '?')} ({why})"


def _context(runtime: Runtime[Any] | None) -> SelfRAGContext:
    """The run's context; a SelfRAGContext with its own claim scorer needs no reflection LM loaded."""
    value = runtime.context if runtime is not None else None
    if isinstance(value, SelfRAGContext) and (value.lm is not None or value.claim_scorer is not None):
        return value
    return resolve_context(value)


# -- the node -----------------------------------------------------------------------------------
def restrain(state: Mapping[str, Any], runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Keep only the claims worth saying at target accuracy ``rho``, or abstain (see the module docstring).

    Sets ``claims``, ``expected_utility`` (E[U] over the kept claims; 0.0 on abstention) and
    ``restraint`` (rho, lambda, evidence source and count, scorer, note), and either the kept
    ``answer`` (a long-form answer's ``[n]`` markers and ``citations`` renumbered to the kept
    sentences) or an abstention (``abstained``, ``abstain_reason`` starting with ``restraint:``,
    the abstention answer, no citations). Emits a ``restraint`` stream event. Does nothing when
    ``rho`` is None or the answer is already an abstention.
    """
    ctx = _context(runtime)
    rho = ctx.config.rho
    if rho is None or state.get("pending_abstain") or state.get("abstained"):
        return {}
    question = str(state.get("question") or "")
    entity = guess_entity(question)
    evidence, source = evidence_for(state, ctx)
    splitter, scorer = claim_splitter(ctx), _scheduled(claim_scorer(ctx))
    rewriter = None if ctx.config.long_form else claim_rewriter(ctx)  # a long-form answer keeps its [n] markers
    before = int(getattr(scorer, "fallbacks", 0) or 0)
    result = restrain_answer(state.get("answer") or "", rho=rho, question=question, splitter=splitter,
                             scorer=scorer, evidence=evidence, samples=answers_so_far(state), entity=entity,
                             prompt=state.get("prompt"), rewriter=rewriter)
    info = {"rho": rho, "lambda": lam(rho), "evidence": source, "n_evidence": len(evidence),
            "splitter": type(splitter).__name__, "scorer": type(scorer).__name__,
            "rewriter": type(rewriter).__name__ if rewriter is not None else None,
            "note": _note(source, scorer, int(getattr(scorer, "fallbacks", 0) or 0) - before)}
    emit(runtime, "restraint", claims=result.claims, expected_utility=result.expected_utility,
         abstain_reason=result.abstain_reason, **info)
    update: dict[str, Any] = {"claims": result.claims, "expected_utility": result.expected_utility, "restraint": info}
    if result.abstained:
        trace = [{**t, "selected": False} for t in state.get("trace") or []]
        update.update(answer=ABSTAIN_ANSWER, abstained=True, abstain_reason=result.abstain_reason, citations=[],
                      pending_abstain=result.abstain_reason, trace=trace)
    elif ctx.config.long_form and isinstance(splitter, SentenceSplitter):  # long form cites with [n]
        update["answer"], update["citations"] = renumber_citations(result.answer, state.get("citations") or [])
    else:
        update["answer"] = result.answer
    return update
