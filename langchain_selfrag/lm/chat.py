"""A Self-RAG prompt as a chat model's turn: what it asks (:func:`split_selfrag_prompt`) and ChatML.

Shared by the reader (:mod:`.reader`) and the judge (:mod:`.judge`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import tokens as T
from ..chatml import chat_safe, chatml
from ..prompts import PROMPT_NO_INPUT
from .protocol import ReflectionLMError

_HEAD, _RESPONSE = PROMPT_NO_INPUT.split("{instruction}")
_EVIDENCE_OPEN = T.RETRIEVAL + T.PARAGRAPH_START


@dataclass(frozen=True)
class ReaderTurn:
    """What a Self-RAG prompt asks: the instruction, the answer written so far and the last passage."""

    instruction: str
    written: str
    title: str | None = None
    passage: str | None = None


def split_selfrag_prompt(prompt: str) -> ReaderTurn:
    """The parts of a Self-RAG inference prompt (``format_prompt`` plus segments and evidence).

    Evidence is the last ``[Retrieval]<paragraph>title\\ntext</paragraph>`` when the prompt ends with it;
    ``written`` is the visible text of earlier segments (reflection tokens and evidence left out).
    """
    if not prompt.startswith(_HEAD) or _RESPONSE not in prompt:
        raise ReflectionLMError("ReaderCriticLM takes Self-RAG prompts (### Instruction: ... ### Response:); "
                                f"got {prompt[:60]!r}")
    instruction, rest = prompt[len(_HEAD):].split(_RESPONSE, 1)
    title = passage = None
    at = rest.rfind(_EVIDENCE_OPEN)
    if at >= 0 and rest.endswith(T.PARAGRAPH_END):
        evidence = rest[at + len(_EVIDENCE_OPEN) : -len(T.PARAGRAPH_END)]
        title, _, passage = evidence.partition("\n")
        rest = rest[:at]
    return ReaderTurn(instruction, T.strip_reflection_tokens(rest), title or None, passage)


def split_critique_prompt(prompt: str) -> tuple[ReaderTurn, str]:
    """The turn of a Self-RAG prompt that goes on past its last passage, and the answer written after it.

    ``prompt`` is a Self-RAG prompt whose last evidence paragraph may be followed by reflection tokens
    and answer text (what IsSup and IsUse are read after); the turn holds that passage, and the answer
    is the visible text after it. Without evidence, the answer is the visible text of the response.
    """
    head = split_selfrag_prompt(prompt)  # checks the layout
    rest = prompt[len(_HEAD):].split(_RESPONSE, 1)[1]
    at = rest.rfind(_EVIDENCE_OPEN)
    end = rest.find(T.PARAGRAPH_END, at) if at >= 0 else -1
    if at < 0 or end < 0:
        return ReaderTurn(head.instruction, ""), T.strip_reflection_tokens(rest)
    title, _, passage = rest[at + len(_EVIDENCE_OPEN) : end].partition("\n")
    after = rest[end + len(T.PARAGRAPH_END):]
    return (ReaderTurn(head.instruction, T.strip_reflection_tokens(rest[:at]), title or None, passage),
            T.strip_reflection_tokens(after))


def fill(template: str, turn: ReaderTurn, answer: str | None = None) -> str:
    """``template`` with the turn's title, passage and question (and ``answer``), each made :func:`chat_safe`."""
    return template.format(title=chat_safe(turn.title or ""), passage=chat_safe(turn.passage or ""),
                           question=chat_safe(turn.instruction), answer=chat_safe(answer or ""))


@dataclass(frozen=True)
class ChatPrompt:
    """A chat layout and its system turn: what the reader's and the judge's prompts share."""

    chat: Callable[[str, str, str], str] = chatml
    system: str = "You are a helpful assistant."

    def fill(self, template: str, turn: ReaderTurn) -> str:
        """``template`` with the turn's title, passage and question, each made :func:`chat_safe` (:func:`fill`)."""
        return fill(template, turn)
