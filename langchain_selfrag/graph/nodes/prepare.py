"""The ``prepare`` node: check the input, build the Self-RAG prompt and reset the search."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.documents import Document
from langgraph.runtime import Runtime

from ... import tokens as T
from ...errors import EmptyQuestionError, InvalidInputError, QuestionTooLongError
from ...passage_budget import check_prompt_fits
from ...prompts import build_instruction, format_prompt
from ..context import SelfRAGContext
from ..state import Beam, SelfRAGState
from .common import context_of


def prepare(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict[str, Any]:
    """Validate the question, build the Self-RAG prompt and reset the search.

    Raises EmptyQuestionError, QuestionTooLongError or InvalidInputError on bad input, and
    QuestionExceedsContextError (before any decoding) when the prompt plus ``max_new_tokens`` per
    segment cannot fit the model's context even without passages.
    """
    ctx = context_of(runtime)
    question = state.get("question")
    if not isinstance(question, str):
        raise InvalidInputError(f"question must be a string, not {type(question).__name__}")
    if not question.strip():
        raise EmptyQuestionError("the question is empty")
    if len(question) > ctx.max_question_chars:
        raise QuestionTooLongError(len(question), ctx.max_question_chars)
    instruction = state.get("instruction")
    if instruction is not None and not isinstance(instruction, str):
        raise InvalidInputError("instruction must be a string or None")
    options = state.get("options")
    if options is not None and not isinstance(options, (list, tuple, Mapping)):
        raise InvalidInputError("options must be a list of strings, a dict of label -> text, or None")
    given = state.get("passages")
    if given is not None:
        if not isinstance(given, (list, tuple)) or not all(isinstance(d, Document) for d in given):
            raise InvalidInputError("passages must be a list of langchain Document objects")
        given = list(given)
    # build_instruction neutralises the question and options; the instruction is untrusted too.
    task = T.neutralise(instruction) if instruction else None
    prompt = format_prompt(build_instruction(question.strip(), task, options or None))
    segments = ctx.config.max_segments if ctx.config.long_form else 1
    check_prompt_fits(ctx.lm, prompt, ctx.config.max_new_tokens, segments=segments)
    root: Beam = {"id": 0, "prefix": "", "segments": [], "score_sum": 0.0, "done": False,
                  "need_retrieval": False, "evidence": [], "last_stop": None, "last_marker": None,
                  "current_passage": None}
    return {
        "prompt": prompt,
        "given_passages": given,
        "passages": [],
        "beams": [root],
        "candidates": [],
        "depth": 0,
        "trace": [],
        "retrieved": False,
        "retrieval_attempted": False,
        "retrieve_probability": None,
        "answer": "",
        "abstained": False,
        "abstain_reason": None,
        "confidence": None,
        "pending_abstain": None,
        "citations": [],
        "claims": [],
        "expected_utility": None,
        "restraint": None,
    }
