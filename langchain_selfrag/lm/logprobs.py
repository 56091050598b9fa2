"""Token log-probabilities of a chat reply, as LangChain integrations report them: pure parsing.

``AIMessage.response_metadata["logprobs"]`` holds them in one of two shapes:

* OpenAI's (``langchain-openai``; OpenAI, vLLM, llama.cpp's server, Ollama's ``/v1``):
  ``{"content": [{"token", "logprob", "top_logprobs": [{"token", "logprob"}, ...]}, ...]}``;
* Ollama's own (``langchain-ollama``): the same entries as a plain list.

:func:`first_token_alternatives` reads the first generated token's alternatives, and
:func:`word_probs` turns them into a distribution over the words a question is answered with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


class MissingLogprobs(ValueError):
    """A reply without the token log-probabilities a reflection question is read from."""


class MalformedLogprobs(ValueError):
    """A reply whose log-probabilities are not in a shape LangChain integrations use."""


def _entries(metadata: Mapping[str, Any]) -> list[Any] | None:
    found = metadata.get("logprobs") if isinstance(metadata, Mapping) else None
    if found is None:
        return None
    entries = found.get("content") if isinstance(found, Mapping) else found
    if entries is None:
        return None
    if not isinstance(entries, Sequence) or isinstance(entries, (str, bytes)):
        raise MalformedLogprobs(f"logprobs should be a list of token entries, got {type(entries).__name__}")
    return list(entries)


def _pair(entry: Any) -> tuple[str, float]:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("token"), str):
        raise MalformedLogprobs(f"a logprobs entry needs a 'token' string and a 'logprob' number, got {entry!r:.120}")
    try:
        logprob = float(entry["logprob"])
    except (KeyError, TypeError, ValueError):
        raise MalformedLogprobs(f"a logprobs entry needs a 'logprob' number, got {entry!r:.120}") from None
    if math.isnan(logprob) or logprob > 1e-6:
        raise MalformedLogprobs(f"a log-probability must be <= 0, got {logprob!r} for {entry['token']!r}")
    return entry["token"], min(logprob, 0.0)


def first_token_alternatives(metadata: Mapping[str, Any]) -> list[tuple[str, float]]:
    """``(token, logprob)`` of the first generated token's top alternatives.

    Raises :class:`MissingLogprobs` when the reply carries no log-probabilities, or only the chosen
    token's (no ``top_logprobs``: one token alone would read as certainty), and
    :class:`MalformedLogprobs` when they are in no known shape.
    """
    entries = _entries(metadata)
    if not entries:
        raise MissingLogprobs("the reply carries no token log-probabilities")
    first = entries[0]
    if not isinstance(first, Mapping):
        raise MalformedLogprobs(f"a logprobs entry should be an object, got {first!r:.120}")
    tops = first.get("top_logprobs")
    if not tops:
        raise MissingLogprobs("the reply carries the chosen token's log-probability but no top alternatives "
                              "(top_logprobs)")
    if not isinstance(tops, Sequence) or isinstance(tops, (str, bytes)):
        raise MalformedLogprobs(f"top_logprobs should be a list, got {type(tops).__name__}")
    return [_pair(t) for t in tops]


def reply_logprob(metadata: Mapping[str, Any]) -> tuple[float, int] | None:
    """``(sum of the generated tokens' log-probabilities, number of tokens)``; None without them."""
    entries = _entries(metadata)
    if not entries:
        return None
    pairs = [_pair(e) for e in entries]
    return sum(lp for _, lp in pairs), len(pairs)


def _means(token: str, word: str) -> bool:
    """Does a first token stand for ``word``: the word itself, its start, or the word then punctuation."""
    tok, w = token.strip().lower(), word.lower()
    if not tok:
        return False
    if tok == w or w.startswith(tok):
        return True
    return tok.startswith(w) and not tok[len(w)].isalnum()


def word_probs(alternatives: Sequence[tuple[str, float]], words: Sequence[str]) -> dict[str, float]:
    """The probability of each answer word, normalised over ``words``, from the first token's alternatives.

    A token counts for a word when, stripped and lower-cased, it is the word, a start of it that no
    other word shares (``F`` for ``Fully``), or the word followed by punctuation (``Yes.``); tokens
    that stand for the same word add up (``Yes`` and `` Yes``). When no alternative stands for any
    word the model gave no answer among them: every word gets the same probability.
    """
    mass = dict.fromkeys(words, 0.0)
    for token, logprob in alternatives:
        hits = [w for w in words if _means(token, w)]
        if len(hits) == 1:
            mass[hits[0]] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return {w: 1.0 / len(words) for w in words} if words else {}
    return {w: p / total for w, p in mass.items()}
