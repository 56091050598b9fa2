"""The reflection questions: what a model is asked for each reflection group and for an answer (pure).

A chat model has no reflection tokens, so each Self-RAG decision becomes a question whose answer's
first token is read as a distribution (:mod:`~langchain_selfrag.lm.logprobs`), and an answer is written
with the passage in the user's turn. The questions and the words they are answered with live here once,
for every model that is asked this way (a LangChain chat model over HTTP, a chat GGUF on llama.cpp, a
model of the ``chatml-questions`` layout) and for the training that teaches a model to answer them:

=========  ==============================================  =====================================
group      question (user's turn)                          answer word -> reflection token
=========  ==============================================  =====================================
Retrieve   would documents help answer the question?       Yes -> [Retrieval], No -> [No Retrieval]
IsRel      does the passage state the answer?              Yes -> [Relevant], No -> [Irrelevant]
IsSup      does the passage support the answer?            Yes / Partially / No -> IsSup tokens
IsUse      how useful is the answer, 1 to 5?               1..5 -> [Utility:1..5]
=========  ==============================================  =====================================

A question is asked about a :class:`Turn`: what a Self-RAG prompt asks (:func:`turn_of`,
:func:`critique_turn`, read by :func:`~langchain_selfrag.prompts.parse_prompt`). :func:`in_chatml` lays a
conversation out in ChatML, as a local model is asked and as the models are trained.
Pure: everything here builds strings and maps words; nothing calls a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from . import tokens as T
from .chatml import chat_safe, chatml
from .prompts import EVIDENCE_OPEN, parse_prompt


@dataclass(frozen=True)
class Turn:
    """What a Self-RAG prompt asks: the instruction, the answer written so far and the last passage."""

    instruction: str
    written: str
    title: str | None = None
    passage: str | None = None


def turn_of(prompt: str) -> Turn:
    """The turn of a Self-RAG inference prompt (``format_prompt`` plus segments and evidence).

    The passage is the last ``[Retrieval]<paragraph>title\\ntext</paragraph>`` when the prompt ends with it;
    ``written`` is the visible text before it (reflection tokens and evidence left out). Raises
    :class:`~langchain_selfrag.prompts.PromptFormatError` for other text.
    """
    parsed = parse_prompt(prompt)
    last = parsed.evidence[-1] if parsed.evidence else None
    if last is None or last.end != len(parsed.response) or parsed.response.rfind(EVIDENCE_OPEN) != last.start:
        return Turn(parsed.instruction, T.strip_reflection_tokens(parsed.response))
    return Turn(parsed.instruction, T.strip_reflection_tokens(parsed.response[: last.start]), last.title, last.passage)


def critique_turn(prompt: str) -> tuple[Turn, str]:
    """The turn of a Self-RAG prompt that goes on past its last passage, and the answer written after it.

    ``prompt``'s last evidence paragraph may be followed by reflection tokens and answer text (what IsSup
    and IsUse are read after); the turn holds that passage, and the answer is the visible text after it.
    Without evidence, the answer is the visible text of the response.
    """
    parsed = parse_prompt(prompt)
    last = parsed.evidence[-1] if parsed.evidence else None
    if last is None or parsed.response.rfind(EVIDENCE_OPEN) != last.start:
        return Turn(parsed.instruction, ""), T.strip_reflection_tokens(parsed.response)
    return (Turn(parsed.instruction, T.strip_reflection_tokens(parsed.response[: last.start]), last.title, last.passage),
            T.strip_reflection_tokens(parsed.response[last.end:]))


def fill(template: str, turn: Turn, answer: str | None = None) -> str:
    """``template`` with the turn's title, passage and question (and ``answer``), each made :func:`chat_safe`."""
    return template.format(title=chat_safe(turn.title or ""), passage=chat_safe(turn.passage or ""),
                           question=chat_safe(turn.instruction), answer=chat_safe(answer or ""))


#: A conversation open at the assistant's turn: (system, user).
Conversation = tuple[str, str]

#: The answer request as the ``chatml`` prompt layout asks it: instruction first. A trained format, kept as it was. :class:`ReflectionQuestions` asks with the passage first, as its IsRel
#: and IsSup questions do, so that on a local model the answer reuses its passage's IsRel prefill.
INSTRUCTION_FIRST_WITH_PASSAGE = ("Answer the question from the passage, briefly.\n\nPassage ({title}):\n{passage}\n\n"
                                  "Question: {question}")


