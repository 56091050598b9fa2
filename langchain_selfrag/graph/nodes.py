"""The Self-RAG graph nodes and routers (paper seed 000, Algorithm 1 and section 3.3).

Every node has the signature ``node(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict``
and returns a partial state update, so it can be used in any LangGraph graph whose state has the
keys it reads. Critique events go to ``runtime.stream_writer`` (LangGraph ``custom`` stream mode)
as dicts with an ``"event"`` key; they never enter the answer.

Control flow reads probabilities and ``Generation.stop_reason`` only, never decoded text.

Documented fallbacks for models that emit malformed or missing reflection tokens:

* no IsRel probabilities at the first generated position -> scored with ``lm.candidate_probs``;
  if that is also empty, IsRel = 0 (irrelevant);
* no IsSup token after an evidence segment -> IsSup = 0 (the paper's rule) and no hard-constraint
  drop; no IsUse token -> IsUse = 0;
* a candidate whose text is empty once reflection tokens are stripped is never selected while
  another has text; if none has text the graph abstains;
* an LM whose ``generate`` does not take ``guard`` / ``stop_at_segment`` (an older backend) is
  called without them; its candidates record ``decoding_guard`` False.

Streaming: a short-form answer generated without evidence whose text is sure to become the final
answer goes out token by token as ``{"event": "token", "text": piece}`` while it is decoded (see
:class:`AnswerTokens`); in long form each segment that every beam shares, and so every answer will
start with, goes out as ``{"event": "segment", "text": piece, "index": n}`` from ``rank``. The
pieces concatenate to a prefix of the final ``answer``; nothing is streamed when the run could
still abstain or rewrite the answer (self-restraint).

Long form (paper section 3.3): a segment ends at the model's next Retrieve-group token
([Retrieval], [No Retrieval], [Continue to Use Evidence]), at end of sequence or at
``max_new_tokens``. The retrieve decision is taken again before every segment, evidence is
fetched again for it (given passages are re-ranked against the segment query), and a
[Continue to Use Evidence] segment keeps the beam's current passage.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.runtime import Runtime, get_runtime

from .. import scoring as S
from .. import tokens as T
from ..errors import EmptyQuestionError, InvalidInputError, QuestionTooLongError
from ..lm.base import approximation
from ..lm.scheduler import supported_options, unwrap
from ..passage_budget import EvidenceFitter, FittedPassage, check_prompt_fits
from ..prompts import build_instruction, format_prompt, without_retrieval
from ..rerank import rerank
from ..retrieval import afetch_documents, document_title, fetch_documents
from .context import SelfRAGContext, resolve_context
from .state import Beam, Candidate, SelfRAGState

#: Answer text of an abstention (the reason is in ``abstain_reason``).
ABSTAIN_ANSWER = "I cannot answer this reliably from the available sources."
#: Graph steps one long-form round takes at most (decide, retrieve, generate, 3 graders, rank).
STEPS_PER_ROUND = 7
#: Steps after the last round (select, then abstain or restrain).
FINAL_STEPS = 2

ISREL = T.GROUPS[T.Kind.ISREL]


def _ctx(runtime: Runtime[SelfRAGContext] | None) -> SelfRAGContext:
    return resolve_context(runtime.context if runtime is not None else None)


def _emit(runtime: Runtime[SelfRAGContext] | None, event: str, **data: Any) -> None:
    if runtime is not None and runtime.stream_writer is not None:
        runtime.stream_writer({"event": event, **data})


def _alive(state: Mapping[str, Any]) -> list[Beam]:
    return [b for b in state.get("beams", []) if not b.get("done")]


# -- prepare ------------------------------------------------------------------------------------
def prepare(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Validate the question, build the Self-RAG prompt and reset the search.

    Raises EmptyQuestionError, QuestionTooLongError or InvalidInputError on bad input, and
    QuestionExceedsContextError (before any decoding) when the prompt plus ``max_new_tokens`` per
    segment cannot fit the model's context even without passages.
    """
    ctx = _ctx(runtime)
    question = state.get("question")
    if not isinstance(question, str):
        raise InvalidInputError(f"question must be a string, not {type(question).__name__}")
    if not question.strip():
        raise EmptyQuestionError("the question is empty")
    if len(question) > ctx.max_question_chars:
        raise QuestionTooLongError(len(question), ctx.max_question_chars)
    instruction = state.get("instruction")
    if instruction is not None and not isinstance(instruction, str):
        raise InvalidInputError("instruction must be a string or None")
    options = state.get("options")
    if options is not None and not isinstance(options, (list, tuple, Mapping)):
        raise InvalidInputError("options must be a list of strings, a dict of label -> text, or None")
    given = state.get("passages")
    if given is not None:
        if not isinstance(given, (list, tuple)) or not all(isinstance(d, Document) for d in given):
            raise InvalidInputError("passages must be a list of langchain Document objects")
        given = list(given)
    # build_instruction neutralises the question and options; the instruction is untrusted too.
    task = T.neutralise(instruction) if instruction else None
    prompt = format_prompt(build_instruction(question.strip(), task, options or None))
    segments = ctx.config.max_segments if ctx.config.long_form else 1
    check_prompt_fits(ctx.lm, prompt, ctx.config.max_new_tokens, segments=segments)
    root: Beam = {"id": 0, "prefix": "", "segments": [], "score_sum": 0.0, "done": False,
                  "need_retrieval": False, "evidence": [], "last_stop": None, "last_marker": None,
                  "current_passage": None}
    return {
        "prompt": prompt,
        "given_passages": given,
        "passages": [],
        "beams": [root],
        "candidates": [],
        "depth": 0,
        "trace": [],
        "retrieved": False,
        "retrieval_attempted": False,
        "retrieve_probability": None,
        "answer": "",
        "abstained": False,
        "abstain_reason": None,
        "pending_abstain": None,
        "citations": [],
        "claims": [],
        "expected_utility": None,
        "restraint": None,
    }


