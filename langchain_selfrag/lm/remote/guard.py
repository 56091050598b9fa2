"""The decoding guard over HTTP: one token per request, the banned ids biased away, until content.

The decoding guard (``generate(guard=...)``) runs one token per request until the generation holds
content, the banned ids biased by -100 (``logit_bias``); the rest is one request as before.
End of sequence: token mode adds ``min_tokens=1`` (vLLM bans every end-of-sequence id with it);
text mode bans the ids of common end-of-sequence strings that the server verifiably ends on
(llama-cpp-python drops ``logit_bias`` when ``min_tokens`` is also sent), and a step that still
ends the sequence ends the generation. Log-probs stay those of the unmasked softmax where the
server reports raw log-probs (llama-cpp-python does; vLLM V1 by default). ``guarded`` counts the
steps whose chosen token scored below the best log-prob the server listed.
``stop_at_segment`` cuts the generation after the marker (the server may have generated further).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..protocol import BanHook, StopHook
from ..sampling import TokenSampler, stream_seed
from .http import response_field
from .text_mode import FORCE_BIAS, UNKNOWN_EOS


@dataclass
class GuardedHead:
    """The tokens decoded one by one under the guard, before the rest goes in one request."""

    ids: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    per_pos: list[dict[int, float]] = field(default_factory=list)
    guarded: int = 0
    done: bool = False


def sampling_fields(sampler: TokenSampler | None, step: int) -> dict[str, Any]:
    """Request fields for a sampled request starting at generated token ``step`` ({} when greedy)."""
    if sampler is None:
        return {}
    fields: dict[str, Any] = {"temperature": sampler.temperature, "top_p": sampler.top_p}
    if sampler.seed is not None:
        fields["seed"] = stream_seed(sampler.seed, step) & 0x7FFFFFFF
    return fields


class GuardMixin:
    """The guarded head of each generation (mixed into :class:`~.model.RemoteReflectionLM`)."""

    def _guarded_head(self, prompt: list[int], max_new_tokens: int, stop: StopHook,
                      banned: BanHook, sampler: TokenSampler | None = None) -> GuardedHead:
        """One token per request while ``banned`` bans anything; ``done`` when ``stop`` fired."""
        head = GuardedHead()
        while len(head.ids) < max_new_tokens:
            ban = banned(head.ids)
            if not ban:
                return head
            tid, logp, probs, changed = self._guarded_step(prompt, head.ids, ban,
                                                           sampling_fields(sampler, len(head.ids)))
            head.ids.append(tid)
            head.logps.append(logp)
            head.per_pos.append(probs)
            head.guarded += changed
            if stop(head.ids):
                head.done = True
                return head
        return head

    def _guarded_step(self, prompt: list[int], generated: list[int], ban,
                      sampling: dict[str, Any] | None = None) -> tuple[int, float, dict[int, float], bool]:
        """The next token with ``ban`` biased away: (id, raw log-prob, group probs, ban changed it)."""
        caps = self.capabilities
        banned = {i for i in ban if i >= 0}
        if not caps.token_prompts and UNKNOWN_EOS in ban:
            banned |= self._text_eos_ids()
        body: dict[str, Any] = {"max_tokens": 1, "logit_bias": {str(i): -FORCE_BIAS for i in sorted(banned)},
                                **(sampling or {})}
        if caps.token_prompts:
            exact = caps.logprob_token_ids
            body.update({"prompt": [prompt + generated], "min_tokens": 1, "logprobs": 1 if exact else caps.max_logprobs,
                         "return_token_ids": True, "return_tokens_as_token_ids": True})
            if exact and self._critique_ids:
                body["logprob_token_ids"] = self._critique_ids
            choice = self._choices(self._complete(body), 1)[0]
            tid = int(response_field(choice, "token_ids", 0))
            top = response_field(choice, "logprobs", "top_logprobs", 0) or {}
            group = self._groups.get(tid)
            probs = self._id_probs(top, group, exact=exact) if group else {}
        else:
            body.update({"prompt": self._context_text(prompt + generated), "logprobs": 1})
            choice = response_field(self._complete(body), "choices", 0)
            if not response_field(choice, "logprobs", "tokens"):  # ended on an end-of-sequence id it did not ban
                return UNKNOWN_EOS, self._unreported_eos_logprob(prompt + generated), {}, False
            top = response_field(choice, "logprobs", "top_logprobs", 0) or {}
            tid, probs = self._identify(prompt, generated, response_field(choice, "logprobs", "tokens", 0),
                                        float(response_field(choice, "logprobs", "token_logprobs", 0)))
        logp = float(response_field(choice, "logprobs", "token_logprobs", 0))
        best = max((float(v) for v in top.values()), default=logp)
        return tid, logp, probs, best > logp + 1e-6
