"""Byte-exact Self-RAG prompt formats, task instructions and evidence formatting, and the one parser that
reads such a prompt back into its parts (:func:`parse_prompt`).

See ``REFERENCE.md`` of the project: these strings must match what the published checkpoints saw
in training, so they are not templated through LangChain prompt classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import SelfRAGError
from .tokens import FULLY_SUPPORTED, NO_RETRIEVAL, PARAGRAPH_END, PARAGRAPH_START, RELEVANT, RETRIEVAL, Kind, neutralise

PROMPT_NO_INPUT = "### Instruction:\n{instruction}\n\n### Response:\n"
PROMPT_WITH_INPUT = "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"

#: Task instructions used in the paper's evaluation.
TASK_INSTRUCTIONS: dict[str, str] = {
    "fever": "Is the following statement correct or not? Say true if it's correct; otherwise say false.",
    "arc_c": "Given four answer candidates, A, B, C and D, choose the best answer choice.",
    "asqa": (
        "Answer the following question. The question may be ambiguous and have multiple correct "
        "answers, and in that case, you have to provide a long-form answer including all correct "
        "answers."
    ),
}

#: Joins a task instruction and the question at inference time.
INSTRUCTION_JOIN = "\n\n## Input:\n\n"
#: The variant used in the published training data.
TRAINING_INSTRUCTION_JOIN = "## Input:\n\n"


def format_prompt(instruction: str, input: str | None = None) -> str:
    """The Alpaca-style prompt. All Self-RAG inference uses the no-input form."""
    if input:
        return PROMPT_WITH_INPUT.format(instruction=instruction, input=input)
    return PROMPT_NO_INPUT.format(instruction=instruction)


def format_options(options: Sequence[str] | Mapping[str, str]) -> str:
    """Multiple-choice options as ``"\\nA: ...\\nB: ..."``."""
    return "".join(f"\n{label}: {text}" for label, text in _option_items(options))


def build_instruction(
    question: str,
    task_instruction: str | None = None,
    options: Sequence[str] | Mapping[str, str] | None = None,
    *,
    training: bool = False,
) -> str:
    """Join an optional task instruction, the (neutralised) question and optional options."""
    body = neutralise(question)
    if options:
        body += format_options({k: neutralise(v) for k, v in _option_items(options)})
    if not task_instruction:
        return body
    join = TRAINING_INSTRUCTION_JOIN if training else INSTRUCTION_JOIN
    return task_instruction + join + body


def _option_items(options: Sequence[str] | Mapping[str, str]) -> list[tuple[str, str]]:
    if isinstance(options, Mapping):
        return list(options.items())
    return [(chr(ord("A") + i), text) for i, text in enumerate(options)]


def format_evidence(title: str | None, text: str) -> str:
    """``<paragraph>title\\ntext</paragraph>`` with both parts neutralised."""
    return PARAGRAPH_START + neutralise(title or "") + "\n" + neutralise(text) + PARAGRAPH_END


def with_evidence(prompt: str, title: str | None, text: str) -> str:
    """Append retrieved evidence to a prompt, exactly as the checkpoints expect."""
    return prompt + RETRIEVAL + format_evidence(title, text)


def without_retrieval(prompt: str) -> str:
    """The no-retrieval continuation of a prompt."""
    return prompt + NO_RETRIEVAL


def critique_positions(question: str, title: str | None, passage: str, answer: str) -> dict[Kind, str]:
    """The prompts that end where each critique group is read: after the question (Retrieve), after the
    passage (IsRel), after a relevant answer to it (IsSup) and after that answer's full support (IsUse)."""
    asked = format_prompt(build_instruction(question))
    evidence = with_evidence(asked, title, passage)
    answered = evidence + RELEVANT + answer
    return {Kind.RETRIEVE: asked, Kind.ISREL: evidence, Kind.ISSUP: answered, Kind.ISUSE: answered + FULLY_SUPPORTED}


# -- reading a Self-RAG prompt back: the one parser -------------------------------------------------
_HEAD, _RESPONSE = PROMPT_NO_INPUT.split("{instruction}")
#: What opens an evidence block of a response.
EVIDENCE_OPEN = RETRIEVAL + PARAGRAPH_START


class PromptFormatError(SelfRAGError, ValueError):
    """Text that is not a Self-RAG inference prompt (``### Instruction: ... ### Response:``)."""


@dataclass(frozen=True)
class Evidence:
    """One ``[Retrieval]<paragraph>title\\npassage</paragraph>`` block of a response: where it starts and
    ends in the response, its title (None when empty) and its passage."""

    start: int
    end: int
    title: str | None
    passage: str


@dataclass(frozen=True)
class ParsedPrompt:
    """A Self-RAG inference prompt (:func:`format_prompt` plus the response so far) in parts: the
    instruction, the response (reflection tokens and evidence kept) and its complete evidence blocks."""

    instruction: str
    response: str
    evidence: tuple[Evidence, ...]


def parse_prompt(prompt: str) -> ParsedPrompt:
    """The parts of a Self-RAG inference prompt; :class:`PromptFormatError` for other text."""
    if not prompt.startswith(_HEAD) or _RESPONSE not in prompt:
        raise PromptFormatError(f"not a Self-RAG prompt (### Instruction: ... ### Response:): {prompt[:60]!r}")
    instruction, response = prompt[len(_HEAD):].split(_RESPONSE, 1)
    blocks, pos = [], 0
    while (at := response.find(EVIDENCE_OPEN, pos)) >= 0:
        end = response.find(PARAGRAPH_END, at)
        if end < 0:
            break
        title, _, passage = response[at + len(EVIDENCE_OPEN) : end].partition("\n")
        pos = end + len(PARAGRAPH_END)
        blocks.append(Evidence(at, pos, title or None, passage))
    return ParsedPrompt(instruction, response, tuple(blocks))
