"""The chat judge: any LangChain chat model or LLM asked, claim by claim, against the passages.

One prompt per claim with the passages; the first True/False-like word of the reply is the
verdict (:func:`parse_verdict`); a reply without one gets ``fallback`` (None by default) and is
counted in ``unparsed``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document

from ....restraint.claims import model_texts
from ....retrieval import document_title

#: The ChatJudge prompt (``{entity}``, ``{passages}``, ``{claim}``).
VERDICT_PROMPT = (
    "You check facts about {entity} against the passages below.\n\n{passages}\n\n"
    "Based only on these passages, is the following claim about {entity} true? "
    "Answer with one word, True or False.\nClaim: {claim}\nAnswer:"
)

_TRUE = {"true", "yes", "correct", "supported", "right"}
_FALSE = {"false", "no", "incorrect", "unsupported", "wrong", "contradicted", "contradictory"}
_TOKEN = re.compile(r"[a-z]+")


def parse_verdict(text: Any) -> bool | None:
    """True / False from a judge's reply, or None when it holds no clear verdict.

    The first verdict word decides (``true``, ``yes``, ``correct``, ``supported`` / ``false``,
    ``no``, ``incorrect``, ``unsupported``, ...), ``not`` right before a true-word flips it
    (``"Not supported"`` is False). Markdown, punctuation and case are ignored. Empty or other
    replies, and non-strings, give None.
    """
    if not isinstance(text, str):
        return None
    words = _TOKEN.findall(text.lower())
    for i, word in enumerate(words):
        if word in _TRUE:
            return not (i > 0 and words[i - 1] == "not")
        if word in _FALSE:
            return False
    return None


def format_passages(passages: Sequence[Document], max_chars: int | None = None) -> str:
    """Passages as ``[n] title: text`` paragraphs (each cut to ``max_chars``)."""
    parts = []
    for n, doc in enumerate(passages, start=1):
        text = doc.page_content if max_chars is None else doc.page_content[:max_chars]
        title = document_title(doc)
        parts.append(f"[{n}] {title}: {text}" if title else f"[{n}] {text}")
    return "\n\n".join(parts)


class ChatJudge:
    """Any LangChain chat model or LLM as the judge (see the module docstring)."""

    def __init__(self, model: Any, *, prompt: str = VERDICT_PROMPT, max_passages: int | None = 10,
                 max_passage_chars: int | None = None, fallback: bool | None = None, model_name: str = "") -> None:
        self.model = model
        self.prompt = prompt
        self.max_passages = max_passages
        self.max_passage_chars = max_passage_chars
        self.fallback = fallback
        self.model_name = model_name or type(model).__name__
        self.unparsed = 0
        self.calls = 0

    @property
    def name(self) -> str:
        return f"chat-{re.sub(r'[^A-Za-z0-9_.-]+', '_', self.model_name)}"

    @property
    def description(self) -> str:
        return (f"chat model {self.model_name}: asked per claim against the entity's passages (True/False; "
                f"a reply without a verdict counts as {self.fallback}); no passages: false")

    def prompts(self, entity: str, claims: Sequence[str], passages: Sequence[Document]) -> list[str]:
        docs = list(passages)[: self.max_passages] if self.max_passages else list(passages)
        context = format_passages(docs, self.max_passage_chars)
        return [self.prompt.format(entity=entity, passages=context, claim=claim) for claim in claims]

    def __call__(self, entity: str, claims: Sequence[str], passages: Sequence[Document]) -> list[bool | None]:
        if not claims:
            return []
        if not passages:
            return [False] * len(claims)
        replies = model_texts(self.model, self.prompts(entity, claims, passages))
        self.calls += len(replies)
        labels: list[bool | None] = []
        for reply in replies:
            verdict = parse_verdict(reply)
            if verdict is None:
                self.unparsed += 1
                verdict = self.fallback
            labels.append(verdict)
        return labels
