"""The kept claims as an answer: rewritten with P_rewrite when a rewriter is there, whole sentences otherwise.

Restraint keeps some claims of an answer and drops the rest. The self-restraint paper turns kept claims into text
with P_rewrite ("Write a biography of {entity} ... should include ... the following facts"):
:class:`LLMRewriter` does that through any LangChain chat model or LLM. Without one, the kept
sentences are joined as they are (:func:`join_kept`), and a first kept sentence that opened with a
pronoun whose antecedent was dropped ("He played ...") gets the entity's name instead
(:func:`name_the_subject`), so the answer does not start with a dangling "He".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .claims import model_texts
from .prompts import P_REWRITE, format_facts

_SUBJECT = re.compile(r"^(?P<word>He|She|They|It|His|Her|Their|Its)\b(?P<rest>.*)$", re.DOTALL)
_POSSESSIVE = {"His", "Her", "Their", "Its"}


@runtime_checkable
class ClaimRewriter(Protocol):
    """Turns the kept claims about an entity into fluent text."""

    def rewrite(self, claims: Sequence[str], *, entity: str) -> str:
        """The claims as one answer ("" when it cannot)."""
        ...


def name_the_subject(sentence: str, entity: str | None) -> str:
    """``sentence`` with a leading subject pronoun replaced by ``entity`` ("He was" -> "Ada Quill was",
    "His work" -> "Ada Quill's work"); unchanged without an entity or a leading pronoun."""
    match = _SUBJECT.match(sentence.lstrip())
    if not entity or match is None:
        return sentence
    word, rest = match.group("word"), match.group("rest")
    return (f"{entity}'s" if word in _POSSESSIVE else entity) + rest


def join_kept(sentences: Sequence[str], kept: Sequence[bool], entity: str | None = None) -> str:
    """The kept sentences, space-joined; when a dropped sentence came first, the first kept one
    names its subject (:func:`name_the_subject`)."""
    if len(sentences) != len(kept):
        raise ValueError(f"{len(sentences)} sentences but {len(kept)} flags")
    out = [s for s, k in zip(sentences, kept) if k]
    if out and not kept[0]:
        out[0] = name_the_subject(out[0], entity)
    return " ".join(out)


class LLMRewriter:
    """P_rewrite (Table 4) through a LangChain chat model or LLM: the kept claims as the "facts".

    ``prompt``: another ``str.format`` template with ``{entity}`` and ``{facts}``. The reply is
    stripped; an empty reply gives "" (the caller then joins the sentences). ``calls`` counts prompts.
    """

    def __init__(self, model: Any, *, prompt: str = P_REWRITE) -> None:
        self.model = model
        self.prompt = prompt
        self.calls = 0

    def rewrite(self, claims: Sequence[str], *, entity: str) -> str:
        if not claims:
            return ""
        (reply,) = model_texts(self.model, [self.prompt.format(entity=entity, facts=format_facts(claims))])
        self.calls += 1
        return " ".join(reply.split())
