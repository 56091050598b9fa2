"""The reflection-LM protocol: what the Self-RAG graph asks of a model, and what it gets back.

A backend only has to answer two batched questions about prompt strings:

* ``candidate_probs``: the probability of each candidate string at the next position
  (the Retrieve decision, IsRel), and
* ``generate``: a greedy (or, with ``temperature > 0``, seeded sampled) segment with its
  cumulative log-prob and the reflection-group probabilities at each position where a reflection
  token was generated, optionally under the decoding guard (no empty answers) and stopping at the
  next segment's Retrieve token.

Prompts are plain strings, so the same protocol fits a remote engine serving log-probs over HTTP.
The logic every backend shares is :class:`~langchain_selfrag.lm.base.ReflectionLMBase`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from .. import tokens as T

StopReason = Literal["retrieval", "eos", "length", "segment"]

#: ``banned(generated_ids)``: the ids the next token may not be (the decoding guard), per prompt.
BanHook = Callable[[list[int]], Collection[int]]
#: ``stop(generated_ids)``: True when the sequence ends after its last token (called once per token).
StopHook = Callable[[list[int]], bool]
#: ``on_token(prompt_index, text)``: the next piece of a prompt's answer text, as it is decoded.
TokenCallback = Callable[[int, str], None]


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
        its ``top_p`` nucleus (see :func:`~langchain_selfrag.lm.sampling.sample_token`); 0 is
        greedy. Prompt ``i`` of the call draws from its own stream seeded by ``(seed, i)``: the
        same seed and prompts give the same samples, copies of one prompt give different ones;
        ``seed=None`` draws fresh entropy. Log-probs and reflection-group probabilities stay those
        of the model's unmasked softmax.
        ``on_token(i, piece)`` (optional) is called, in the decoding thread, with the answer text of
        prompt ``i`` as it is decoded (reflection tokens and evidence left out); the pieces of a
        prompt concatenate to its ``Generation.answer``. An exception it raises ends the call.
        """
        ...


def approximation(lm: Any) -> str | None:
    """Why ``lm``'s reflection probabilities are approximate, or None when they are the model's own.

    Reads ``lm.approximate`` / ``lm.approximate_reason`` (a scheduler passes them on from its
    model); a model without them is exact.
    """
    if getattr(lm, "approximate", False) is not True:
        return None
    reason = getattr(lm, "approximate_reason", None)
    return reason if isinstance(reason, str) and reason else "the backend does not say why"


def guard_flags(guard: bool | Sequence[bool], n: int, error: type[Exception] = ValueError) -> list[bool]:
    """``guard`` as one flag per prompt; a sequence must have one flag per prompt (else ``error``)."""
    if isinstance(guard, bool):
        return [guard] * n
    flags = [bool(g) for g in guard]
    if len(flags) != n:
        raise error(f"guard has {len(flags)} flags for {n} prompts")
    return flags
