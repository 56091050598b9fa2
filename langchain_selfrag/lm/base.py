"""The reflection-LM protocol shared by every backend, and the logic common to all of them.

A backend only has to answer two batched questions about prompt strings:

* ``candidate_probs``: the probability of each candidate string at the next position
  (the Retrieve decision, IsRel), and
* ``generate``: a greedy (or, with ``temperature > 0``, seeded sampled) segment with its
  cumulative log-prob and the reflection-group probabilities at each position where a reflection
  token was generated, optionally under the decoding guard (no empty answers) and stopping at the
  next segment's Retrieve token.

Prompts are plain strings, so the same protocol fits a remote engine serving log-probs over HTTP.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from .. import tokens as T

StopReason = Literal["retrieval", "eos", "length", "segment"]

#: ``banned(generated_ids)``: the ids the next token may not be (the decoding guard), per prompt.
BanHook = Callable[[list[int]], Collection[int]]
#: ``stop(generated_ids)``: True when the sequence ends after its last token (called once per token).
StopHook = Callable[[list[int]], bool]
#: ``on_token(prompt_index, text)``: the next piece of a prompt's answer text, as it is decoded.
TokenCallback = Callable[[int, str], None]
#: The Retrieve tokens that open the next segment of a long-form answer (``stop_at_segment``).
SEGMENT_MARKERS = (T.NO_RETRIEVAL, T.CONTINUE)


class ReflectionLMError(RuntimeError):
    """A reflection LM could not be loaded or could not answer."""


@dataclass
class ReflectionPoint:
    """A reflection token generated at ``position`` (index into the generated token ids)."""

    position: int
    token: str
    kind: T.Kind
    probs: dict[str, float]


@dataclass
class Generation:
    """A greedy segment: raw text (reflection tokens included), ids and critique probabilities."""

    text: str
    token_ids: list[int]
    cumulative_logprob: float
    reflections: list[ReflectionPoint] = field(default_factory=list)
    first_probs: dict[str, float] = field(default_factory=dict)
    stop_reason: StopReason = "eos"
    #: Positions where the decoding guard changed the greedy choice.
    guarded: int = 0

    def probs_for(self, kind: T.Kind) -> dict[str, float] | None:
        """Group probabilities at the last position where a token of ``kind`` was generated."""
        for point in reversed(self.reflections):
            if point.kind is kind:
                return point.probs
        return None

    @property
    def answer(self) -> str:
        """The generated text without reflection tokens or evidence."""
        return T.strip_reflection_tokens(self.text)


@runtime_checkable
class ReflectionLM(Protocol):
    """What the Self-RAG graph needs from a model; all methods are batched over prompts."""

    #: True when the 15 reflection tokens are single (special) tokens of the vocabulary.
    has_reflection_vocab: bool

    def candidate_probs(self, prompts: Sequence[str], candidates: Sequence[str]) -> list[dict[str, float]]:
        """For each prompt, the probability of each candidate string being generated next."""
        ...

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
        """Greedy segments, one per prompt, stopping at ``[Retrieval]``, end of sequence or length.

        ``first_candidates`` are scored at the first generated position (IsRel after evidence).
        ``guard`` (one flag, or one per prompt): until the first content token, end of sequence,
        ``[Utility:k]`` and IsSup tokens cannot be chosen, nor IsRel after the first position
        (content: no reflection, control or end-of-sequence token, with a letter or digit).
        ``stop_at_segment``: also stop at ``[No Retrieval]`` / ``[Continue to Use Evidence]``
        generated after content (stop reason ``"segment"``, the token kept at the end).
        ``temperature`` > 0 samples each token from the softmax of ``logits / temperature`` cut to
        its ``top_p`` nucleus (see :func:`sample_token`); 0 is greedy. Prompt ``i`` of the call draws
        from its own stream seeded by ``(seed, i)``: the same seed and prompts give the same samples,
        copies of one prompt give different ones; ``seed=None`` draws fresh entropy. Log-probs and
        reflection-group probabilities stay those of the model's unmasked softmax.
        ``on_token(i, piece)`` (optional) is called, in the decoding thread, with the answer text of
        prompt ``i`` as it is decoded (reflection tokens and evidence left out); the pieces of a
        prompt concatenate to its ``Generation.answer``. An exception it raises ends the call.
        """
        ...


class ReflectionLMBase(ABC):
    """Shared machinery: reflection-token ids, multi-token fallback, group probabilities."""

    has_reflection_vocab: bool = False
    #: True once the backend has given reflection probabilities that are not the model's own softmax
    #: (only a remote server can, see :mod:`~langchain_selfrag.lm.remote_lm`); it stays True.
    approximate: bool = False
    #: Why ``approximate`` is True (each distinct reason once, joined by ``"; "``); None while it is False.
    approximate_reason: str | None = None
    #: True when ``_greedy`` decodes several prompts together (a padded batch); False when it works
    #: through them one by one, so that ``generate`` can finish each before the next starts.
    generates_in_batches: bool = True

    @property
    def context_length(self) -> int | None:
        """Tokens the model can hold at once (prompt plus generation); None when unknown.

        The graph cuts passages to fit it (``max_passage_tokens``); backends override it.
        """
        return None

    # -- what a backend provides -------------------------------------------------------------
    @abstractmethod
    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        """Token ids of ``text``; reflection-token strings become special ids when they exist."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, reflection tokens kept."""

    @abstractmethod
    def _continuation_logprobs(self, prompt_ids: list[list[int]], continuations: list[list[int]]) -> list[float]:
        """log p(continuation_i | prompt_i) for paired lists (teacher forcing)."""

    @abstractmethod
    def _first_position_probs(self, prompt_ids: list[list[int]], ids: list[int]) -> list[dict[int, float]]:
        """Full-softmax probability of each single id at the next position, per prompt."""

    @abstractmethod
    def _greedy(
        self,
        prompt_ids: list[list[int]],
        max_new_tokens: int,
        first_seqs: list[list[int]],
        stop: StopHook | Sequence[StopHook],
        bans: Sequence[BanHook | None] | None = None,
        *,
        samplers: Sequence[TokenSampler | None] | None = None,
    ) -> list[tuple[list[int], float, list[dict[int, float]], list[float], int]]:
        """Greedy decode until ``stop(generated_ids)`` or the length limit.

        ``stop`` is one hook for every prompt or one per prompt (see :func:`stop_hooks`); it is
        called right after each token of a sequence is appended, also at the length limit.
        Per prompt: (ids, cumulative logprob, per-position probs, first logprobs, guarded). Per-position
        probs hold, for each generated position whose token is a reflection id, the full-softmax
        probabilities of that token's whole group (empty dict elsewhere); first logprobs are
        log p(seq | prompt) of each of ``first_seqs``, scored from the prompt's own KV cache.
        ``bans`` (one hook or None per prompt): the next token is the argmax over the ids not in
        ``bans[i](generated)``; log-probs and group probabilities stay those of the unmasked
        softmax; guarded counts the positions where the ban changed the argmax.
        ``samplers`` (one :class:`TokenSampler` or None per prompt; only passed when one samples):
        a prompt with a sampler takes ``sampler.choose(logits, banned)`` instead of the argmax.
        """

    # -- shared logic ---------------------------------------------------------------------------
    def _init_reflection_vocab(self) -> None:
        """Find which reflection tokens are single ids; call once the tokenizer is ready."""
        ids: dict[str, int] = {}
        for tok in T.REFLECTION_TOKENS:
            seq = self.tokenize(tok, add_bos=False)
            if len(seq) == 1:
                ids[tok] = seq[0]
        self.reflection_ids: dict[str, int] = ids
        self.id_to_reflection: dict[int, str] = {v: k for k, v in ids.items()}
        self.has_reflection_vocab = len(ids) == len(T.REFLECTION_TOKENS)
        self.eos_ids: set[int] = set(self._eos_ids())
        self._control_ids: set[int] = set(self._special_ids())
        self._visible_cache: dict[int, bool] = {}

    def _eos_ids(self) -> Sequence[int]:
        return ()

    def _special_ids(self) -> Sequence[int]:
        """Control tokens of the vocabulary (BOS, chat markers...): never answer text."""
        return ()

    def _encode_prompts(self, prompts: Sequence[str]) -> list[list[int]]:
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not a single string")
        out = []
        for p in prompts:
            if not isinstance(p, str):
                raise TypeError(f"prompt must be a string, got {type(p).__name__}")
            out.append(self.tokenize(p, add_bos=True))
        return out

    def candidate_probs(self, prompts: Sequence[str], candidates: Sequence[str]) -> list[dict[str, float]]:
        """Probability of each candidate string at the next position, per prompt."""
        if not prompts:
            return []
        return self._candidate_probs_ids(self._encode_prompts(prompts), candidates)

    def _candidate_probs_ids(self, prompt_ids: list[list[int]], candidates: Sequence[str]) -> list[dict[str, float]]:
        cand_ids = [self.tokenize(c, add_bos=False) for c in candidates]
        if any(not c for c in cand_ids):
            raise ValueError("candidates must be non-empty strings")
        if all(len(c) == 1 for c in cand_ids):
            first = [c[0] for c in cand_ids]
            results = self._first_position_probs(prompt_ids, first)
            return [{cand: res.get(c[0], 0.0) for cand, c in zip(candidates, cand_ids)} for res in results]
        pairs_p = [p for p in prompt_ids for _ in cand_ids]
        pairs_c = [c for _ in prompt_ids for c in cand_ids]
        logps = self._continuation_logprobs(pairs_p, pairs_c)
        n = len(cand_ids)
        return [
            {cand: math.exp(lp) for cand, lp in zip(candidates, logps[i * n : (i + 1) * n])}
            for i in range(len(prompt_ids))
        ]

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
        """Greedy or sampled segments with reflection probabilities; see :class:`ReflectionLM`.

        Without single-id reflection tokens (``has_reflection_vocab`` False) the guard bans only
        end of sequence, until the first token with a letter or digit.
        """
        samplers = make_samplers(len(prompts), temperature, top_p, seed)
        if not prompts:
            return []
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        guards = guard_flags(guard, len(prompts))
        prompt_ids = self._encode_prompts(prompts)
        first_seqs = [self.tokenize(c, add_bos=False) for c in first_candidates]
        if any(not seq for seq in first_seqs):
            raise ValueError("first_candidates must be non-empty strings")
        rule = _StopRule(self, stop_at_retrieval, stop_at_segment)
        hook = self._ban_hook()
        bans: list[BanHook | None] = [hook if g else None for g in guards]
        streams = [AnswerStream(on_token, i) for i in range(len(prompts))] if on_token is not None else None
        stops: list[StopHook] = (
            [self._streaming_stop(rule, s) for s in streams] if streams is not None else [rule.stop] * len(prompts)
        )

        def finish(raw, prompt_group: Sequence[str], ids_group: list[list[int]], first_index: int) -> list[Generation]:
            gens = []
            for ids, cum, per_pos, first, guarded in raw:
                gen = self._build_generation(ids, cum, per_pos, rule, max_new_tokens)
                gen.first_probs = {c: math.exp(lp) for c, lp in zip(first_candidates, first)}
                gen.guarded = guarded
                gens.append(gen)
            if not self.has_reflection_vocab:
                self._add_text_reflections(prompt_group, ids_group, gens)
            if streams is not None:
                for i, gen in enumerate(gens, start=first_index):
                    streams[i].finish(gen.answer)
            return gens

        def decode(ids_group: list[list[int]], ban_group: list[BanHook | None], sampler_group: list[TokenSampler | None],
                   stop_group: list[StopHook]):
            # Without on_token every prompt shares rule.stop: the call every backend has always had.
            stop: StopHook | list[StopHook] = stop_group if streams is not None else rule.stop
            if all(s is None for s in sampler_group):
                return self._greedy(ids_group, max_new_tokens, first_seqs, stop, ban_group)
            return self._greedy(ids_group, max_new_tokens, first_seqs, stop, ban_group, samplers=sampler_group)

        if self.generates_in_batches:
            return finish(decode(prompt_ids, bans, samplers, stops), prompts, prompt_ids, 0)
        # One prompt at a time: text reflections are scored while the backend's prefix cache
        # still holds this prompt and its generation.
        return [
            gen
            for i, (prompt, ids, ban, sampler) in enumerate(zip(prompts, prompt_ids, bans, samplers))
            for gen in finish(decode([ids], [ban], [sampler], [stops[i]]), [prompt], [ids], i)
        ]

    def _streaming_stop(self, rule: _StopRule, stream: AnswerStream) -> StopHook:
        """``rule.stop`` that first passes the prompt's new answer text to its stream."""

        def stop(generated: list[int]) -> bool:
            stream.update(self._visible_text(generated))
            return rule.stop(generated)

        return stop

    def _visible_text(self, ids: Sequence[int]) -> str:
        """The decoded text of ``ids`` without end-of-sequence tokens (``Generation.text``)."""
        return self.decode([i for i in ids if i not in self.eos_ids])

    def _is_content(self, tid: int) -> bool:
        """A token of answer text: no reflection, control or end-of-sequence token, with a letter or digit.

        Punctuation alone does not count: a guarded model that answers ``:`` has still said nothing.
        """
        if tid in self.eos_ids or tid in self.id_to_reflection or tid in self._control_ids:
            return False
        visible = self._visible_cache.get(tid)
        if visible is None:
            visible = self._visible_cache[tid] = any(ch.isalnum() for ch in self.decode([tid]))
        return visible

    def _has_content(self, ids: Sequence[int]) -> bool:
        return any(self._is_content(t) for t in ids)

    def _ban_hook(self) -> BanHook:
        """The decoding guard: what the next token may not be while ``generated`` holds no content."""
        always = frozenset(self.eos_ids)
        later = always
        if self.has_reflection_vocab:
            critique = (*T.GROUPS[T.Kind.ISUSE], *T.GROUPS[T.Kind.ISSUP])
            always = always | {self.reflection_ids[t] for t in critique}
            later = always | {self.reflection_ids[t] for t in T.GROUPS[T.Kind.ISREL]}
        none: frozenset[int] = frozenset()

        def banned(generated: list[int]) -> Collection[int]:
            if self._has_content(generated):
                return none
            return later if generated else always

        return banned

    def _build_generation(
        self,
        ids: list[int],
        cum: float,
        per_pos: list[dict[int, float]],
        rule: _StopRule,
        max_new_tokens: int,
    ) -> Generation:
        reflections = []
        for pos, (tid, probs) in enumerate(zip(ids, per_pos)):
            tok = self.id_to_reflection.get(tid)
            if tok is None or T.KIND_OF[tok] is T.Kind.EVIDENCE:
                continue
            named = {self.id_to_reflection[i]: p for i, p in probs.items()}
            reflections.append(ReflectionPoint(pos, tok, T.KIND_OF[tok], named))
        text = self._visible_text(ids)
        return Generation(text, ids, cum, reflections, {}, rule.reason(ids, text, max_new_tokens))

    def _add_text_reflections(self, prompts: Sequence[str], prompt_ids: list[list[int]], gens: list[Generation]) -> None:
        """Lower-fidelity path for vocabularies without reflection tokens.

        Reflection-token strings found in the generated text are scored by the sequence
        probability of every token of their group, given the prompt and the generated tokens
        before them (the text re-tokenised when the string starts inside a token).
        """
        for prompt, ids, gen in zip(prompts, prompt_ids, gens):
            for offset, tok in T.find_reflection_tokens(gen.text):
                kind = T.KIND_OF[tok]
                if kind is T.Kind.EVIDENCE:
                    continue
                prefix = self._generated_prefix(gen.token_ids, gen.text[:offset])
                context = (
                    ids + prefix
                    if prefix is not None
                    else self._encode_prompts([prompt + gen.text[:offset]])[0]
                )
                probs = self._candidate_probs_ids([context], T.GROUPS[kind])[0]
                gen.reflections.append(ReflectionPoint(-1, tok, kind, probs))

    def _generated_prefix(self, ids: list[int], text: str) -> list[int] | None:
        """The leading generated ids that decode to exactly ``text``, or None when none do."""
        for k in range(len(ids) + 1):
            decoded = self.decode(ids[:k])
            if len(decoded) >= len(text):
                return ids[:k] if decoded == text else None
        return None

    # -- helpers for backends -------------------------------------------------------------------
    def _group_ids(self) -> dict[int, list[int]]:
        """For each reflection id, the ids of its whole group (evidence delimiters excluded)."""
        out: dict[int, list[int]] = {}
        for kind in T.CRITIQUE_KINDS:
            group = [self.reflection_ids[t] for t in T.GROUPS[kind] if t in self.reflection_ids]
            for i in group:
                out[i] = group
        return out


