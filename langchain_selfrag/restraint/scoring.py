"""Claim probabilities p(T = 1 | x, c, ...) two ways.

* :class:`SelfConsistencyScorer`: the paper's verbalised self-consistency (seed 004, Eq. 3). P_eval
  asks a LangChain chat model or LLM for a probability (0-100) that the claim is true given a random
  subset of sentences from all the answers so far; the answers over several seeded subsets are
  averaged. Needs no evidence.
* :class:`IsSupScorer`: the Self-RAG reflection model's IsSup (``p(Full) + 0.5 p(Partial)``,
  normalised over the three IsSup tokens) of the claim written after each evidence passage, read
  where the model would generate its IsSup token; the best passage counts.

:func:`parse_probability` is pure and never raises: output it cannot read is None, and the scorers
then use their ``fallback`` and count it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.documents import Document

from .. import scoring as S
from .. import tokens as T
from ..passage_budget import EvidenceFitter, can_tokenize
from ..prompts import build_instruction, format_prompt
from ..retrieval import document_title
from .claims import guess_entity, model_texts, split_sentences, strip_citations
from .prompts import P_EVAL, format_sources

_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-\u2212]?)(?P<num>\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s*(?P<pct>%|percent\b)|\s*(?:/|out\s+of)\s*(?P<den>100|10|1)\b)?",
    re.IGNORECASE,
)
ISSUP = T.GROUPS[T.Kind.ISSUP]


def _value(match: re.Match[str]) -> float | None:
    if match.group("sign"):
        return None
    value = float(match.group("num"))
    if match.group("pct"):
        scale = 100.0
    elif match.group("den"):
        scale = float(match.group("den"))
    elif "." in match.group("num") and value <= 1.0:
        scale = 1.0
    else:
        scale = 100.0
    return value / scale if value <= scale else None


def parse_probability(text: str) -> float | None:
    """A verbalised probability in [0, 1], or None when ``text`` holds none.

    ``"85"``, ``"85%"``, ``"**85**"``, ``"85/100"`` and ``"0.85"`` all give 0.85: a number with a
    decimal point up to 1 is a probability, any other number a percentage. The first number that
    carries ``%`` wins, else the first number. Negative numbers, numbers above 100 (or above their
    ``/ 10`` or ``/ 1`` scale), words and empty output give None.
    """
    if not isinstance(text, str):
        return None
    clean = re.sub(r"[*_`]", "", text)
    matches = list(_NUMBER.finditer(clean))
    if not matches:
        return None
    chosen = next((m for m in matches if m.group("pct")), matches[0])
    return _value(chosen)


@runtime_checkable
class ClaimScorer(Protocol):
    """Probability that each claim is true."""

    def score(self, claims: Sequence[str], *, question: str, entity: str | None = None,
              evidence: Sequence[Document] = (), samples: Sequence[str] = ()) -> list[float]:
        """One probability in [0, 1] per claim. ``evidence``: passages to judge against;
        ``samples``: all answers to the question so far (for self-consistency)."""
        ...


def sample_sentences(samples: Sequence[str]) -> list[str]:
    """Distinct sentences (citation markers removed) of all ``samples``, in order."""
    seen: dict[str, None] = {}
    for sample in samples:
        for sentence in split_sentences(sample or ""):
            clean = strip_citations(T.strip_reflection_tokens(sentence))
            if clean:
                seen.setdefault(clean, None)
    return list(seen)


def check_subset_settings(n_subsets: int, subset_size: int, fallback: float) -> None:
    """Settings shared by the self-consistency scorers: ValueError when out of range."""
    if n_subsets < 1 or subset_size < 1:
        raise ValueError("n_subsets and subset_size must be at least 1")
    if not 0.0 <= fallback <= 1.0:
        raise ValueError(f"fallback must lie in [0, 1], not {fallback!r}")


class SelfConsistencyScorer:
    """Verbalised self-consistency (seed 004, Eq. 3) through any LangChain chat model or LLM.

    For each claim, ``n_subsets`` subsets of ``subset_size`` sentences are drawn from the sentences of
    ``samples`` with ``random.Random(f"{seed}:{claim}")`` (the same claim always gets the same
    subsets, whatever else is scored with it); with at most ``subset_size`` sentences there is one
    subset, all of them. Each (claim, subset) is one P_eval prompt; all new prompts of a call go out
    in one ``batch``. Answers are cached by (entity, claim, subset). A claim's probability is the
    mean of its parsed answers; when none parses, or there are no sample sentences, it is
    ``fallback``. Counters: ``calls`` (prompts sent), ``cache_hits``, ``unparsed`` (outputs that
    held no probability) and ``fallbacks`` (claims scored with ``fallback``).
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

    def subsets(self, claim: str, sentences: Sequence[str]) -> list[tuple[str, ...]]:
        """The seeded sentence subsets ``claim`` is judged against (sentences keep their order)."""
        if not sentences:
            return []
        if len(sentences) <= self.subset_size:
            return [tuple(sentences)]
        rng = random.Random(f"{self.seed}:{claim}")
        picks = [sorted(rng.sample(range(len(sentences)), self.subset_size)) for _ in range(self.n_subsets)]
        return [tuple(sentences[i] for i in pick) for pick in picks]

    def prompt(self, entity: str, claim: str, subset: Sequence[str]) -> str:
        """P_eval for one claim and one subset."""
        return P_EVAL.format(sources=format_sources(subset), entity=entity, claim=claim)

    def score(self, claims: Sequence[str], *, question: str, entity: str | None = None,
              evidence: Sequence[Document] = (), samples: Sequence[str] = ()) -> list[float]:
        name = entity or guess_entity(question)
        sentences = sample_sentences(samples)
        plans = {claim: self.subsets(claim, sentences) for claim in dict.fromkeys(claims)}
        self._ask(name, plans)
        return [self._mean(name, claim, plans[claim]) for claim in claims]

    def _ask(self, entity: str, plans: dict[str, list[tuple[str, ...]]]) -> None:
        keys: list[tuple[str, str, tuple[str, ...]]] = []
        for claim, subsets in plans.items():
            for subset in subsets:
                key = (entity, claim, subset)
                if key in self.cache or key in keys:
                    self.cache_hits += 1
                else:
                    keys.append(key)
        outputs = model_texts(self.model, [self.prompt(e, c, s) for e, c, s in keys])
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