# -- decide retrieval ---------------------------------------------------------------------------
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
    ctx = _ctx(runtime)
    can_retrieve = _has_source(state, ctx)
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
        _emit(runtime, "retrieve_decision", depth=depth, beam=beam["id"], retrieve=beam["need_retrieval"],
              probability=probability, trigger=trigger, mode=ctx.config.mode)
    update["beams"] = beams
    return update


def route_after_decision(state: SelfRAGState) -> str:
    """``retrieve`` when any live beam needs evidence, else ``generate``."""
    return "retrieve" if any(b.get("need_retrieval") for b in _alive(state)) else "generate"


# -- retrieve -----------------------------------------------------------------------------------
def _doc_key(doc: Document) -> tuple[str, str]:
    return doc.page_content, str(doc.metadata.get("source", ""))


def _query(state: Mapping[str, Any], beam: Beam) -> str:
    segments = beam.get("segments") or []
    query = state["question"].strip()
    if segments and segments[-1].get("text"):
        query = f"{query}\n{segments[-1]['text']}"
    return query


def _plan_retrieval(state: Mapping[str, Any]) -> tuple[list[Beam], list[str | None], list[str]]:
    """Beam copies, each beam's query (None: no retrieval) and the distinct queries to send."""
    beams = [dict(b) for b in state.get("beams", [])]
    queries = [_query(state, b) if not b.get("done") and b.get("need_retrieval") else None for b in beams]
    distinct = [] if state.get("given_passages") is not None else list(dict.fromkeys(q for q in queries if q))
    return beams, queries, distinct


def _given_for(given: Sequence[Document], beam: Beam, query: str, k: int) -> list[Document]:
    """Given passages for one beam: the caller's first ``k`` for the first segment; for a later one
    the ``k`` that best match the segment query (BM25 over all of them, ties in the given order)."""
    if not beam.get("segments"):
        return list(given[:k])
    texts = [f"{document_title(d)}\n{d.page_content}" for d in given]
    return [given[i] for i in rerank(query, texts, k)]


def add_passages(passages: list[Document], index: dict[tuple[str, str], int], docs: Sequence[Document]) -> list[int]:
    """Append the documents not seen yet to ``passages`` (``index``: their keys); return the
    positions of ``docs`` in ``passages``, each once, in order."""
    evidence: list[int] = []
    for doc in docs:
        key = _doc_key(doc)
        if key not in index:
            index[key] = len(passages)
            passages.append(doc)
        if index[key] not in evidence:
            evidence.append(index[key])
    return evidence