# -- sampling ---------------------------------------------------------------------------------------
def check_sampling(temperature: float, top_p: float, seed: int | None) -> None:
    """ValueError unless ``temperature >= 0``, ``0 < top_p <= 1`` and ``seed`` is None or an int."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0.0:
        raise ValueError(f"temperature must be a number >= 0, not {temperature!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must lie in (0, 1], not {top_p!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise ValueError(f"seed must be an int or None, not {seed!r}")


def sampling_probs(logits: Any, temperature: float, top_p: float = 1.0, banned: Collection[int] = ()) -> np.ndarray:
    """The distribution :func:`sample_token` draws from (float64, sums to 1; pure).

    softmax(logits / temperature) with ``banned`` ids removed, then cut to its nucleus: the fewest
    most probable ids whose mass reaches ``top_p`` (ties kept in id order), renormalised.
    ``logits`` may be log-probabilities (any shift gives the same result). ``temperature`` > 0.
    """
    if not temperature > 0.0:
        raise ValueError("sampling_probs needs temperature > 0 (temperature 0 is the argmax)")
    x = np.array(logits, dtype=np.float64).reshape(-1) / float(temperature)
    if banned:
        x[np.fromiter(banned, dtype=np.int64)] = -np.inf
    top = x.max()
    if not np.isfinite(top):
        raise ValueError("every id is banned or has -inf logit")
    p = np.exp(x - top)
    p /= p.sum()
    if top_p < 1.0:
        p = _nucleus(p, top_p)
    return p


def _nucleus(p: np.ndarray, top_p: float) -> np.ndarray:
    """``p`` cut to its ``top_p`` nucleus and renormalised.

    Only ids above a small threshold are sorted when they alone reach ``top_p`` (then the nucleus
    lies among them: every id left out ranks below all of them); else every id is sorted.
    """
    want = top_p * p.sum()
    ids = np.flatnonzero(p > p.max() * 1e-6)
    if p[ids].sum() < want:
        ids = np.arange(len(p))
    order = ids[np.argsort(-p[ids], kind="stable")]
    mass = np.cumsum(p[order])
    keep = min(int(np.searchsorted(mass, want, side="left")) + 1, len(order))
    cut = np.zeros_like(p)
    cut[order[:keep]] = p[order[:keep]]
    return cut / cut.sum()


def sample_token(
    logits: Any, temperature: float, top_p: float, rng: np.random.Generator, banned: Collection[int] = ()
) -> int:
    """One id drawn from :func:`sampling_probs` with ``rng``; temperature 0: the argmax over allowed ids."""
    if temperature <= 0.0:
        x = np.array(logits, dtype=np.float64).reshape(-1)
        if banned:
            x[np.fromiter(banned, dtype=np.int64)] = -np.inf
        return int(x.argmax())
    p = sampling_probs(logits, temperature, top_p, banned)
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def stream_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed for the stream ``(seed, *keys)``, e.g. prompt ``i`` of a call (deterministic)."""
    state = np.random.SeedSequence([int(seed) & (2**64 - 1), *(int(k) & (2**64 - 1) for k in keys)])
    return int(state.generate_state(1, np.uint64)[0] >> np.uint64(1))


