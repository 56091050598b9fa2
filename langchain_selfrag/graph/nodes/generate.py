"""The ``generate`` node: one batched call for every (beam, passage) and every beam without evidence.

A short-form answer that is sure to be the final one streams token by token while it is decoded
(:class:`AnswerTokens`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph.runtime import Runtime

from ... import tokens as T
from ...lm.protocol import Generation, ReflectionPoint
from ...lm.scheduler import supported_options, unwrap
from ...passage_budget import EvidenceFitter, FittedPassage
from ...prompts import without_retrieval
from ...scoring import isrel_score
from ...retrieval import passage_heading
from ..context import SelfRAGContext
from ..state import Beam, Candidate, SelfRAGState
from .abstain import bars_set, closed_book_abstains
from .common import ISREL, context_of, emit, live_beams

#: The Retrieve-group token that can end a segment, by the generation's stop reason.
_SEGMENT_ENDS = {"retrieval": (T.RETRIEVAL,), "segment": (T.NO_RETRIEVAL, T.CONTINUE)}


def _continuation_prompt(state: Mapping[str, Any], beam: Beam) -> str:
    """The prompt of a segment without new evidence.

    First segment: ``prompt + [No Retrieval]``. Later: the prefix plus the token that ended the
    previous segment when the model wrote [No Retrieval] or [Continue to Use Evidence];
    ``[No Retrieval]`` after a [Retrieval] stop that got no evidence; nothing after a length stop.
    """
    base = state["prompt"] + beam.get("prefix", "")
    if not beam.get("segments"):
        return without_retrieval(base)
    marker = beam.get("last_marker")
    if marker in (T.NO_RETRIEVAL, T.CONTINUE):
        return base + marker
    if marker == T.RETRIEVAL or beam.get("last_stop") == "retrieval":
        return base + T.NO_RETRIEVAL
    return base


def _has_text(beam: Beam) -> bool:
    return any(seg.get("text") for seg in beam.get("segments") or [])


def _continued_passage(beam: Beam) -> int | None:
    """The passage a [Continue to Use Evidence] segment keeps using (None for other segments)."""
    if beam.get("segments") and beam.get("last_marker") == T.CONTINUE:
        return beam.get("current_passage")
    return None


def _split_marker(gen: Any) -> tuple[str, str | None]:
    """The generated text without the Retrieve-group token that ended the segment, and that token."""
    text = gen.text.rstrip()
    for marker in _SEGMENT_ENDS.get(gen.stop_reason, ()):
        if text.endswith(marker):
            return text[: -len(marker)], marker
    return gen.text, None


def _generate_options(lm: Any, **options: Any) -> dict[str, Any]:
    """The subset of ``options`` that the model's ``generate`` takes (behind its scheduler)."""
    return supported_options(unwrap(lm).generate, options)


def _run_generate(lm: Any, prompts: list[str], cfg: Any, guards: list[bool],
                  first_candidates: Sequence[str] = (),
                  on_token: Callable[[int, str], None] | None = None) -> tuple[list[Any], list[bool]]:
    """One batched ``lm.generate`` call; returns the generations and the guard flag each really got.

    ``on_token`` goes to a model whose ``generate`` takes it (else the answer is not streamed).
    """
    extra = {"on_token": on_token} if on_token is not None else {}
    options = _generate_options(lm, guard=guards, stop_at_segment=cfg.long_form, **extra)
    gens = lm.generate(prompts, max_new_tokens=cfg.max_new_tokens, first_candidates=first_candidates,
                       stop_at_retrieval=cfg.long_form, **options)
    return gens, (list(guards) if "guard" in options else [False] * len(prompts))


def written_passages(isrel: Sequence[Mapping[str, float]], beams: Sequence[Any], top: int | None) -> list[int]:
    """The evidence prompts whose answers are generated: per beam, the ``top`` whose passages have the largest
    IsRel share (all of them when ``top`` is None); in prompt order."""
    if top is None:
        return list(range(len(isrel)))
    by_beam: dict[Any, list[int]] = {}
    for j, beam in enumerate(beams):
        by_beam.setdefault(beam, []).append(j)
    chosen = []
    for group in by_beam.values():
        share = {j: isrel_score(isrel[j]) for j in group}
        chosen += sorted(group, key=lambda j: -share[j])[:top]
    return sorted(chosen)


