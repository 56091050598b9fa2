"""Self-consistency ("LLMs can learn self-restraint through iterative self-reflection", Eq. 3): a claim is likely true
when the other sampled answers agree.

* :class:`SelfConsistencyScorer`: the paper's P_eval path, a verbalised probability from any
  LangChain chat model or LLM;
* :class:`IsSupConsistencyScorer`: the same estimator read by the reflection model's IsSup head.

Both draw their subsets from :func:`sentence_pool` (every sentence of every answer, repeats kept:
a sentence that many answers share is drawn more often, which is the signal self-consistency is
made of) less one occurrence of the claim's own sentence (:func:`without_own`: a claim is never its
own evidence).

The paper scores a claim by asking the model for a verbalised probability (P_eval, 0-100) that it is
true given a random subset of sentences from all the answers sampled so far, averaged over
subsets. A 135M reflection model cannot verbalise probabilities (it answers P_eval with noise), but
it was trained to judge whether a segment is supported by a passage. :class:`IsSupConsistencyScorer`
keeps the paper's estimator and swaps the reader: the subset of sampled sentences becomes a Self-RAG
evidence paragraph, the claim is written after it as a segment the model judged relevant, and the
model's IsSup probabilities there give ``p(Full) + 0.5 p(Partial)`` (``scoring.issup_score``).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document

from .. import scoring as S
from .. import tokens as T
from ..passage_budget import EvidenceFitter, can_tokenize
from ..prompts import build_instruction, format_prompt
from .claims import guess_entity, model_texts, split_sentences, strip_citations
from .prompts import P_EVAL, format_sources
from .scoring import check_subset_settings, parse_probability

ISSUP = T.GROUPS[T.Kind.ISSUP]
Key = tuple[str, str, tuple[str, ...]]


def sentence_pool(samples: Sequence[str]) -> list[str]:
    """Every sentence of ``samples`` in order, repeats kept (a sentence many answers share weighs more).

    Reflection tokens and citation markers are removed; empty sentences dropped.
    """
    pool: list[str] = []
    for sample in samples:
        for sentence in split_sentences(T.strip_reflection_tokens(sample or "")):
            clean = strip_citations(sentence)
            if clean:
                pool.append(clean)
    return pool


def without_own(claim: str, subset: Sequence[str]) -> tuple[str, ...]:
    """``subset`` less one occurrence of ``claim`` itself: a claim is never its own evidence."""
    own = strip_citations(claim)
    out = list(subset)
    if own in out:
        out.remove(own)
    return tuple(out)


class SelfConsistencyScorer:
    """Verbalised self-consistency (the self-restraint paper's Eq. 3) through any LangChain chat model or LLM.

    A claim's sources are :func:`sentence_pool` of ``samples`` (repeats kept) less one occurrence of
    the claim's own sentence. ``n_subsets`` subsets of ``subset_size`` of them are drawn with
    ``random.Random(f"{seed}:{claim}")`` (the same claim and sources always give the same subsets);
    with at most ``subset_size`` sources there is one subset, all of them. Each (claim, subset) is
    one P_eval prompt; all new prompts of a call go out in one ``batch``. Answers are cached by
    (entity, claim, subset). A claim's probability is the mean of its parsed answers; when none
    parses, or it has no source at all, it is ``fallback``. Counters: ``calls`` (prompts sent),
    ``cache_hits``, ``unparsed`` (outputs that held no probability) and ``fallbacks`` (claims
    scored with ``fallback``).
    """

    def __init__(self, model: Any, n_subsets: int = 4, subset_size: int = 5, seed: int = 0,
                 fallback: float = 0.5) -> None:
        check_subset_settings(n_subsets, subset_size, fallback)
        self.model = model
        self.n_subsets = n_subsets
        self.subset_size = subset_size
        self.seed = seed
        self.fallback = float(fallback)
        self.cache: dict[tuple[str, str, tuple[str, ...]], float | None] = {}
        self.calls = self.cache_hits = self.unparsed = self.fallbacks = 0

    def subsets(self, claim: str, sources: Sequence[str]) -> list[tuple[str, ...]]:
        """The seeded subsets of ``sources`` that ``claim`` is judged against (each keeps their order).

        ``sources`` are used as given: :meth:`score` passes the pool less the claim's own sentence.
        """
        if not sources:
            return []
        if len(sources) <= self.subset_size:
            return [tuple(sources)]
        rng = random.Random(f"{self.seed}:{claim}")
        picks = [sorted(rng.sample(range(len(sources)), self.subset_size)) for _ in range(self.n_subsets)]
        return [tuple(sources[i] for i in pick) for pick in picks]

    def prompt(self, entity: str, claim: str, subset: Sequence[str]) -> str:
        """P_eval for one claim and one subset."""
        return P_EVAL.format(sources=format_sources(subset), entity=entity, claim=claim)

    def score(self, claims: Sequence[str], *, question: str, entity: str | None = None,
              evidence: Sequence[Document] = (), samples: Sequence[str] = ()) -> list[float]:
        name = entity or guess_entity(question)
        pool = sentence_pool(samples)
        plans = {claim: self.subsets(claim, without_own(claim, pool)) for claim in dict.fromkeys(claims)}
        self._ask(name, plans)
        return [self._mean(name, claim, plans[claim]) for claim in claims]

    def _ask(self, entity: str, plans: dict[str, list[tuple[str, ...]]]) -> None:
        keys: dict[tuple[str, str, tuple[str, ...]], None] = {}
        for claim, subsets in plans.items():
            for subset in subsets:
                key = (entity, claim, subset)
                if key in self.cache or key in keys:
                    self.cache_hits += 1
                else:
                    keys[key] = None
        outputs = model_texts(self.model, [self.prompt(e, c, s) for e, c, s in keys]) if keys else []
        self.calls += len(keys)
        for key, output in zip(keys, outputs):
            value = parse_probability(output)
            self.unparsed += value is None
            self.cache[key] = value

    def _mean(self, entity: str, claim: str, subsets: list[tuple[str, ...]]) -> float:
        values = [v for v in (self.cache[(entity, claim, s)] for s in subsets) if v is not None]
        if not values:
            self.fallbacks += 1
            return self.fallback
        return sum(values) / len(values)


class IsSupConsistencyScorer:
    """Claim probabilities from self-consistency, judged by a reflection LM's IsSup head.

    ``samples`` (all answers to the question so far) are split into sentences (:func:`sentence_pool`).
    ``n_subsets`` subsets of ``subset_size`` sentences are drawn with a ``random.Random`` seeded by
    ``seed`` and the pool's content (the same pool always gives the same subsets; one subset, the
    whole pool, when it holds at most ``subset_size`` sentences); all claims of a call are judged
    against the same subsets, each less the claim's own sentence (:func:`without_own`). For a claim
    and a subset the prompt is the question's Self-RAG prompt, then
    ``[Retrieval]<paragraph>{entity}\\n{sentences}</paragraph>[Relevant]{claim}``; one
    ``lm.candidate_probs`` call reads the three IsSup tokens for every new (claim, subset), ordered
    so that prompts sharing a paragraph come together (a prefix cache reuses it). A claim's
    probability is the mean ``issup_score`` over its subsets; without any evidence sentence it is
    ``fallback`` (counted in ``fallbacks``). Scores are cached by (question, claim, evidence).
    Implements :class:`~langchain_selfrag.restraint.scoring.ClaimScorer`; ``evidence`` is unused.

    This replaces the paper's verbalised probability because a 135M model cannot verbalise one; with
    a model that can, use :class:`SelfConsistencyScorer`.
    """

    def __init__(self, lm: Any, n_subsets: int = 4, subset_size: int = 5, seed: int = 0, *,
                 fallback: float = 0.5, max_passage_tokens: int | None = None) -> None:
        check_subset_settings(n_subsets, subset_size, fallback)
        self.lm = lm
        self.n_subsets = n_subsets
        self.subset_size = subset_size
        self.seed = seed
        self.fallback = float(fallback)
        self.max_passage_tokens = max_passage_tokens
        self.cache: dict[Key, float] = {}
        self.calls = self.cache_hits = self.fallbacks = 0

    def subsets(self, pool: Sequence[str]) -> list[tuple[str, ...]]:
        """The seeded sentence subsets of ``pool`` (each keeps the pool's order)."""
        if not pool:
            return []
        if len(pool) <= self.subset_size:
            return [tuple(pool)]
        digest = hashlib.sha256("\n".join(pool).encode("utf-8")).hexdigest()
        rng = random.Random(f"{self.seed}:{digest}")
        picks = [sorted(rng.sample(range(len(pool)), self.subset_size)) for _ in range(self.n_subsets)]
        return [tuple(pool[i] for i in pick) for pick in picks]

    def prompt(self, question: str, entity: str, claim: str, evidence: Sequence[str]) -> str:
        """The IsSup prompt for ``claim`` after an evidence paragraph of ``evidence`` sentences."""
        base = format_prompt(build_instruction(question.strip()))
        text = T.neutralise(strip_citations(T.strip_reflection_tokens(claim)))
        room = len(self.lm.tokenize(text, add_bos=False)) + 1 if can_tokenize(self.lm) else 1
        fitter = EvidenceFitter(self.lm, room, limit=self.max_passage_tokens)
        return fitter.prompt(base, entity, " ".join(evidence))[0] + T.RELEVANT + text

    def score(self, claims: Sequence[str], *, question: str, entity: str | None = None,
              evidence: Sequence[Document] = (), samples: Sequence[str] = ()) -> list[float]:
        if not claims:
            return []
        name = entity or guess_entity(question)
        subsets = self.subsets(sentence_pool(samples))
        plans = {c: [e for e in (without_own(c, s) for s in subsets) if e] for c in dict.fromkeys(claims)}
        self._ask(question, name, plans)
        return [self._mean(question, claim, plans[claim]) for claim in claims]

    def _ask(self, question: str, entity: str, plans: dict[str, list[tuple[str, ...]]]) -> None:
        todo: dict[Key, None] = {}
        for claim, evidences in plans.items():
            for ev in evidences:
                key = (question, claim, ev)
                if key in self.cache:
                    self.cache_hits += 1
                else:
                    todo.setdefault(key, None)
        keys = sorted(todo, key=lambda k: (k[2], k[1]))  # one paragraph's prompts together
        if not keys:
            return
        probs = self.lm.candidate_probs([self.prompt(q, entity, c, ev) for q, c, ev in keys], ISSUP)
        self.calls += len(keys)
        for key, p in zip(keys, probs):
            self.cache[key] = S.issup_score(p)

    def _mean(self, question: str, claim: str, evidences: list[tuple[str, ...]]) -> float:
        if not evidences:
            self.fallbacks += 1
            return self.fallback
        return sum(self.cache[(question, claim, ev)] for ev in evidences) / len(evidences)
