"""Text mode (llama-cpp-python's server): text prompts, log-probs of given ids read by forcing them.

A generated token that comes back as text is mapped to its id; a control token (no text) is found
among the reflection tokens by its forced log-prob. End-of-sequence tokens the server does not
report get a stand-in id (:data:`UNKNOWN_EOS`).
"""

from __future__ import annotations

import math
from typing import Any

from ... import tokens as T
from ..protocol import ReflectionLMError
from .http import response_field

#: ``logit_bias`` that makes greedy decoding pick an id (the OpenAI API's maximum).
FORCE_BIAS = 100.0
#: Stand-in id for an end-of-sequence token whose real id the server never reveals (text mode).
UNKNOWN_EOS = -1
#: End-of-sequence strings of common vocabularies, tried (and verified) to ban EOS in text mode.
EOS_STRINGS = ("</s>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<eos>", "<|end|>")


def _grammar_literal(text: str) -> str:
    """A GBNF grammar accepting exactly ``text``."""
    out = []
    for ch in text:
        if ch in '"\\[]':
            out.append("\\" + ch)
        elif ch.isprintable() and ord(ch) < 0x10000:
            out.append(ch)
        else:
            out.append(f"\\U{ord(ch):08X}")
    return 'root ::= "' + "".join(out) + '"'


class TextModeMixin:
    """Forced log-probs and greedy text (mixed into :class:`~.model.RemoteReflectionLM`)."""

    def _text_eos_ids(self) -> set[int]:
        """Ids of :data:`EOS_STRINGS` that are single tokens the server ends generation on (text mode)."""
        if self._eos_found is None:
            found = set()
            for text in EOS_STRINGS:
                ids = self.tokenize(text, add_bos=False)
                if len(ids) != 1 or ids[0] in self.id_to_reflection:
                    continue
                out = self._complete({"prompt": "The", "max_tokens": 1, "logprobs": 0,
                                      "logit_bias": {str(ids[0]): FORCE_BIAS}})
                choice = response_field(out, "choices", 0)
                if choice.get("finish_reason") == "stop" and not (choice.get("logprobs") or {}).get("tokens"):
                    found.add(ids[0])
            self._eos_found = found
        return self._eos_found

    def _unreported_eos_logprob(self, ids: list[int]) -> float:
        """Log-prob of the end-of-sequence token greedy picks after ``ids``: the best one (text mode)."""
        anyid = self.tokenize("a", add_bos=False)[0]
        out = self._complete({"prompt": self._context_text(ids), "max_tokens": 1, "logprobs": 1,
                              "logit_bias": {str(anyid): FORCE_BIAS}})
        top = response_field(out, "choices", 0, "logprobs", "top_logprobs", 0)
        return max(float(v) for v in top.values())

    def _forced_logprob(self, text: str, tid: int) -> float:
        out = self._complete({"prompt": text, "max_tokens": 1, "logprobs": 0, "logit_bias": {str(tid): FORCE_BIAS}})
        values = response_field(out, "choices", 0, "logprobs", "token_logprobs")
        if values == [] and response_field(out, "choices", 0).get("finish_reason") == "stop":
            raise ReflectionLMError(f"{self.base_url} reports no log-prob for token {tid}: it ends generation")
        value = response_field(values, 0)
        if not isinstance(value, (int, float)):
            raise ReflectionLMError(f"malformed response: token_logprobs holds {value!r}")
        return float(value)

    def _forced_sequence(self, text: str, ids: list[int], *, retries: int | None = None) -> float | None:
        """log p(ids | text): the ids forced by ``logit_bias`` under a grammar that spells them."""
        pieces = [self.decode([i]) for i in ids]
        out = self._complete({"prompt": text, "max_tokens": len(ids), "logprobs": 0,
                              "logit_bias": {str(i): FORCE_BIAS for i in set(ids)},
                              "grammar": _grammar_literal("".join(pieces))}, retries=retries)
        logprobs = response_field(out, "choices", 0, "logprobs")
        got, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
        if got != pieces or not isinstance(values, list) or len(values) != len(ids):
            return None
        return float(sum(values))

    def _greedy_text(self, prompt_ids: list[list[int]], max_new_tokens: int, sampling: dict[str, Any] | None = None):
        results = []
        for prompt in prompt_ids:
            text = self._context_text(prompt)
            body: dict[str, Any] = {"prompt": text, "max_tokens": max_new_tokens, "logprobs": 0, **(sampling or {})}
            if self._stop_at_retrieval:
                body["stop"] = [T.RETRIEVAL]
            choice = response_field(self._complete(body), "choices", 0)
            pieces = response_field(choice, "logprobs", "tokens")
            logps = response_field(choice, "logprobs", "token_logprobs")
            if not isinstance(pieces, list) or not isinstance(logps, list) or len(pieces) != len(logps):
                raise ReflectionLMError("malformed response: logprobs.tokens and token_logprobs differ")
            ids: list[int] = []
            per_pos: list[dict[int, float]] = []
            for piece, lp in zip(pieces, logps):
                tid, probs = self._identify(prompt, ids, piece, lp)
                ids.append(tid)
                per_pos.append(probs)
                if tid == self.reflection_ids.get(T.RETRIEVAL) and self._stop_at_retrieval:
                    break
            logps = [float(x) for x in logps[: len(ids)]]
            joined = "".join(pieces)
            if (choice.get("finish_reason") == "stop" and len(ids) == len(pieces) and len(ids) < max_new_tokens
                    and T.RETRIEVAL not in joined):
                # The server stopped at an end-of-sequence token it does not report: add it with the
                # log-prob of the best next token, which is that end-of-sequence token.
                logps.append(self._unreported_eos_logprob(prompt + ids))
                ids.append(UNKNOWN_EOS)
                per_pos.append({})
            results.append((ids, logps, per_pos))
        return results

    def _identify(self, prompt: list[int], generated: list[int], piece: str, logprob: float) -> tuple[int, dict]:
        """The id of a generated token the server reported only as text, and its group probabilities."""
        if piece:
            ids = self.tokenize(piece, add_bos=False)
            if len(ids) == 1 and self._pieces.get(ids[0], piece) == piece:
                self._pieces[ids[0]] = piece
                return ids[0], {}
            return self._stand_in(piece), {}  # text we can reproduce but whose id we cannot name
        if self.reflection_ids:
            # A control token: greedy picked it, so among the reflection tokens it has the best
            # forced log-prob, and that log-prob is the one the server reported for it (sampling:
            # the reflection token whose forced log-prob is nearest the reported one).
            ctx = self._context_text(prompt + generated)
            lps = {tid: self._forced_logprob(ctx, tid) for tid in self.id_to_reflection}
            best = max(lps, key=lps.__getitem__)
            if self._sampling:  # a sampled token need not be the best: the one whose log-prob was reported
                best = min(lps, key=lambda tid: abs(lps[tid] - logprob))
            if abs(lps[best] - logprob) <= 0.5:
                group = self._groups.get(best)
                return best, ({i: math.exp(lps[i]) for i in group} if group else {})
        self._mark_approximate("a generated token came back without text and is no reflection token")
        return self._stand_in(""), {}

    def _stand_in(self, piece: str) -> int:
        """A negative id standing for generated text whose real id the server does not reveal."""
        if piece not in self._synthetic:
            self._synthetic[piece] = -1000 - len(self._synthetic)
            self._pieces[self._synthetic[piece]] = piece
        return self._synthetic[piece]
