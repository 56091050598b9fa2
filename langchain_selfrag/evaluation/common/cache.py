"""A memoising wrapper around a reflection LM, shared by the systems evaluated on one question.

Self-RAG's inference ablations change only how candidates are scored (``w_sup``, hard
constraints) or how many are made (``k=1``); the prompts they send are the ones adaptive and
always-retrieve Self-RAG already sent. Replaying those model calls makes a run of all seven
systems cost little more than three. Each cached entry remembers what it cost to compute, and
``replayed_s`` adds up that cost on every hit, so per-query latencies can still be reported as
if nothing had been cached.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ...lm.protocol import guard_flags


class CachingLM:
    """Forward to ``lm``, answering repeated ``generate`` / ``candidate_probs`` prompts from memory."""

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self._entries: dict[Hashable, tuple[Any, float]] = {}
        self._lock = threading.Lock()
        self.replayed_s = 0.0
        self.hits = 0
        self.misses = 0

    @property
    def has_reflection_vocab(self) -> bool:
        return bool(getattr(self.lm, "has_reflection_vocab", False))

    def __getattr__(self, name: str) -> Any:  # tokenize, decode, backend details
        return getattr(self.lm, name)

    def clear(self) -> None:
        """Forget every entry (call between questions to bound memory)."""
        with self._lock:
            self._entries.clear()

    def _cached(self, keys: list[Hashable], compute: Callable[[list[int]], list[Any]]) -> list[Any]:
        with self._lock:
            missing = [i for i, key in enumerate(keys) if key not in self._entries]
        if missing:
            started = time.perf_counter()
            results = compute(missing)
            cost = (time.perf_counter() - started) / len(missing)
            with self._lock:
                for i, result in zip(missing, results):
                    self._entries[keys[i]] = (result, cost)
        out = []
        with self._lock:
            fresh = set(missing)
            for i, key in enumerate(keys):
                result, cost = self._entries[key]
                if i in fresh:
                    self.misses += 1
                else:
                    self.hits += 1
                    self.replayed_s += cost
                out.append(copy.deepcopy(result))
        return out

    def candidate_probs(self, prompts: Sequence[str], candidates: Sequence[str]) -> list[dict[str, float]]:
        cands = tuple(candidates)
        keys: list[Hashable] = [("probs", p, cands) for p in prompts]
        return self._cached(keys, lambda idx: self.lm.candidate_probs([prompts[i] for i in idx], cands))

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
    ) -> list[Any]:
        """Greedy calls are cached per prompt; sampled calls go straight to the model (not cached:
        a prompt's sample depends on its position in the call)."""
        firsts = tuple(first_candidates)
        guards = guard_flags(guard, len(prompts))
        if temperature:
            return self.lm.generate(prompts, max_new_tokens=max_new_tokens, first_candidates=firsts,
                                    stop_at_retrieval=stop_at_retrieval, guard=guards, stop_at_segment=stop_at_segment,
                                    temperature=temperature, top_p=top_p, seed=seed)
        keys: list[Hashable] = [("gen", p, max_new_tokens, firsts, stop_at_retrieval, g, stop_at_segment)
                                for p, g in zip(prompts, guards)]
        return self._cached(
            keys,
            lambda idx: self.lm.generate(
                [prompts[i] for i in idx],
                max_new_tokens=max_new_tokens,
                first_candidates=firsts,
                stop_at_retrieval=stop_at_retrieval,
                guard=[guards[i] for i in idx],
                stop_at_segment=stop_at_segment,
            ),
        )
