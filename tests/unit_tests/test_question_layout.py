"""The ``chatml-questions`` layout: one question per reflection group, answered in reflection tokens, and
the pure parts of the question head that builds such a model (no model is loaded here)."""

from __future__ import annotations

import numpy as np
import pytest

from langchain_selfrag import tokens as T
from langchain_selfrag.questions import ReflectionQuestions, answered_in_tokens
from langchain_selfrag.lm.question_layout import QuestionLayoutLM, read_in_its_layout
from langchain_selfrag.prompt_layouts import (CHATML_QUESTIONS, LAYOUT_NAMES, PAPER_LAYOUT, SINGLE_PROMPT_LAYOUTS,
                                              PromptLayoutError, layout_named)
from langchain_selfrag.prompts import format_prompt
from training.question_head import (reflection_rows, retrieve_prompt, retrieve_questions, shared_direction,
                                    without_bias)

PROMPT = format_prompt("Who wrote Hamlet?") + T.RETRIEVAL + T.PARAGRAPH_START + "Hamlet\nShakespeare wrote Hamlet." + T.PARAGRAPH_END


class FakeModel:
    """A backend with reflection tokens that records what it is asked and answers from a table."""

    has_reflection_vocab = True
    model_path = "/models/questions.gguf"

    def __init__(self, layout=None) -> None:
        self.prompt_layout = layout or layout_named(CHATML_QUESTIONS)
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def candidate_probs(self, prompts, candidates):
        self.asked += [(p, tuple(candidates)) for p in prompts]
        return [{c: (0.3 if c == T.RELEVANT else 0.1) for c in candidates} for _ in prompts]

    def generate(self, prompts, **_):
        raise AssertionError("not asked to write here")


def test_the_layout_is_known_and_lays_out_no_single_prompt() -> None:
    layout = layout_named(CHATML_QUESTIONS)
    assert CHATML_QUESTIONS in LAYOUT_NAMES and CHATML_QUESTIONS not in SINGLE_PROMPT_LAYOUTS
    assert layout.asks_questions and not layout_named("chatml").asks_questions and not PAPER_LAYOUT.asks_questions
    with pytest.raises(PromptLayoutError, match="one question per reflection group"):
        layout.render(PROMPT)
    with pytest.raises(PromptLayoutError, match="load_reflection_lm"):
        layout.training_examples(PROMPT, "[Relevant]Shakespeare.")


def test_questions_answered_in_tokens_map_each_token_to_itself() -> None:
    questions = answered_in_tokens(ReflectionQuestions())
    assert questions.words(T.Kind.ISREL) == [T.RELEVANT, T.IRRELEVANT]
    assert questions.words(T.Kind.ISUSE) == list(T.UTILITY)
    assert questions.tokens_of(T.Kind.ISSUP, {T.FULLY_SUPPORTED: 0.7}) == {
        T.FULLY_SUPPORTED: 0.7, T.PARTIALLY_SUPPORTED: 0.0, T.NO_SUPPORT: 0.0}
    assert questions.isrel == ReflectionQuestions().isrel  # the same questions, other answer words


def test_a_model_recording_the_layout_is_read_through_questions() -> None:
    model = FakeModel()
    lm = read_in_its_layout(model)
    assert isinstance(lm, QuestionLayoutLM)
    assert lm.prompt_layout.name == CHATML_QUESTIONS and lm.model_path == model.model_path
    assert model.prompt_layout is PAPER_LAYOUT  # the questions reach the backend laid out already
    probs = lm.candidate_probs([PROMPT], [T.IRRELEVANT, T.RELEVANT])
    assert probs == [{T.IRRELEVANT: pytest.approx(0.25), T.RELEVANT: pytest.approx(0.75)}]  # renormalised
    (text, candidates), = model.asked
    assert candidates == (T.RELEVANT, T.IRRELEVANT)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert "Does the passage state the answer to the question?" in text and "Shakespeare wrote Hamlet." in text


def test_other_models_are_left_alone_and_a_model_without_the_tokens_is_refused() -> None:
    paper = FakeModel(PAPER_LAYOUT)
    assert read_in_its_layout(paper) is paper
    bare = FakeModel()
    bare.has_reflection_vocab = False
    with pytest.raises(ValueError, match="no reflection tokens"):
        read_in_its_layout(bare)