def _generate_evidence(lm: Any, prompts: list[str], beams: list[Any], cfg: Any) -> tuple[list[Any], list[bool]]:
    """The evidence prompts' generations. With ``write_top``, IsRel of every prompt is read first (prefill only)
    and only the most relevant are generated; the others get an answerless generation carrying that IsRel."""
    guards = [cfg.decoding_guard] * len(prompts)
    if cfg.write_top is None or len(prompts) <= cfg.write_top:
        return _run_generate(lm, prompts, cfg, guards, ISREL)
    isrel = lm.candidate_probs(prompts, list(ISREL))
    chosen = written_passages(isrel, beams, cfg.write_top)
    gens, got = _run_generate(lm, [prompts[j] for j in chosen], cfg, [guards[j] for j in chosen], ISREL)
    out: list[Any] = [None] * len(prompts)
    flags = [False] * len(prompts)
    for j, gen, flag in zip(chosen, gens, got):
        out[j], flags[j] = gen, flag
    for j, gen in enumerate(out):
        if gen is None:
            probs = dict(isrel[j])
            token = T.RELEVANT if isrel_score(probs) >= 0.5 else T.IRRELEVANT
            out[j] = Generation("", [], 0.0, [ReflectionPoint(-1, token, T.Kind.ISREL, probs)], probs, "eos")
    return out, flags


def _candidate(gen: Any, *, beam: Beam, depth: int, passage: int | None, prompt: str, guard: bool = False,
               fitted: FittedPassage | None = None) -> Candidate:
    raw, marker = _split_marker(gen)
    return {
        "beam": beam["id"],
        "depth": depth,
        "passage": passage,
        "prompt": prompt,
        "raw": raw,
        "text": T.strip_reflection_tokens(gen.text).replace("\u200b", ""),
        "n_tokens": len(gen.token_ids),
        "cum_logprob": float(gen.cumulative_logprob),
        "first_probs": dict(gen.first_probs or {}),
        "isrel_token": next((p.token for p in gen.reflections if p.kind is T.Kind.ISREL), None),
        "issup_probs": gen.probs_for(T.Kind.ISSUP),
        "isuse_probs": gen.probs_for(T.Kind.ISUSE),
        "reflections": [
            {"token": p.token, "kind": p.kind.value, "position": p.position, "probs": dict(p.probs)}
            for p in gen.reflections
        ],
        "stop_reason": gen.stop_reason,
        "marker": marker,
        "continued": False,
        "decoding_guard": bool(guard),
        "guarded": int(getattr(gen, "guarded", 0) or 0),
        "truncated": bool(fitted and fitted.truncated),
        "passage_tokens": fitted.tokens if fitted else None,
        "passage_tokens_total": fitted.total if fitted else None,
        "dropped": False,
        "selected": False,
    }


def _continue_evidence(cand: Candidate, beam: Beam) -> None:
    """A [Continue to Use Evidence] candidate takes the IsRel judgement of the segment that retrieved its passage."""
    source = next((s for s in reversed(beam.get("segments") or []) if s.get("passage") == cand["passage"]), {})
    cand["continued"] = True
    cand["first_probs"] = dict(source.get("first_probs") or {})
    cand["isrel_token"] = source.get("isrel_token")


class AnswerTokens:
    """``on_token`` of a streamed short-form answer: ``token`` events carrying the answer's new text.

    The pieces (from :class:`~langchain_selfrag.lm.streaming.AnswerStream`) are cleaned as the candidate
    text is (zero-width spaces out, the whole stripped), and held back until the text has a letter
    or digit: an answer without one is no answer (:func:`.abstain.says_something`) and becomes an
    abstention. Called from the model's thread (the scheduler's worker), it writes through the
    node's own context, where LangGraph's stream writer finds the run's config.
    """

    def __init__(self, writer: Callable[[Any], None]) -> None:
        self.writer = writer
        self.context = contextvars.copy_context()
        self.text = ""
        self.sent = ""

    def __call__(self, index: int, piece: str) -> None:
        self.text += piece.replace("\u200b", "")
        ready = self.text.strip()
        if not any(ch.isalnum() for ch in ready):
            return
        if len(ready) > len(self.sent) and ready.startswith(self.sent):
            new, self.sent = ready[len(self.sent) :], ready
            self.context.run(self.writer, {"event": "token", "text": new})


