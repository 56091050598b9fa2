"""``FakeReflectionLM``: a scripted reflection LM, the test double for Self-RAG graphs.

It implements the reflection-LM protocol (:class:`langchain_selfrag.lm.ReflectionLM`) without a
network: every probability it reports comes from a script, so each branch of the Self-RAG graph
can be driven deterministically. Use it in your own tests::

    from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment

    lm = FakeReflectionLM(
        retrieve=0.9,                                  # p([Retrieval]) at the first position
        passages={"Paris": FakeSegment("Paris is the capital.", isrel=0.95)},
        default=FakeSegment("I am not sure.", isrel=0.1, issup="none"),
        no_retrieval=FakeSegment("Paris.", isuse=4),
    )

A prompt is matched by its *last* evidence paragraph: the first key of ``passages`` found in that
paragraph picks the script, else ``default``; prompts without evidence use ``no_retrieval``.
Like a real model that was never protected, the fake can be fooled: with ``gullible=True``
(default) a literal ``[Relevant]`` / ``[Irrelevant]`` / IsSup token string inside the evidence
overrides the script, so tests can prove that the pipeline neutralises passages.

``generate`` honours the decoding options: under ``guard`` a segment whose text has no content
writes ``guarded_text`` instead (``Generation.guarded`` = 1); with ``stop_at_segment`` the segment
ends at the first ``[No Retrieval]`` / ``[Continue to Use Evidence]`` in its text after content.
With ``temperature > 0`` a segment with ``variants`` writes one of ``(text, *variants)``, drawn
uniformly by prompt ``i``'s seeded stream ``(seed, i)``, as a real backend's samples are seeded.
``on_token`` gets each prompt's answer text word by word, as a real backend's decoding would
(:class:`~langchain_selfrag.lm.streaming.AnswerStream`), before ``generate`` returns.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from . import tokens as T
from .lm.protocol import Generation, ReflectionPoint, TokenCallback, guard_flags
from .lm.sampling import check_sampling, stream_seed
from .lm.stopping import SEGMENT_MARKERS
from .lm.streaming import AnswerStream

_SUPPORT = {"full": T.FULLY_SUPPORTED, "partial": T.PARTIALLY_SUPPORTED, "none": T.NO_SUPPORT}
_EVIDENCE = re.compile(re.escape(T.PARAGRAPH_START) + r"(.*?)" + re.escape(T.PARAGRAPH_END), re.DOTALL)


@dataclass
class FakeSegment:
    """What the fake model generates for one prompt.

    text: the segment text. isrel: p([Relevant]) after evidence (None: the model gives no IsRel
    probabilities at all). issup: "full" | "partial" | "none", a probability dict over the three
    IsSup tokens, or None for a segment without an IsSup token. isuse: utility 1..5, a probability
    dict over the five utility tokens, or None for none. then_retrieve: the segment ends with the
    model asking for ``[Retrieval]``. logprob: log-probability of every generated token.
    guarded_text: what is written instead of a ``text`` without content when ``generate`` is
    called with the guard on (None: ``text`` unchanged). ``text`` may hold ``[No Retrieval]`` /
    ``[Continue to Use Evidence]`` markers that start the next sentence of a long-form answer.
    variants: other texts a sampling call (``temperature > 0``) may write instead of ``text``.
    """

    text: str = "answer"
    isrel: float | None = 0.9
    issup: str | dict[str, float] | None = "full"
    isuse: int | dict[str, float] | None = 5
    then_retrieve: bool = False
    logprob: float = -0.1
    confidence: float = 0.8
    guarded_text: str | None = None
    variants: Sequence[str] = ()

    def issup_probs(self) -> dict[str, float] | None:
        if self.issup is None or isinstance(self.issup, dict):
            return self.issup
        return _peaked(T.GROUPS[T.Kind.ISSUP], _SUPPORT[self.issup], self.confidence)

    def isuse_probs(self) -> dict[str, float] | None:
        if self.isuse is None or isinstance(self.isuse, dict):
            return self.isuse
        return _peaked(T.UTILITY, T.UTILITY[self.isuse - 1], self.confidence)


def _text_pieces(text: str, stop_at_segment: bool) -> tuple[list[tuple[str, dict[str, float] | None]], bool]:
    """Word pieces of a scripted text (reflection tokens on their own), and whether they end at a
    segment marker that follows content (only with ``stop_at_segment``)."""
    pieces: list[tuple[str, dict[str, float] | None]] = []
    content = False
    for part in re.split(r"(" + "|".join(re.escape(t) for t in T.REFLECTION_TOKENS) + r")", text):
        if part in T.KIND_OF:
            pieces.append((part, _peaked(T.GROUPS[T.KIND_OF[part]], part, 1.0)))
            if stop_at_segment and content and part in SEGMENT_MARKERS:
                return pieces, True
            continue
        words = re.findall(r"\S+\s*", part)
        pieces.extend((word, None) for word in words)
        content = content or bool(words)
    return pieces, False


def _peaked(group: Sequence[str], top: str, confidence: float) -> dict[str, float]:
    rest = (1.0 - confidence) / (len(group) - 1)
    return {tok: (confidence if tok == top else rest) for tok in group}


@dataclass(eq=False)
class FakeReflectionLM:
    """Scripted reflection LM (see the module docstring). ``calls`` records every call."""

    retrieve: float | Callable[[str], float] = 0.5
    passages: Mapping[str, FakeSegment] = field(default_factory=dict)
    default: FakeSegment = field(default_factory=FakeSegment)
    no_retrieval: FakeSegment = field(default_factory=lambda: FakeSegment("answer without retrieval", isrel=None))
    gullible: bool = True
    has_reflection_vocab: bool = True
    calls: list[tuple[str, Any]] = field(default_factory=list)
    #: The ``guard`` flags (one per prompt) and ``stop_at_segment`` of every ``generate`` call, and
    #: ``temperature``, ``top_p`` and ``seed`` of a call that samples (``temperature > 0``).
    generate_options: list[dict[str, Any]] = field(default_factory=list)

    # -- script lookup ---------------------------------------------------------------------------
    def evidence_of(self, prompt: str) -> str | None:
        """The last evidence paragraph of ``prompt``, or None."""
        found = _EVIDENCE.findall(prompt)
        return found[-1] if found else None

    def script_for(self, prompt: str) -> FakeSegment:
        """The script for a prompt: by its evidence when it ends with a paragraph, else ``no_retrieval``."""
        if not prompt.endswith(T.PARAGRAPH_END):
            return self.no_retrieval
        return self._by_evidence(self.evidence_of(prompt) or "")

    def _by_evidence(self, evidence: str) -> FakeSegment:
        for key, seg in self.passages.items():
            if key in evidence:
                return seg
        return self.default

    def _isrel(self, prompt: str) -> float | None:
        evidence = self.evidence_of(prompt)
        if evidence is not None and self.gullible:
            if T.RELEVANT in evidence:
                return 1.0
            if T.IRRELEVANT in evidence:
                return 0.0
        return self.script_for(prompt).isrel

    def _issup(self, prompt: str, seg: FakeSegment) -> dict[str, float] | None:
        evidence = self.evidence_of(prompt)
        if evidence is not None and self.gullible:
            for tok in T.GROUPS[T.Kind.ISSUP]:
                if tok in evidence:
                    return _peaked(T.GROUPS[T.Kind.ISSUP], tok, 1.0)
        return seg.issup_probs()

    # -- protocol ------------------------------------------------------------------------------
    def candidate_probs(self, prompts: Sequence[str], candidates: Sequence[str]) -> list[dict[str, float]]:
        """Scripted probabilities of the candidate strings at the next position."""
        self.calls.append(("candidate_probs", (list(prompts), list(candidates))))
        out = []
        for prompt in prompts:
            cands = set(candidates)
            if cands <= set(T.GROUPS[T.Kind.RETRIEVE]):
                p = self.retrieve(prompt) if callable(self.retrieve) else self.retrieve
                probs = {T.RETRIEVAL: p, T.NO_RETRIEVAL: 1.0 - p, T.CONTINUE: 0.0}
            elif cands <= set(T.GROUPS[T.Kind.ISREL]):
                rel = self._isrel(prompt)
                probs = {} if rel is None else {T.RELEVANT: rel, T.IRRELEVANT: 1.0 - rel}
            else:
                probs = {}
            out.append({c: probs.get(c, 0.0) for c in candidates})
        return out

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 100,
        first_candidates: Sequence[str] = (),
        stop_at_retrieval: bool = True,
        guard: bool | Sequence[bool] = False,
        stop_at_segment: bool = False,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        on_token: TokenCallback | None = None,
    ) -> list[Generation]:
        """One scripted segment per prompt, with its reflection points and first probabilities."""
        check_sampling(temperature, top_p, seed)
        flags = guard_flags(guard, len(prompts))
        self.calls.append(("generate", (list(prompts), tuple(first_candidates), stop_at_retrieval)))
        options: dict[str, Any] = {"guard": flags, "stop_at_segment": stop_at_segment}
        if temperature > 0:
            options |= {"temperature": temperature, "top_p": top_p, "seed": seed}
        self.generate_options.append(options)
        rngs = [self._stream(seed, i) if temperature > 0 else None for i in range(len(prompts))]
        streams = [AnswerStream(on_token, i) if on_token is not None else None for i in range(len(prompts))]
        return [
            self._generate_one(p, max_new_tokens, first_candidates, stop_at_retrieval, g, stop_at_segment, rng, stream)
            for p, g, rng, stream in zip(prompts, flags, rngs, streams)
        ]

    @staticmethod
    def _stream(seed: int | None, index: int) -> random.Random:
        return random.Random(stream_seed(seed, index)) if seed is not None else random.Random()

    def _generate_one(
        self, prompt: str, max_new_tokens: int, first_candidates: Sequence[str], stop: bool, guard: bool, segment: bool,
        rng: random.Random | None = None, stream: AnswerStream | None = None,
    ) -> Generation:
        seg = self.script_for(prompt)
        has_evidence = prompt.endswith(T.PARAGRAPH_END)
        pieces: list[tuple[str, dict[str, float] | None]] = []
        rel = self._isrel(prompt) if has_evidence else None
        if has_evidence and rel is not None:
            pieces.append((T.RELEVANT if rel >= 0.5 else T.IRRELEVANT, {T.RELEVANT: rel, T.IRRELEVANT: 1 - rel}))
        text, guarded = seg.text, 0
        if rng is not None and seg.variants:
            text = rng.choice([seg.text, *seg.variants])
        if guard and seg.guarded_text is not None and not T.strip_reflection_tokens(text):
            text, guarded = seg.guarded_text, 1
        words, at_marker = _text_pieces(text, segment)
        pieces.extend(words)
        reason = "eos"
        if at_marker:
            reason = "segment"
        else:
            sup = self._issup(prompt, seg) if has_evidence else None
            if sup:
                pieces.append((max(sup, key=sup.__getitem__), sup))
            if seg.then_retrieve:
                pieces.append((T.RETRIEVAL, {T.RETRIEVAL: 0.9, T.NO_RETRIEVAL: 0.05, T.CONTINUE: 0.05}))
            use = seg.isuse_probs()
            if use and not (seg.then_retrieve and stop):
                pieces.append((max(use, key=use.__getitem__), use))
            if seg.then_retrieve and stop:
                cut = next(i for i, (tok, _) in enumerate(pieces) if tok == T.RETRIEVAL) + 1
                pieces, reason = pieces[:cut], "retrieval"
        if len(pieces) > max_new_tokens:
            pieces, reason = pieces[:max_new_tokens], "length"
        if stream is not None:
            for k in range(1, len(pieces) + 1):
                stream.update("".join(tok for tok, _ in pieces[:k]))
        reflections = [
            ReflectionPoint(i, tok, T.KIND_OF[tok], dict(probs))
            for i, (tok, probs) in enumerate(pieces)
            if probs is not None
        ]
        first: dict[str, float] = {}
        if first_candidates:
            first = self.candidate_probs([prompt], first_candidates)[0]
            self.calls.pop()
            if not any(first.values()):
                first = {}
        gen = Generation(
            text="".join(tok for tok, _ in pieces),
            token_ids=list(range(len(pieces))),
            cumulative_logprob=seg.logprob * len(pieces),
            reflections=reflections,
            first_probs=first,
            stop_reason=reason,
            guarded=guarded,
        )
        if stream is not None:
            stream.finish(gen.answer)
        return gen

    def calls_of(self, name: str) -> list[Any]:
        """Arguments of every recorded call to ``name`` (``generate`` or ``candidate_probs``)."""
        return [args for kind, args in self.calls if kind == name]


class FakeLogprobsChatModel(BaseChatModel):
    """A scripted LangChain chat model that reports token log-probabilities as ChatOpenAI does.

    The test double for :class:`~langchain_selfrag.lm.ChatReflectionLM`. ``script`` is a list of
    ``(pattern, reply, first_token_probs)``: the first pattern (a regular expression) found in the
    user's turn gives the reply text and the probabilities of its first token's alternatives
    (``{"Yes": 0.9, "No": 0.1}``); ``default`` answers the rest. With ``logprobs=False`` replies carry
    none, as an integration with them turned off. ``calls`` counts the conversations answered::

        from langchain_selfrag.fakes import FakeLogprobsChatModel

        chat = FakeLogprobsChatModel(script=[
            (r"Passage \\(Paris\\)(?s:.*)Does the passage", "Yes", {"Yes": 0.95, "No": 0.05}),
            (r"Answer the question from the passage", "Paris is the capital.", {"Paris": 1.0}),
        ])
    """

    script: list[tuple[str, str, dict[str, float]]] = []
    default: tuple[str, dict[str, float]] = ("No", {"No": 0.8, "Yes": 0.2})
    logprobs: bool = True
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "fake-logprobs-chat"

    def _reply(self, user: str) -> tuple[str, dict[str, float]]:
        for pattern, reply, probs in self.script:
            if re.search(pattern, user):
                return reply, probs
        return self.default

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        user = next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")
        reply, probs = self._reply(user)
        self.calls += 1
        meta: dict[str, Any] = {"finish_reason": "stop"}
        if self.logprobs:
            tops = [{"token": tok, "logprob": math.log(p)} for tok, p in probs.items() if p > 0]
            words = re.findall(r"\S+\s*", reply) or [reply]
            first = max(tops, key=lambda t: t["logprob"]) if tops else {"token": words[0], "logprob": 0.0}
            content = [{"token": first["token"], "logprob": first["logprob"], "top_logprobs": tops}]
            content += [{"token": w, "logprob": -0.1, "top_logprobs": []} for w in words[1:]]
            meta["logprobs"] = {"content": content}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(reply, response_metadata=meta))])