def _frozen(mapping: dict[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class ReflectionQuestions:
    """What a chat model is asked for each reflection group and for an answer, and the words it answers with.

    ``answer_words[kind]`` maps each answer word to its reflection token, in the group's order; the
    first token of the model's reply is read against these words (:func:`~langchain_selfrag.lm.logprobs.word_probs`).
    """

    system: str = "You are a helpful assistant."
    retrieve: str = ("Question: {question}\n\nWould passages from the documents help to answer this question "
                     "correctly? Answer Yes or No.")
    isrel: str = ("Passage ({title}):\n{passage}\n\nQuestion: {question}\n\n"
                  "Does the passage state the answer to the question? Answer Yes or No.")
    issup: str = ("Passage ({title}):\n{passage}\n\nQuestion: {question}\n\nAnswer: {answer}\n\n"
                  "Does the passage support the answer? Answer Yes, Partially or No.")
    isuse: str = ("Question: {question}\n\nAnswer: {answer}\n\nHow useful is this answer to the question, "
                  "from 1 (not at all) to 5 (it answers the question fully)? Answer with one digit.")
    answer_with_passage: str = ("Passage ({title}):\n{passage}\n\nQuestion: {question}\n\n"
                                "Answer the question from the passage, briefly.")
    answer_without_passage: str = "Answer the question briefly.\n\nQuestion: {question}"
    answer_words: Mapping[T.Kind, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({
        T.Kind.RETRIEVE: _frozen({"Yes": T.RETRIEVAL, "No": T.NO_RETRIEVAL}),
        T.Kind.ISREL: _frozen({"Yes": T.RELEVANT, "No": T.IRRELEVANT}),
        T.Kind.ISSUP: _frozen({"Yes": T.FULLY_SUPPORTED, "Partially": T.PARTIALLY_SUPPORTED, "No": T.NO_SUPPORT}),
        T.Kind.ISUSE: _frozen({str(i): tok for i, tok in enumerate(T.UTILITY, start=1)}),
    }))

    def words(self, kind: T.Kind) -> list[str]:
        """The answer words of a group, in its order."""
        return list(self.answer_words[kind])

    def tokens_of(self, kind: T.Kind, word_probs: Mapping[str, float]) -> dict[str, float]:
        """The group's reflection-token probabilities from the probabilities of its answer words."""
        return {tok: float(word_probs.get(word, 0.0)) for word, tok in self.answer_words[kind].items()}

    def ask(self, kind: T.Kind, turn: Turn, answer: str | None = None) -> Conversation:
        """The conversation that asks ``kind`` about ``turn`` (IsRel and IsSup need its passage; IsSup
        and IsUse the answer)."""
        template = {T.Kind.RETRIEVE: self.retrieve, T.Kind.ISREL: self.isrel, T.Kind.ISSUP: self.issup,
                    T.Kind.ISUSE: self.isuse}.get(kind)
        if template is None:
            raise ValueError(f"no question for the {kind.value} group")
        if kind in (T.Kind.ISREL, T.Kind.ISSUP) and turn.passage is None:
            raise ValueError(f"the {kind.value} question is about a passage; this turn has none")
        return self.system, fill(template, turn, answer)

    def after_passage(self) -> str | None:
        """The fixed text that follows the passage in the IsRel question when the passage comes before the
        question (a local model's reading of a passage is then the same for every question about it, and is
        kept: :meth:`~langchain_selfrag.lm.llamacpp.LlamaCppReflectionLM.reuse_passage_reads`); else None."""
        head, found, tail = self.isrel.partition("{passage}")
        if not found or "{question}" in head:
            return None
        return tail.split("{", 1)[0] or None

    def answer(self, turn: Turn) -> Conversation:
        """The conversation that asks for the answer, with the passage in the user's turn when there is one."""
        template = self.answer_without_passage if turn.passage is None else self.answer_with_passage
        return self.system, fill(template, turn)


def answered_in_tokens(questions: ReflectionQuestions) -> ReflectionQuestions:
    """``questions`` answered with each group's reflection tokens themselves instead of words: how a model
    with the 15 tokens in its vocabulary, fitted to reply with them, is asked (the ``chatml-questions`` layout)."""
    return replace(questions, answer_words=MappingProxyType({
        kind: _frozen({tok: tok for tok in words.values()}) for kind, words in questions.answer_words.items()}))


def in_chatml(conversation: Conversation, reply: str = "") -> str:
    """``conversation`` laid out in ChatML, open at the assistant's turn (``reply`` after it: a training
    record's answer word or answer): how a local chat model is asked and how the models are trained."""
    system, user = conversation
    return chatml(system, user, reply)