def _streams_tokens(state: Mapping[str, Any], ctx: SelfRAGContext, n_plain: int, n_evidence: int) -> bool:
    """True when the one plain short-form candidate's text will be the answer once it says something.

    It is then the only candidate; ``select`` gives its text unless it says nothing, retrieval
    was attempted (and found nothing) with abstention bars set, or it is a closed-book answer that
    ``abstain_closed_book`` turns into an abstention; no restraint (``rho``) follows.
    """
    cfg = ctx.config
    attempted = state.get("retrieval_attempted")
    return (not cfg.long_form and cfg.rho is None and n_plain == 1 and n_evidence == 0
            and not (bars_set(cfg) and attempted)
            and not (not attempted and closed_book_abstains(state, ctx)))


def _token_callback(runtime: Runtime[SelfRAGContext] | None) -> AnswerTokens | None:
    writer = runtime.stream_writer if runtime is not None else None
    return AnswerTokens(writer) if writer is not None else None


def generate(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Generate one segment per (beam, passage) in one batched call, and one per beam without evidence.

    Evidence prompts are ``with_evidence(prompt + prefix, title, text)`` and are generated with
    ``first_candidates=([Irrelevant], [Relevant])`` so IsRel comes out of the same pass. Short form
    generates the whole answer; long form stops at the model's ``[Retrieval]`` token and
    (``stop_at_segment``) at its ``[No Retrieval]`` / ``[Continue to Use Evidence]`` after content.
    A beam without new evidence continues from :func:`_continuation_prompt`; after
    [Continue to Use Evidence] its candidate keeps the beam's current passage.

    ``guard`` (``decoding_guard``) is asked for every evidence prompt and for a plain prompt whose
    beam has no answer text yet; each candidate records ``decoding_guard`` and ``guarded``.

    A passage text longer than its token budget (``max_passage_tokens``, by default what fits the
    model's context; see :mod:`langchain_selfrag.passage_budget`) is cut with the model's own
    tokenizer, the title kept; its candidate says ``truncated`` with the kept and total token counts.

    A short-form answer generated without evidence streams as ``token`` events while it is decoded
    when its text is sure to be the final answer (:func:`_streams_tokens`, :class:`AnswerTokens`).
    """
    ctx = context_of(runtime)
    cfg = ctx.config
    depth = state.get("depth", 0)
    passages = state.get("passages") or []
    segments = max(cfg.max_segments - depth, 1) if cfg.long_form else 1
    fitter = EvidenceFitter(ctx.lm, cfg.max_new_tokens, segments=segments, limit=cfg.max_passage_tokens)
    evidence_jobs: list[tuple[Beam, int, str, FittedPassage | None]] = []
    plain_jobs: list[tuple[Beam, str, bool, int | None]] = []
    for beam in live_beams(state):
        if beam.get("need_retrieval") and beam.get("evidence"):
            base = state["prompt"] + beam.get("prefix", "")
            for i in beam["evidence"]:
                doc = passages[i]
                prompt, fitted = fitter.prompt(base, passage_heading(doc), doc.page_content)
                evidence_jobs.append((beam, i, prompt, fitted))
                if fitted is not None and fitted.truncated:
                    emit(runtime, "passage_truncated", depth=depth, beam=beam["id"], passage=i,
                         kept_tokens=fitted.tokens, total_tokens=fitted.total)
        else:
            plain_jobs.append((beam, _continuation_prompt(state, beam),
                               cfg.decoding_guard and not _has_text(beam), _continued_passage(beam)))
    candidates: list[Candidate] = []
    if evidence_jobs:
        gens, guards = _generate_evidence(ctx.lm, [p for _, _, p, _ in evidence_jobs],
                                          [beam["id"] for beam, _, _, _ in evidence_jobs], cfg)
        for (beam, i, prompt, fitted), gen, guard in zip(evidence_jobs, gens, guards):
            candidates.append(_candidate(gen, beam=beam, depth=depth, passage=i, prompt=prompt, guard=guard,
                                         fitted=fitted))
    if plain_jobs:
        stream = _streams_tokens(state, ctx, len(plain_jobs), len(evidence_jobs))
        gens, guards = _run_generate(ctx.lm, [p for _, p, _, _ in plain_jobs], cfg,
                                     [g for _, _, g, _ in plain_jobs],
                                     on_token=_token_callback(runtime) if stream else None)
        for (beam, prompt, _, passage), gen, guard in zip(plain_jobs, gens, guards):
            cand = _candidate(gen, beam=beam, depth=depth, passage=passage, prompt=prompt, guard=guard)
            if passage is not None:
                _continue_evidence(cand, beam)
            candidates.append(cand)
    start = len(state.get("trace") or [])
    for n, cand in enumerate(candidates):
        cand["id"] = start + n
        cand["round"] = state.get("round") or 1
    return {"candidates": candidates}