class IsSupScorer:
    """The reflection model's IsSup of each claim against each evidence passage; the best passage counts.

    The prompt is the question's Self-RAG prompt (``prompt`` when given, as the graph's ``prepare``
    builds it), then ``[Retrieval]<paragraph>title\\ntext</paragraph>[Relevant]`` and the claim, as a
    segment the model itself would write after a passage it judged relevant; ``lm.candidate_probs``
    reads the three IsSup tokens at the next position, where the model writes its IsSup token, and
    :func:`langchain_selfrag.scoring.issup_score` turns them into ``p(Full) + 0.5 p(Partial)``. All
    (claim, passage) prompts go in one ``candidate_probs`` call. Passages are cut to fit the model's
    context as in generation. Without evidence every claim gets ``fallback`` (counted in
    ``fallbacks``); a model that gives no IsSup probability at all scores 0, the paper's rule.
    """

    def __init__(self, lm: Any, *, fallback: float = 0.5, max_passage_tokens: int | None = None) -> None:
        if not 0.0 <= fallback <= 1.0:
            raise ValueError(f"fallback must lie in [0, 1], not {fallback!r}")
        self.lm = lm
        self.fallback = float(fallback)
        self.max_passage_tokens = max_passage_tokens
        self.calls = self.fallbacks = 0

    def prompts(self, claims: Sequence[str], *, question: str, evidence: Sequence[Document],
                prompt: str | None = None) -> list[list[str]]:
        """Per claim, one IsSup prompt per evidence passage."""
        base = prompt if prompt is not None else format_prompt(build_instruction(question.strip()))
        texts = [T.neutralise(strip_citations(T.strip_reflection_tokens(c))) for c in claims]
        room = max((self._tokens(t) for t in texts), default=1)  # the claim takes the answer's place
        fitter = EvidenceFitter(self.lm, room, limit=self.max_passage_tokens)
        frames = [fitter.prompt(base, document_title(d), d.page_content)[0] + T.RELEVANT for d in evidence]
        return [[frame + text for frame in frames] for text in texts]

    def _tokens(self, text: str) -> int:
        return len(self.lm.tokenize(text, add_bos=False)) + 1 if can_tokenize(self.lm) else 1

    def score(self, claims: Sequence[str], *, question: str, entity: str | None = None,
              evidence: Sequence[Document] = (), samples: Sequence[str] = (),
              prompt: str | None = None) -> list[float]:
        if not claims:
            return []
        if not evidence:
            self.fallbacks += len(claims)
            return [self.fallback] * len(claims)
        grid = self.prompts(claims, question=question, evidence=evidence, prompt=prompt)
        flat = [p for row in grid for p in row]
        probs = self.lm.candidate_probs(flat, ISSUP)
        self.calls += 1
        width = len(evidence)
        return [max(S.issup_score(p) for p in probs[i * width:(i + 1) * width]) for i in range(len(claims))]