@dataclass
class TokenSampler:
    """One prompt's sampling stream: temperature, top-p and its own seeded generator."""

    temperature: float
    top_p: float
    rng: np.random.Generator
    #: The stream's seed (None: fresh entropy); remote backends send it to the server.
    seed: int | None = None

    def choose(self, logits: Any, banned: Collection[int] = ()) -> tuple[int, bool]:
        """The next id and whether the ban changed it.

        The id is drawn from the unmasked distribution first; a banned draw is drawn again from
        the distribution without the banned ids (together: a draw from the allowed ids' renormalised
        probabilities), and counts as guarded, as a banned argmax does under greedy decoding.
        """
        tid = sample_token(logits, self.temperature, self.top_p, self.rng)
        if banned and tid in banned:
            return sample_token(logits, self.temperature, self.top_p, self.rng, banned), True
        return tid, False


def make_samplers(n: int, temperature: float, top_p: float, seed: int | None) -> list[TokenSampler | None]:
    """One sampler per prompt (streams ``(seed, i)``), or ``[None] * n`` for greedy decoding."""
    check_sampling(temperature, top_p, seed)
    if temperature == 0.0:
        return [None] * n
    out: list[TokenSampler | None] = []
    for i in range(n):
        s = stream_seed(seed, i) if seed is not None else None
        out.append(TokenSampler(float(temperature), float(top_p), np.random.default_rng(s), s))
    return out


