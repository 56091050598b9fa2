"""``QuestionLayoutLM``: a Self-RAG model that records the ``chatml-questions`` layout, read that way.

Such a model (e.g. ``selfrag-qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct frozen, its 15 reflection
tokens' output rows fitted, :mod:`training.question_head`) is asked each reflection group in its own
chat layout, one short question each (:class:`~langchain_selfrag.questions.ReflectionQuestions`), and
replies with the group's reflection token; its answers are written to the answer request with the passage
in the user's turn. That is :class:`~.chat_reflection.ChatReflectionLM` with the reflection tokens as the
answer words (:func:`~langchain_selfrag.questions.answered_in_tokens`), over the model's own backend
(llama.cpp, transformers or a server), whose own prompt layout is then the identity: the text it is
given is already laid out.

:func:`~langchain_selfrag.lm.load_reflection_lm` returns one for any model that records the layout,
so no caller names it. Its :attr:`model_path` is the model's, so its calibration is the model's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import tokens as T
from ..prompt_layouts import CHATML_QUESTIONS, PAPER_LAYOUT, PromptLayout, layout_named
from ..questions import ReflectionQuestions, answered_in_tokens
from .chat_reflection import ChatReflectionLM, read_turn
from .protocol import ReflectionLMError

__all__ = ["QuestionLayoutLM", "read_in_its_layout"]


class QuestionLayoutLM(ChatReflectionLM):
    """``model`` (a backend of this package whose vocabulary holds the reflection tokens) asked one
    question per reflection group; options as :class:`ChatReflectionLM` (``write_top``...)."""

    #: A Self-RAG model trained to answer in reflection tokens: its bars are its own calibration, never
    #: those shipped for untrained chat models.
    asks_reflection_questions = False

    def __init__(self, model: Any, *, questions: ReflectionQuestions | None = None, **options: Any) -> None:
        if not getattr(model, "has_reflection_vocab", False):
            raise ValueError(f"{type(model).__name__} has no reflection tokens in its vocabulary: "
                             "the chatml-questions layout reads them as its replies")
        model.prompt_layout = PAPER_LAYOUT  # the questions arrive laid out already
        model.writes_reflection_tokens = False  # its answers are text: the tokens only answer questions
        super().__init__(model, questions=answered_in_tokens(questions or ReflectionQuestions()), **options)
        reuse = getattr(model, "reuse_passage_reads", None)
        self.reads_passages_once = bool(reuse(self.questions.after_passage())) if callable(reuse) else False

    def read_passages(self, prompts: Sequence[str], on_progress: Any = None) -> tuple[int, int, int]:
        """Read the passages of Self-RAG evidence prompts (``with_evidence``: what ``generate`` is given) ahead
        of the questions about them, so that their IsRel questions prefill only the question part.
        ``on_progress(done, total)``; returns (passages read now, passages found read, passages left unread:
        the folder of reads was full). Not to be called while the model answers other calls."""
        if not self.reads_passages_once:
            raise ReflectionLMError(f"{self.name} does not keep its passage reads (a backend other than llama.cpp, "
                                    "or $SELFRAG_PREFIX_CACHE_MB=0)")
        turns = [read_turn(p) for p in prompts]
        asks = [self.asked.render(self.questions.ask(T.Kind.ISREL, turn)) for turn in turns if turn.passage is not None]
        return self._model.read_passages_ahead(asks, on_progress)

    @property
    def prompt_layout(self) -> PromptLayout:
        return layout_named(CHATML_QUESTIONS)

    @property
    def model_path(self) -> Any:
        """The model's own file or folder: its calibration sidecar and card are found beside it."""
        return getattr(self._model, "model_path", None)

    @property
    def name(self) -> str:
        return f"{self.asked.name} (chatml-questions)"


def read_in_its_layout(model: Any, **options: Any) -> Any:
    """``model`` as its recorded layout reads it: a :class:`QuestionLayoutLM` for ``chatml-questions``,
    else ``model`` itself (its backend lays each prompt out)."""
    layout = getattr(model, "prompt_layout", None)
    if isinstance(layout, PromptLayout) and layout.asks_questions:
        return QuestionLayoutLM(model, **options)
    return model
