"""A model's prompt layout: how a Self-RAG prompt is laid out for the model that reads it (pure).

The graph, the scorers and calibration build every prompt in the paper's layout
(:mod:`~langchain_selfrag.prompts`), the one the published checkpoints were trained on. A model may
declare another layout, recorded in the model itself (:mod:`~langchain_selfrag.layout_record`);
its backend lays each prompt out that way just before tokenizing, so nothing upstream changes.

====================  ==========================================================================
``paper``             the paper's prompt, byte for byte (every model without a record)
``chatml``            Qwen2.5's chat layout (ChatML): the question and the last retrieved passage
                      in the user's turn, in the words of
                      :class:`~langchain_selfrag.questions.ReflectionQuestions`' answer
                      request; the reflection tokens and the answer in the assistant's turn
``chatml-questions``  ChatML, one question per reflection group: each group is asked in the
                      user's turn with ``ReflectionQuestions``' words and read as the group's
                      reflection token at the start of the reply; the answer is written to the
                      answer request (:class:`~langchain_selfrag.lm.question_layout.QuestionLayoutLM`)
====================  ==========================================================================

In ``chatml`` the Retrieve decision is read at the start of the assistant's turn with the question
alone; after retrieval the passage goes into the user's turn, the assistant's turn starts with the
IsRel token, and ``[Retrieval]<paragraph>...</paragraph>`` never appears in the assistant's text.

``chatml-questions`` lays out no single prompt: a model that records it is read through
:class:`~langchain_selfrag.lm.question_layout.QuestionLayoutLM`, which puts each question to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import tokens as T
from .chatml import chat_safe, chatml
from .errors import SelfRAGError
from .prompts import EVIDENCE_OPEN, PromptFormatError, parse_prompt
from .questions import INSTRUCTION_FIRST_WITH_PASSAGE, ReflectionQuestions

#: The GGUF metadata key that holds a model's layout name.
GGUF_KEY = "selfrag.prompt_layout"
#: The key of a transformers folder's ``config.json`` (and of an adapter's ``selfrag_training.json``).
CONFIG_KEY = "selfrag_prompt_layout"

PAPER = "paper"
CHATML = "chatml"
CHATML_QUESTIONS = "chatml-questions"


class PromptLayoutError(SelfRAGError, ValueError):
    """A layout name this package does not know, or a prompt the layout cannot lay out."""


@dataclass(frozen=True)
class SelfRAGPrompt:
    """A paper-layout prompt in parts: the instruction, the response so far without its last passage,
    and that passage (title, text) when the response holds one."""

    instruction: str
    response: str
    title: str | None = None
    passage: str | None = None


def split_prompt(prompt: str) -> SelfRAGPrompt:
    """The parts of a paper-layout inference prompt (``format_prompt`` plus the response so far).

    ``response`` keeps its reflection tokens; every ``[Retrieval]<paragraph>...</paragraph>`` block is
    taken out of it, the last one becoming the passage. Raises :class:`PromptLayoutError` for text
    that is not a Self-RAG prompt.
    """
    try:
        parsed = parse_prompt(prompt)
    except PromptFormatError as exc:
        raise PromptLayoutError(str(exc)) from None
    if not parsed.evidence:
        return SelfRAGPrompt(parsed.instruction, parsed.response)
    kept, pos = [], 0
    for block in parsed.evidence:
        kept.append(parsed.response[pos : block.start])
        pos = block.end
    kept.append(parsed.response[pos:])
    last = parsed.evidence[-1]
    return SelfRAGPrompt(parsed.instruction, "".join(kept), last.title, last.passage)


@dataclass(frozen=True)
class PromptLayout:
    """A named way of laying out Self-RAG prompts; ``paper`` returns them unchanged."""

    name: str
    system: str = ""
    with_passage: str = ""
    without_passage: str = ""

    @property
    def is_paper(self) -> bool:
        return self.name == PAPER

    @property
    def asks_questions(self) -> bool:
        """Each reflection group is its own question (``chatml-questions``): no one prompt to lay out."""
        return self.name == CHATML_QUESTIONS

    def _single_prompt(self) -> None:
        if self.asks_questions:
            raise PromptLayoutError(f"{self.name!r} asks one question per reflection group and lays out no single "
                                    "prompt: load the model with load_reflection_lm, which reads it that way")

    def render(self, prompt: str) -> str:
        """``prompt`` (paper layout) as this layout lays it out."""
        if self.is_paper:
            return prompt
        self._single_prompt()
        parts = split_prompt(prompt)
        template = self.without_passage if parts.passage is None else self.with_passage
        user = template.format(question=chat_safe(parts.instruction), title=chat_safe(parts.title or ""),
                               passage=chat_safe(parts.passage or ""))
        return chatml(self.system, user, parts.response)

    def training_examples(self, prompt: str, output: str, no_loss_spans: Sequence[Sequence[int]] = ()) -> list[dict[str, Any]]:
        """A paper-layout training example (``prompt`` + ``output``) as this layout's examples.

        Each is ``{"prompt", "output", "no_loss_spans", "eos"}``: the rendered context, the text to
        learn after it, the character spans of that text read but not learned, and whether the
        example ends with the end-of-turn token. ``paper`` gives the example back unchanged. A chat
        layout cuts the output after each ``[Retrieval]`` (its passage goes into the next example's
        user turn, so the example that asks ends there, without end of turn).
        """
        spans = [(int(s), int(e)) for s, e in no_loss_spans]
        self._single_prompt()
        if self.is_paper:
            return [{"prompt": prompt, "output": output, "no_loss_spans": spans, "eos": True}]
        examples, context, pos = [], prompt, 0
        while True:
            at = output.find(EVIDENCE_OPEN, pos)
            end = output.find(T.PARAGRAPH_END, at) if at >= 0 else -1
            if at < 0 or end < 0:
                examples.append(self._example(context, output, pos, len(output), spans, eos=True))
                return examples
            cut = at + len(T.RETRIEVAL)
            if cut > pos:
                examples.append(self._example(context, output, pos, cut, spans, eos=False))
            pos = end + len(T.PARAGRAPH_END)
            context = prompt + output[:pos]

    def _example(self, context: str, output: str, start: int, end: int, spans, *, eos: bool) -> dict[str, Any]:
        inside = [(max(s, start) - start, min(e, end) - start) for s, e in spans if s < end and e > start]
        return {"prompt": self.render(context), "output": output[start:end], "no_loss_spans": inside, "eos": eos}


PAPER_LAYOUT = PromptLayout(PAPER)


def _chatml() -> PromptLayout:
    questions = ReflectionQuestions()
    return PromptLayout(CHATML, system=questions.system, with_passage=INSTRUCTION_FIRST_WITH_PASSAGE,
                        without_passage=questions.answer_without_passage)


def layout_named(name: str | None) -> PromptLayout:
    """The layout called ``name``; None or ``""`` is the paper's. Raises :class:`PromptLayoutError`."""
    if not name or name == PAPER:
        return PAPER_LAYOUT
    if name == CHATML:
        return _chatml()
    if name == CHATML_QUESTIONS:
        return PromptLayout(CHATML_QUESTIONS)
    raise PromptLayoutError(f"unknown prompt layout {name!r}: this version of langchain-selfrag knows "
                            f"{', '.join(LAYOUT_NAMES)} (a newer version may know more)")


LAYOUT_NAMES: tuple[str, ...] = (PAPER, CHATML, CHATML_QUESTIONS)
#: The layouts a model can be trained in token by token (LoRA, a reflection head): one prompt each.
SINGLE_PROMPT_LAYOUTS: tuple[str, ...] = (PAPER, CHATML)


def layout_of_config(config: Mapping[str, Any] | None) -> PromptLayout:
    """The layout a ``config.json``-like mapping records under :data:`CONFIG_KEY` (paper when it records none)."""
    name = (config or {}).get(CONFIG_KEY)
    if name is not None and not isinstance(name, str):
        raise PromptLayoutError(f"{CONFIG_KEY} must be a string, not {name!r}")
    return layout_named(name)