def approximation(lm: Any) -> str | None:
    """Why ``lm``'s reflection probabilities are approximate, or None when they are the model's own.

    Reads ``lm.approximate`` / ``lm.approximate_reason`` (a scheduler passes them on from its
    model); a model without them is exact.
    """
    if getattr(lm, "approximate", False) is not True:
        return None
    reason = getattr(lm, "approximate_reason", None)
    return reason if isinstance(reason, str) and reason else "the backend does not say why"


def guard_flags(guard: bool | Sequence[bool], n: int) -> list[bool]:
    """``guard`` as one flag per prompt; a sequence must have one flag per prompt."""
    if isinstance(guard, bool):
        return [guard] * n
    flags = [bool(g) for g in guard]
    if len(flags) != n:
        raise ValueError(f"guard has {len(flags)} flags for {n} prompts")
    return flags


def stop_hooks(stop: StopHook | Sequence[StopHook], n: int) -> list[StopHook]:
    """``stop`` as one hook per prompt: the same hook ``n`` times, or a sequence of ``n`` hooks."""
    if callable(stop):
        return [stop] * n
    hooks = list(stop)
    if len(hooks) != n:
        raise ValueError(f"{len(hooks)} stop hooks for {n} prompts")
    return hooks


#: Strings that may still be growing into a reflection token (or ``</s>``) at the end of a text.
_MARKUP = (*T.REFLECTION_TOKENS, "</s>")
_EVIDENCE_SPAN = re.compile(re.escape(T.PARAGRAPH_START) + r".*?" + re.escape(T.PARAGRAPH_END), re.DOTALL)