def _attach_evidence(state: Mapping[str, Any], runtime: Runtime[SelfRAGContext] | None, k: int, beams: list[Beam],
                     queries: list[str | None], found: Mapping[str, list[Document]]) -> dict[str, Any]:
    passages = list(state.get("passages") or [])
    index = {_doc_key(d): i for i, d in enumerate(passages)}
    given = state.get("given_passages")
    for beam, query in zip(beams, queries):
        if query is None:
            continue
        docs = _given_for(given, beam, query, k) if given is not None else found[query]
        evidence = add_passages(passages, index, docs)
        beam["evidence"] = evidence
        if not evidence:
            beam["need_retrieval"] = False
        _emit(runtime, "retrieval", depth=state.get("depth", 0), beam=beam["id"], query=query,
              passages=[passages[i].page_content[:200] for i in evidence])
    return {"beams": beams, "passages": passages, "retrieved": True, "retrieval_attempted": True}


def retrieve(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Fetch ``k`` passages for each beam that needs them.

    The query is the question for the first segment and the question plus the previous segment
    afterwards; each distinct query is sent once. Given passages (input ``passages``) replace the
    retriever: the first segment takes the first ``k``, a later one the ``k`` that match its query
    best (:func:`langchain_selfrag.rerank.rerank`). Passages are collected, without duplicates,
    in ``passages``; each beam keeps the indices of its evidence. A beam whose retrieval finds
    nothing falls back to generation without retrieval. :func:`aretrieve` is the same node for
    async runs.
    """
    ctx = _ctx(runtime)
    beams, queries, distinct = _plan_retrieval(state)
    found = {q: fetch_documents(ctx.retriever, q, ctx.config.k, timeout=ctx.retriever_timeout) for q in distinct}
    return _attach_evidence(state, runtime, ctx.config.k, beams, queries, found)


async def aretrieve(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Async :func:`retrieve`: the distinct queries go to the retriever concurrently (``afetch_documents``)."""
    ctx = _ctx(runtime)
    beams, queries, distinct = _plan_retrieval(state)
    tasks = [asyncio.ensure_future(afetch_documents(ctx.retriever, q, ctx.config.k, timeout=ctx.retriever_timeout))
             for q in distinct]
    try:
        results = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    return _attach_evidence(state, runtime, ctx.config.k, beams, queries, dict(zip(distinct, results)))


class SyncAsyncNode(Runnable[Any, dict[str, Any]]):
    """A graph node with a sync and an async function of ``(state, runtime)``.

    LangGraph calls ``invoke`` when the graph runs sync and ``ainvoke`` under ``ainvoke`` /
    ``astream``; both read the run's ``Runtime`` with ``langgraph.runtime.get_runtime``.
    """

    def __init__(self, name: str, func: Callable[..., dict[str, Any]],
                 afunc: Callable[..., Awaitable[dict[str, Any]]]) -> None:
        self.name = name
        self.func = func
        self.afunc = afunc

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return self.func(input, get_runtime())

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return await self.afunc(input, get_runtime())


#: The ``retrieve`` node as the graph adds it: :func:`retrieve` in sync runs, :func:`aretrieve` in async ones.
retrieve_node = SyncAsyncNode("retrieve", retrieve, aretrieve)


# -- generate -----------------------------------------------------------------------------------
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

    The pieces (from :class:`~langchain_selfrag.lm.base.AnswerStream`) are cleaned as the candidate
    text is (zero-width spaces out, the whole stripped), and held back until the text has a letter
    or digit: an answer without one is no answer (:func:`_says_something`) and becomes an
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


def _bars_set(cfg: Any) -> bool:
    return cfg.abstain_isrel > 0 or cfg.abstain_issup > 0


def _streams_tokens(state: Mapping[str, Any], ctx: SelfRAGContext, n_plain: int, n_evidence: int) -> bool:
    """True when the one plain short-form candidate's text will be the answer once it says something.

    It is then the only candidate; ``select`` gives its text unless it says nothing, retrieval
    was attempted (and found nothing) with abstention bars set, or it is a closed-book answer that
    ``abstain_closed_book`` turns into an abstention; no restraint (``rho``) follows.
    """
    cfg = ctx.config
    attempted = state.get("retrieval_attempted")
    return (not cfg.long_form and cfg.rho is None and n_plain == 1 and n_evidence == 0
            and not (_bars_set(cfg) and attempted)
            and not (not attempted and _closed_book_abstains(state, ctx)))


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
    ctx = _ctx(runtime)
    cfg = ctx.config
    depth = state.get("depth", 0)
    passages = state.get("passages") or []
    segments = max(cfg.max_segments - depth, 1) if cfg.long_form else 1
    fitter = EvidenceFitter(ctx.lm, cfg.max_new_tokens, segments=segments, limit=cfg.max_passage_tokens)
    evidence_jobs: list[tuple[Beam, int, str, FittedPassage | None]] = []
    plain_jobs: list[tuple[Beam, str, bool, int | None]] = []
    for beam in _alive(state):
        if beam.get("need_retrieval") and beam.get("evidence"):
            base = state["prompt"] + beam.get("prefix", "")
            for i in beam["evidence"]:
                doc = passages[i]
                prompt, fitted = fitter.prompt(base, document_title(doc), doc.page_content)
                evidence_jobs.append((beam, i, prompt, fitted))
                if fitted is not None and fitted.truncated:
                    _emit(runtime, "passage_truncated", depth=depth, beam=beam["id"], passage=i,
                          kept_tokens=fitted.tokens, total_tokens=fitted.total)
        else:
            plain_jobs.append((beam, _continuation_prompt(state, beam),
                               cfg.decoding_guard and not _has_text(beam), _continued_passage(beam)))
    candidates: list[Candidate] = []
    if evidence_jobs:
        gens, guards = _run_generate(ctx.lm, [p for _, _, p, _ in evidence_jobs], cfg,
                                     [cfg.decoding_guard] * len(evidence_jobs), ISREL)
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


# -- critique -----------------------------------------------------------------------------------
def grade_relevance(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """IsRel of every evidence candidate from its first-position probabilities.

    Candidates without first-position probabilities are scored in one ``candidate_probs`` call;
    if the model still gives none, IsRel is 0. Candidates without evidence get IsRel None. A
    [Continue to Use Evidence] candidate has the probabilities of the segment that retrieved its
    passage (its own prompt does not end with evidence, so it is never asked).
    """
    ctx = _ctx(runtime)
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
            _emit(runtime, "critique", aspect="isrel", candidate=cand["id"], passage=cand["passage"],
                  value=cand["isrel"], probs=cand["first_probs"])
    return {"candidates": cands}


def grade_support(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """IsSup of every evidence candidate; with ``hard_constraints`` drop [No support / Contradictory]."""
    ctx = _ctx(runtime)
    cands = [dict(c) for c in state.get("candidates", [])]
    for cand in cands:
        if cand.get("passage") is None:
            cand["issup"] = None
            continue
        probs = cand.get("issup_probs")
        cand["issup"] = S.issup_score(probs)
        cand["dropped"] = bool(ctx.config.hard_constraints and S.violates_hard_constraint(probs))
        _emit(runtime, "critique", aspect="issup", candidate=cand["id"], passage=cand["passage"],
              value=cand["issup"], probs=probs, dropped=cand["dropped"])
    return {"candidates": cands}


def grade_utility(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """IsUse of every candidate (0 when the model generated no utility token)."""
    cands = [dict(c) for c in state.get("candidates", [])]
    for cand in cands:
        cand["isuse"] = S.isuse_score(cand.get("isuse_probs"))
        _emit(runtime, "critique", aspect="isuse", candidate=cand["id"], passage=cand.get("passage"),
              value=cand["isuse"], probs=cand.get("isuse_probs"))
    return {"candidates": cands}


# -- rank ---------------------------------------------------------------------------------------
def _mean_score(beam: Mapping[str, Any]) -> float:
    n = len(beam.get("segments") or [])
    return beam.get("score_sum", 0.0) / n if n else float("-inf")


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


def rank(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Score every candidate, ``f = p(y) + w_rel IsRel + w_sup IsSup + w_use IsUse``, and expand the beams.

    Short form keeps one finished beam per candidate (the answers ranked by score); long form keeps
    the ``beam_width`` best beams by mean segment score. In long form a beam whose segment stopped
    at end of sequence is finished; one that stopped at a Retrieve-group token (``retrieval``,
    ``segment``) or at ``length`` goes on until ``max_segments``. The candidates join ``trace``.
    """
    ctx = _ctx(runtime)
    cfg = ctx.config
    cands = [dict(c) for c in state.get("candidates", [])]
    for cand in cands:
        cand["seq_prob"] = S.sequence_probability(cand["cum_logprob"], cand["n_tokens"])
        cand["score"] = S.segment_score(cand["seq_prob"], cand.get("isrel") or 0.0, cand.get("issup") or 0.0,
                                        cand.get("isuse") or 0.0, cfg.weights)
        _emit(runtime, "score", candidate=cand["id"], passage=cand.get("passage"), score=cand["score"],
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
    pool.sort(key=_mean_score, reverse=True)
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
    abstention bars are sure to be met (:func:`_bars_settled`), or while the shared segments say
    nothing (an answer without a letter or digit is an abstention).
    """
    cfg = ctx.config
    if not cfg.long_form or cfg.rho is not None or not _bars_settled(state, ctx, trace):
        return []
    shared = _shared_segments(beams)
    if not any(_says_something(c) for c in shared):
        return []
    texts, _ = _segment_texts(shared, state.get("passages") or [])
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
        _emit(runtime, "segment", text=after[n][len(previous) :], index=n)


def route_after_rank(state: SelfRAGState, runtime: Runtime[SelfRAGContext] | None = None) -> str:
    """Another long-form round (``decide_retrieval``), a corrective retrieval round (``correct``,
    short form: see :mod:`langchain_selfrag.graph.corrective`) or ``select``.

    Stops at ``max_segments``, when no beam is alive, or when the remaining step budget could not
    pay for another round: the loop is bounded twice.
    """
    if runtime is not None:
        from .corrective import needs_correction  # corrective imports this module

        if needs_correction(state, _ctx(runtime)):
            return "correct"
    cfg = _ctx(runtime).config if runtime is not None else None
    long_form = cfg.long_form if cfg else False
    max_segments = cfg.max_segments if cfg else 1
    remaining = state.get("remaining_steps", STEPS_PER_ROUND + FINAL_STEPS + 1)
    if (
        long_form
        and _alive(state)
        and state.get("depth", 0) < max_segments
        and remaining > STEPS_PER_ROUND + FINAL_STEPS
    ):
        return "decide_retrieval"
    return "select"


# -- select / abstain ---------------------------------------------------------------------------
def _public(cand: Mapping[str, Any], selected: set[int], chosen: set[int], approximate: str | None) -> dict[str, Any]:
    """The trace entry of a candidate. ``chosen``: ``select`` picked it (even when the run then
    abstained); ``selected``: it is in the answer. ``round``: the retrieval round it came from.
    ``approximate``: why the backend's critique probabilities are not the model's own, else None."""
    return {
        "passage": cand.get("passage"),
        "text": cand.get("text", ""),
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


def judged_relevant(cand: Mapping[str, Any]) -> bool:
    """The model judged the candidate's passage [Relevant]: the IsRel token it generated, or when it
    generated none, p([Relevant]) > p([Irrelevant]) at the first position."""
    token = cand.get("isrel_token")
    if token is not None:
        return token == T.RELEVANT
    probs = cand.get("first_probs") or {}
    return probs.get(T.RELEVANT, 0.0) > probs.get(T.IRRELEVANT, 0.0)


def _cites(cand: Mapping[str, Any]) -> bool:
    """A segment cites its passage iff the model judged it [Relevant] and not [No support / Contradictory]."""
    return (cand.get("passage") is not None and judged_relevant(cand)
            and not S.violates_hard_constraint(cand.get("issup_probs")))


def _abstain_reason(state: Mapping[str, Any], ctx: SelfRAGContext, chosen: list[Mapping[str, Any]]) -> str | None:
    cfg = ctx.config
    trace = candidates_of(state.get("trace") or [])
    if trace and all(c.get("dropped") for c in trace):
        return "every candidate was dropped by the hard constraint ([No support / Contradictory])"
    if not chosen or not any(_says_something(c) for c in chosen):
        return "the model produced no answer text"
    if not state.get("retrieval_attempted"):
        return _closed_book_reason(state, ctx)
    if _bars_set(cfg):
        return evidence_reason(trace, chosen, cfg.abstain_isrel, cfg.abstain_issup)
    return None


def _has_source(state: Mapping[str, Any], ctx: SelfRAGContext) -> bool:
    """The run can retrieve: a retriever, or passages given with the question."""
    return ctx.retriever is not None or state.get("given_passages") is not None


def retrieved_and_kept(cand: Mapping[str, Any]) -> bool:
    """A candidate generated from a passage and not dropped by the hard constraint."""
    return cand.get("passage") is not None and not cand.get("dropped")


def _closed_book_reason(state: Mapping[str, Any], ctx: SelfRAGContext) -> str | None:
    """Why a closed-book answer is not given (``abstain_closed_book``), or None when it is."""
    if not _closed_book_abstains(state, ctx):
        return None
    p = state.get("retrieve_probability")
    why = f" (p(Retrieval) {p:.2f} <= threshold {ctx.config.threshold:g})" if p is not None else ""
    return (f"the model chose to answer without retrieval{why}, and a closed-book answer is not trusted "
            "(abstain_closed_book; set mode='always' to retrieve every time)")


def _closed_book_abstains(state: Mapping[str, Any], ctx: SelfRAGContext) -> bool:
    """True when an answer given without retrieval will be an abstention: ``abstain_closed_book`` is
    on, a source was there (retriever or given passages) and the mode let the model choose."""
    cfg = ctx.config
    return cfg.abstain_closed_book and cfg.mode != "never" and _has_source(state, ctx)


def candidates_of(trace: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The candidate entries of a trace (without the ``retrieval_round`` entries of corrective retrieval)."""
    return [t for t in trace if t.get("kind", "candidate") == "candidate"]


def answer_support(chosen: Sequence[Mapping[str, Any]]) -> float:
    """IsSup of the selected answer: the lowest IsSup of its candidates generated from a passage
    (long form: its segments; closed set: the candidates aggregated into it); 0 when none was."""
    evidence = [c for c in chosen if c.get("passage") is not None]
    return min((c.get("issup") or 0.0 for c in evidence), default=0.0)


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
    return cfg.abstain_isrel if cfg.abstain_isrel > 0 else 0.5


def _says_something(cand: Mapping[str, Any]) -> bool:
    """True when the candidate's text holds a letter or digit (``":"`` alone is no answer)."""
    return any(ch.isalnum() for ch in cand.get("text") or "")


def _choose_short(state: Mapping[str, Any], cfg: Any) -> list[Mapping[str, Any]]:
    beams = [b for b in state.get("beams", []) if b.get("segments")]
    cands = [b["segments"][-1] for b in beams]
    with_text = [c for c in cands if _says_something(c)] or cands
    if not with_text:
        return []
    if cfg.closed_set:
        options = state.get("options")
        best, _ = S.aggregate_closed_set((closed_set_key(c["text"], options), c["score"]) for c in with_text)
        winners = [c for c in with_text if closed_set_key(c["text"], options) == best]
        return sorted(winners, key=lambda c: c["score"], reverse=True)
    return [max(with_text, key=lambda c: c["score"])]


def _segment_texts(segments: Sequence[Mapping[str, Any]], passages: Sequence[Document]
                   ) -> tuple[list[str], list[Document]]:
    """Long form: each segment's text as the answer shows it, and the citations in marker order.

    A segment that cites its passage (:func:`_cites`) ends with ``[n]``, n its passage's place in
    the citations (from 1, by first citation). The answer is the non-empty texts joined by spaces.
    """
    citations: list[Document] = []
    cite_index: dict[int, int] = {}
    texts = []
    for cand in segments:
        text = cand.get("text", "")
        if _cites(cand):
            if cand["passage"] not in cite_index:
                cite_index[cand["passage"]] = len(citations) + 1
                citations.append(passages[cand["passage"]])
            text = f"{text} [{cite_index[cand['passage']]}]" if text else text
        texts.append(text)
    return texts, citations


def _short_citations(chosen: Sequence[Mapping[str, Any]], passages: Sequence[Document]) -> list[Document]:
    """Short form: the passages of the chosen candidates that cite theirs, once each, in order."""
    cited: list[int] = []
    for cand in chosen:
        if _cites(cand) and cand["passage"] not in cited:
            cited.append(cand["passage"])
    return [passages[i] for i in cited]


def _meets_isrel_bar(cand: Mapping[str, Any], cfg: Any) -> bool:
    """A retrieved, kept candidate whose passage reaches ``abstain_isrel``."""
    return retrieved_and_kept(cand) and (cand.get("isrel") or 0.0) >= cfg.abstain_isrel


def _bars_settled(state: Mapping[str, Any], ctx: SelfRAGContext, trace: Sequence[Mapping[str, Any]]) -> bool:
    """Abstention can no longer make the run abstain: before any retrieval, a closed-book answer
    is given (:func:`_closed_book_abstains` is False) and the bars are unset or cannot apply;
    after retrieval, the bars are unset, or only the IsRel bar is set and a candidate of ``trace``
    met it (the trace only grows; the selected answer's IsSup is known only at the end)."""
    cfg = ctx.config
    attempted = state.get("retrieval_attempted")
    if not attempted and _closed_book_abstains(state, ctx):
        return False
    if not _bars_set(cfg):
        return True
    if cfg.abstain_issup <= 0 and any(_meets_isrel_bar(c, cfg) for c in candidates_of(trace)):
        return True
    return not attempted and (cfg.mode == "never" or not _has_source(state, ctx))


def select(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Pick the answer: the best candidate (short form, closed-set aggregated) or the best beam.

    Abstains (via ``pending_abstain``) when every candidate was dropped by the hard constraint, when
    no candidate has answer text, or, if retrieval was attempted, when no retrieved passage reaches
    ``abstain_isrel`` or the selected answer's IsSup is below ``abstain_issup``
    (:func:`evidence_reason`). An answer the model chose to give without retrieval is not held to
    the bars; with ``abstain_closed_book`` it is an abstention when a source was there.

    Long-form segments generated from a passage carry ``[n]``, n indexing ``citations`` (from 1),
    when the model judged the passage [Relevant] and the segment not [No support / Contradictory]
    (:func:`_cites`; short form cites by the same rule). Sets ``pending_abstain``
    when the answer must not be given (see :func:`route_after_select`).
    """
    ctx = _ctx(runtime)
    cfg = ctx.config
    passages = state.get("passages") or []
    if cfg.long_form:
        beams = [b for b in state.get("beams", []) if b.get("segments")]
        best = max(beams, key=_mean_score) if beams else None
        chosen = list(best["segments"]) if best else []
    else:
        chosen = _choose_short(state, cfg)
    reason = _abstain_reason(state, ctx, chosen)
    picked = {c["id"] for c in chosen}
    selected = picked if reason is None else set()
    if cfg.long_form:
        texts, citations = _segment_texts(chosen, passages)
    else:
        texts, citations = [c.get("text", "") for c in chosen[:1]], _short_citations(chosen, passages)
    approximate = approximation(ctx.lm)
    trace = [_public(c, selected, picked, approximate) for c in state.get("trace") or []]
    from .corrective import with_round_entries  # corrective imports this module

    trace = with_round_entries(state, ctx, trace)
    _emit(runtime, "selection", selected=sorted(selected), abstain_reason=reason)
    return {
        "answer": " ".join(t for t in texts if t).strip(),
        "citations": citations,
        "trace": trace,
        "abstained": False,
        "abstain_reason": None,
        "pending_abstain": reason,
    }


def route_after_select(state: SelfRAGState) -> str:
    """``abstain`` when ``select`` found a reason not to answer, else the end."""
    return "abstain" if state.get("pending_abstain") else "__end__"


def abstain(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Replace the answer with an explicit abstention and its reason; nothing is cited."""
    reason = state.get("pending_abstain") or "abstained"
    _emit(runtime, "abstain", reason=reason)
    trace = [{**t, "selected": False} if t.get("kind", "candidate") == "candidate" else t
             for t in state.get("trace") or []]
    return {"answer": ABSTAIN_ANSWER, "abstained": True, "abstain_reason": reason, "citations": [], "trace": trace}
