"""The logic every backend shares: :class:`ReflectionLMBase`.

A backend provides a tokenizer and three primitives (teacher-forced continuation log-probs,
next-position probabilities, a greedy/sampled decode loop); this class turns them into the
:class:`~langchain_selfrag.lm.protocol.ReflectionLM` protocol: reflection-token ids, multi-token
candidates, the decoding guard, stop rules, streamed text and reflection-group probabilities.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence

from .. import tokens as T
from ..prompt_layouts import PAPER_LAYOUT, PromptLayout
from .protocol import BanHook, Generation, ReflectionPoint, StopHook, TokenCallback, guard_flags
from .sampling import TokenSampler, make_samplers
from .stopping import _StopRule
from .streaming import AnswerStream


class ReflectionLMBase(ABC):
    """Shared machinery: reflection-token ids, multi-token fallback, group probabilities."""

    has_reflection_vocab: bool = False
    #: True once the backend has given reflection probabilities that are not the model's own softmax
    #: (only a remote server can, see :mod:`~langchain_selfrag.lm.remote`); it stays True.
    approximate: bool = False
    #: Why ``approximate`` is True (each distinct reason once, joined by ``"; "``); None while it is False.
    approximate_reason: str | None = None
    #: True when ``_greedy`` decodes several prompts together (a padded batch); False when it works
    #: through them one by one, so that ``generate`` can finish each before the next starts.
    generates_in_batches: bool = True
    #: How the model lays out the paper-layout prompts it is given (:mod:`~langchain_selfrag.prompt_layouts`):
    #: the layout the model records (:mod:`~langchain_selfrag.layout_record`), set by the backend when it loads the model.
    prompt_layout: PromptLayout = PAPER_LAYOUT
    #: False for a model whose reflection tokens are only replies to questions, never answer text
    #: (:class:`~langchain_selfrag.lm.question_layout.QuestionLayoutLM` sets it): ``generate`` bans them.
    writes_reflection_tokens: bool = True

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
            out.append(self.tokenize(self.prompt_layout.render(p), add_bos=True))
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
        if not self.writes_reflection_tokens and self.has_reflection_vocab:
            bans = [self._without_reflection(ban) for ban in bans]
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

    def _without_reflection(self, ban: BanHook | None) -> BanHook:
        """``ban`` (or nothing) and every reflection token, at every position."""
        never = frozenset(self.reflection_ids.values())
        if ban is None:
            return lambda generated: never
        return lambda generated: never | frozenset(ban(generated))

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