def settled_answer(text: str) -> str:
    """The answer text of a generation so far that later tokens cannot change (pure).

    ``T.strip_reflection_tokens`` of ``text`` cut before an evidence paragraph still open, a tail
    that may be the start of a reflection token or ``</s>``, and trailing U+FFFD (a character whose
    UTF-8 bytes are not all decoded yet).
    """
    end = 0
    for match in _EVIDENCE_SPAN.finditer(text):
        end = match.end()
    open_at = text.find(T.PARAGRAPH_START, end)
    if open_at >= 0:
        text = text[:open_at]
    text = text[: len(text) - _partial_markup(text)].rstrip("\ufffd")
    return T.strip_reflection_tokens(text)


def _partial_markup(text: str) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of a markup string."""
    longest = 0
    for mark in _MARKUP:
        for n in range(min(len(mark) - 1, len(text)), longest, -1):
            if text.endswith(mark[:n]):
                longest = n
                break
    return longest


class AnswerStream:
    """One prompt's answer text, passed on piece by piece as its tokens are decoded.

    :meth:`update` takes the whole generated text so far (reflection tokens kept) after each token
    and sends ``on_token(index, piece)`` what became certain: the :func:`settled_answer` text
    common to this update and the previous one (one token late, so a tokenizer that rewrites the
    end of a text when the next token comes, e.g. ``" n't"``, cannot change what was sent), and only
    when it extends what was sent. :meth:`finish` sends the rest of the final answer.
    """

    def __init__(self, on_token: TokenCallback, index: int) -> None:
        self.on_token = on_token
        self.index = index
        self.sent = ""
        self._last: str | None = None

    def update(self, text: str) -> None:
        current = settled_answer(text)
        last, self._last = self._last, current
        if last is not None:
            self._send(_common_prefix(last, current))

    def finish(self, answer: str) -> None:
        self._send(answer)

    def _send(self, ready: str) -> None:
        if len(ready) > len(self.sent) and ready.startswith(self.sent):
            piece, self.sent = ready[len(self.sent) :], ready
            self.on_token(self.index, piece)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


class _StopRule:
    """When a generation stops and why: end of sequence, ``[Retrieval]``, the next segment."""

    def __init__(self, lm: ReflectionLMBase, stop_at_retrieval: bool, stop_at_segment: bool) -> None:
        self.lm = lm
        self.stop_ids = set(lm.eos_ids)
        if stop_at_retrieval and T.RETRIEVAL in lm.reflection_ids:
            self.stop_ids.add(lm.reflection_ids[T.RETRIEVAL])
        self.segment_ids = {lm.reflection_ids[t] for t in SEGMENT_MARKERS if t in lm.reflection_ids}
        self.stop_at_segment = stop_at_segment
        # Base vocabularies spell the markers in several tokens: look at the decoded text.
        self.text_retrieval = stop_at_retrieval and not lm.has_reflection_vocab
        self.text_segment = stop_at_segment and not lm.has_reflection_vocab

    def stop(self, generated: list[int]) -> bool:
        last = generated[-1]
        if last in self.stop_ids:
            return True
        if self.text_retrieval and self.lm.decode(generated[-8:]).endswith(T.RETRIEVAL):
            return True
        return self._ends_segment(generated)

    def _ends_segment(self, ids: list[int]) -> bool:
        if not self.stop_at_segment or not ids:
            return False
        if not self.text_segment:
            return ids[-1] in self.segment_ids and self.lm._has_content(ids[:-1])
        tail = self.lm.decode(ids[-16:])
        marker = next((m for m in SEGMENT_MARKERS if tail.endswith(m)), None)
        if marker is None:
            return False
        before = self.lm.decode([i for i in ids if i not in self.lm.eos_ids])
        return bool(before.endswith(marker) and T.strip_reflection_tokens(before[: -len(marker)]))

    def reason(self, ids: list[int], text: str, max_new_tokens: int) -> StopReason:
        if ids and ids[-1] in self.lm.eos_ids:
            return "eos"
        if ids and ids[-1] in self.stop_ids:
            return "retrieval"
        if self.text_retrieval and text.rstrip().endswith(T.RETRIEVAL):
            return "retrieval"
        if self._ends_segment(ids):
            return "segment"
        return "length" if len(ids) >= max_new_tokens else "eos"
