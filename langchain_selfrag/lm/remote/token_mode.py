"""Token mode (vLLM): prompts as token ids, generated ids and log-probs by id; exact."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ... import tokens as T
from ..protocol import ReflectionLMError
from .http import response_field


class TokenModeMixin:
    """Greedy segments and log-probs read by token id (mixed into :class:`~.model.RemoteReflectionLM`)."""

    def _greedy_tokens(self, prompt_ids: list[list[int]], max_new_tokens: int, sampling: dict[str, Any] | None = None):
        exact = self.capabilities.logprob_token_ids
        body: dict[str, Any] = {"prompt": prompt_ids, "max_tokens": max_new_tokens,
                                "logprobs": 1 if exact else self.capabilities.max_logprobs,
                                "return_token_ids": True, "return_tokens_as_token_ids": True, **(sampling or {})}
        if exact and self._critique_ids:
            body["logprob_token_ids"] = self._critique_ids
        if self._stop_at_retrieval and T.RETRIEVAL in self.reflection_ids:
            body["stop_token_ids"] = [self.reflection_ids[T.RETRIEVAL]]
        out = self._complete(body)
        results = []
        for choice in self._choices(out, len(prompt_ids)):
            ids = response_field(choice, "token_ids")
            logps = response_field(choice, "logprobs", "token_logprobs")
            tops = response_field(choice, "logprobs", "top_logprobs")
            if not (len(ids) == len(logps) == len(tops)):
                raise ReflectionLMError("malformed response: token_ids and logprobs differ in length")
            if choice.get("finish_reason") == "stop" and choice.get("stop_reason") is None and ids:
                self.eos_ids.add(ids[-1])  # vLLM keeps the end-of-sequence id in token_ids
            per_pos = []
            for tid, top in zip(ids, tops):
                group = self._groups.get(tid)
                per_pos.append(self._id_probs(top or {}, group, exact=exact) if group else {})
            results.append((list(ids), [float(x) for x in logps], per_pos))
        return results

    def _choices(self, out: dict, n: int) -> list[dict]:
        choices = sorted(out["choices"], key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        if len(choices) != n or not all(isinstance(c, dict) for c in choices):
            raise ReflectionLMError(f"malformed response: expected {n} choices, got {len(choices)}")
        return choices

    def _id_probs(self, top: dict, ids: Sequence[int], *, exact: bool) -> dict[int, float]:
        """Probabilities of ``ids`` from a ``top_logprobs`` entry keyed ``token_id:N`` or by text."""
        if not isinstance(top, dict):
            raise ReflectionLMError(f"malformed response: top_logprobs entry is {type(top).__name__}")
        by_id: dict[int, float] = {}
        for key, lp in top.items():
            if isinstance(key, str) and key.startswith("token_id:") and key[9:].lstrip("-").isdigit():
                by_id[int(key[9:])] = float(lp)
        if not by_id:  # keyed by text: map each wanted id through its piece
            for tid in ids:
                piece = self.decode([tid])
                if piece and piece in top:
                    by_id[tid] = float(top[piece])
        probs = {tid: math.exp(by_id[tid]) if tid in by_id else 0.0 for tid in ids}
        if exact and len(by_id.keys() & set(ids)) == len(ids):
            return probs
        if exact:
            raise ReflectionLMError("malformed response: requested logprob_token_ids are missing")
        if len(by_id.keys() & set(ids)) < len(ids):
            self._mark_approximate(f"read from the top-{self.capabilities.max_logprobs} log-probs; ids outside "
                                   "them count as 0 and the group is renormalised")
            total = sum(probs.values())
            return {tid: p / total if total > 0 else 0.0 for tid, p in probs.items()}
        return probs

    @staticmethod
    def _prompt_tail_logprob(choice: dict, seq: list[int], n: int) -> float:
        entries = response_field(choice, "prompt_logprobs")
        if not isinstance(entries, list) or len(entries) < len(seq):
            raise ReflectionLMError("malformed response: prompt_logprobs shorter than the prompt")
        total = 0.0
        for pos in range(len(seq) - n, len(seq)):
            entry = entries[pos] or {}
            value = entry.get(str(seq[pos]), entry.get(seq[pos]))
            if isinstance(value, dict):
                value = value.get("logprob")
            if not isinstance(value, (int, float)):
                raise ReflectionLMError(f"malformed response: no prompt logprob for token {seq[pos]} at {pos}")
            total += float(value)
        return total