def test_rows_hold_the_fitted_odds_and_the_words_rows_elsewhere() -> None:
    rng = np.random.default_rng(0)
    h = rng.normal(size=(50, 8)) + np.array([5.0, 3, 0, 0, 0, 0, 0, 0])
    unit, projection = shared_direction(h)
    assert np.isclose(np.linalg.norm(unit), 1) and (projection > 0).all()
    words = {tok: rng.normal(size=8) for tok in (T.RELEVANT, T.IRRELEVANT, T.RETRIEVAL, T.NO_RETRIEVAL)}
    weights, bias = rng.normal(size=8), 0.7
    labels = (h @ weights + bias + rng.logistic(size=50) > 0).astype(float)
    folded = without_bias(h, labels, weights, bias, unit)
    loss = lambda z: float(np.mean(np.log1p(np.exp(-(2 * labels - 1) * z))))  # noqa: E731
    assert loss(h @ folded) <= loss(h @ weights + bias) + 0.02  # as good without the bias
    assert loss(h @ folded) < loss(h @ weights) - 0.01  # and the bias was worth keeping
    rows = reflection_rows(words, folded, 8)
    assert set(rows) == set(T.REFLECTION_TOKENS)
    np.testing.assert_allclose(rows[T.RELEVANT] - rows[T.IRRELEVANT], folded)
    np.testing.assert_allclose(rows[T.RELEVANT] + rows[T.IRRELEVANT], words[T.RELEVANT] + words[T.IRRELEVANT])
    np.testing.assert_allclose(rows[T.RETRIEVAL], words[T.RETRIEVAL])
    np.testing.assert_allclose(rows[T.PARAGRAPH_START], np.zeros(8))  # no answer word
    untrained = reflection_rows(words, None, 8)
    np.testing.assert_allclose(untrained[T.RELEVANT], words[T.RELEVANT])
    both = reflection_rows(words, None, 8, retrieve_weights=folded)  # Retrieve fitted, IsRel the words'
    np.testing.assert_allclose(both[T.RETRIEVAL] - both[T.NO_RETRIEVAL], folded)
    np.testing.assert_allclose(both[T.RETRIEVAL] + both[T.NO_RETRIEVAL], words[T.RETRIEVAL] + words[T.NO_RETRIEVAL])
    np.testing.assert_allclose(both[T.RELEVANT], words[T.RELEVANT])


def test_retrieve_questions_are_drawn_by_label_once_each() -> None:
    rows = ([{"instruction": f"Rewrite sentence {i}.", "output": T.NO_RETRIEVAL + "Done." + T.UTILITY[4]}
             for i in range(5)]
            + [{"instruction": f"Who won race {i}?", "output": T.RETRIEVAL + "<paragraph>t\np</paragraph>",
                "variant": "retrieval"} for i in range(8)] * 2  # each question twice: drawn once
            + [{"instruction": "Unlabelled", "output": "plain text"}])
    drawn = retrieve_questions(rows, 3, seed=1)
    assert [p["label"] for p in drawn] == [0, 0, 0, 1, 1, 1]
    assert len({p["question"] for p in drawn}) == 6
    assert all(p["question"].startswith("Rewrite") == (p["label"] == 0) for p in drawn)
    assert retrieve_questions(rows, 3, seed=1) == drawn  # the same draw for the same seed
    assert len(retrieve_questions(rows, 50)) == 5 + 8  # fewer where the file has fewer


def test_the_retrieve_prompt_is_the_questions_retrieve_ask_in_the_chat_layout() -> None:
    from langchain_selfrag.questions import Turn

    text = retrieve_prompt(Turn("Who won?", "", None, None))
    assert text.startswith("<|im_start|>system\n" + ReflectionQuestions().system)
    assert "Question: Who won?" in text and text.endswith("<|im_start|>assistant\n")


def test_a_model_that_answers_in_questions_never_writes_its_tokens() -> None:
    from langchain_selfrag.lm.base import ReflectionLMBase

    class Base(ReflectionLMBase):  # only the ban is exercised
        reflection_ids = {tok: 100 + i for i, tok in enumerate(T.REFLECTION_TOKENS)}
        tokenize = decode = _continuation_logprobs = _first_position_probs = _greedy = None

    model = Base.__new__(Base)
    never = model._without_reflection(None)([])
    assert never == frozenset(range(100, 100 + len(T.REFLECTION_TOKENS)))
    assert model._without_reflection(lambda generated: {7})([1]) == never | {7}
