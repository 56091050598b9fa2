"""The exact bytes of every reflection question the default model is asked and trained on, frozen.

``tests/data/golden_reflection_prompts.json`` holds, for fixed inputs (a passage with a blank line and a
chat marker in it), what ``QuestionLayoutLM`` (the ``chatml-questions`` layout of
``selfrag-qwen2.5-coder-1.5b``) puts to its backend for each reflection group and for the answers, what
the ``chatml`` prompt layout lays out, and what ``training.judge_sft``, ``training.relevance_head`` and
``training.question_head`` render for training. The file was written from the code before the questions
were given one rendering (issue 82); no model is loaded here. Rewrite it only for an intended change of
bytes, which retrains the models: ``python -m tests.unit_tests.test_golden_reflection_prompts --write``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from langchain_selfrag import tokens as T
from langchain_selfrag.lm.protocol import Generation
from langchain_selfrag.lm.question_layout import QuestionLayoutLM
from langchain_selfrag.prompt_layouts import CHATML, CHATML_QUESTIONS, layout_named
from langchain_selfrag.prompts import format_prompt

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden_reflection_prompts.json"

QUESTION = "How does the index keep <|im_end|> markers out of a chunk?"
TITLE = "Indexing"
PASSAGE = "Chunks are cut at headings.\n\nEach chunk keeps its page's title; <|im_end|> is broken by a zero-width space."
ANSWER = "It cuts chunks at headings and breaks chat markers."
EVIDENCE = T.RETRIEVAL + T.PARAGRAPH_START + TITLE + "\n" + PASSAGE + T.PARAGRAPH_END
PAIR = {"question": QUESTION, "title": TITLE, "passage": PASSAGE, "label": 1, "variant": "pair", "answer": ANSWER}


class RecordingBackend:
    """A backend with the reflection tokens that records each text it is given and writes :data:`ANSWER`."""

    has_reflection_vocab = True
    model_path = "/models/golden.gguf"

    def __init__(self) -> None:
        self.prompt_layout = layout_named(CHATML_QUESTIONS)
        self.asked: list[tuple[str, tuple[str, ...]]] = []
        self.written: list[str] = []

    def candidate_probs(self, prompts, candidates):
        self.asked += [(p, tuple(candidates)) for p in prompts]
        return [{c: 1.0 / len(candidates) for c in candidates} for _ in prompts]

    def generate(self, prompts, **_):
        self.written += list(prompts)
        return [Generation(ANSWER, [1, 2, 3], -1.5) for _ in prompts]


def _kind(candidates: tuple[str, ...]) -> str:
    return T.KIND_OF[candidates[0]].value


def inference_prompts() -> dict[str, str]:
    """What the default model's layout puts to its backend, by question, starting from Self-RAG prompts."""
    backend = RecordingBackend()
    lm = QuestionLayoutLM(backend)
    with_passage = format_prompt(QUESTION) + EVIDENCE
    without_passage = format_prompt(QUESTION)
    lm.candidate_probs([without_passage], list(T.GROUPS[T.Kind.RETRIEVE]))
    lm.generate([with_passage], first_candidates=list(T.GROUPS[T.Kind.ISREL]))
    lm.generate([without_passage])
    asked = {}
    for n, (text, candidates) in enumerate(backend.asked):
        key = f"{_kind(candidates)}_without_passage" if n >= len(backend.asked) - 1 else _kind(candidates)
        asked[key] = text
    assert len(backend.written) == 2, backend.written
    asked["answer_with_passage"], asked["answer_without_passage"] = backend.written
    return asked


def layout_prompts() -> dict[str, str]:
    """What the ``chatml`` prompt layout lays a Self-RAG prompt out as, and its training example."""
    layout = layout_named(CHATML)
    example, = layout.training_examples(format_prompt(QUESTION) + EVIDENCE, T.RELEVANT + ANSWER)
    return {"with_passage": layout.render(format_prompt(QUESTION) + EVIDENCE + T.RELEVANT),
            "without_passage": layout.render(format_prompt(QUESTION)),
            "training_example": example["prompt"]}


def training_prompts() -> dict[str, str]:
    """What the training commands render: the judge's and the answer's SFT records, the relevance head's
    feature prompt and the question head's Retrieve question."""
    from langchain_selfrag.questions import ReflectionQuestions, Turn
    from training import judge_sft, question_head, relevance_head

    questions = ReflectionQuestions()
    judged = judge_sft.judge_records([PAIR, PAIR | {"label": 0}], questions)
    written, = judge_sft.answer_records([PAIR], questions, 1)
    return {"judge_sft_isrel_yes": judged[0]["prompt"] + judged[0]["output"],
            "judge_sft_isrel_no": judged[1]["prompt"] + judged[1]["output"],
            "judge_sft_answer": written["prompt"] + written["output"],
            "relevance_head_feature": relevance_head.pair_prompts(relevance_head.isrel_prompt, [PAIR])[0],
            "question_head_retrieve": question_head.retrieve_prompt(Turn(QUESTION, ""))}


def rendered() -> dict[str, dict[str, str]]:
    return {"inference": inference_prompts(), "chatml_layout": layout_prompts(), "training": training_prompts()}


def test_every_question_renders_its_frozen_bytes() -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    now = rendered()
    assert set(now) == set(golden)
    for part, prompts in golden.items():
        assert set(now[part]) == set(prompts), part
        for name, text in prompts.items():
            assert now[part][name] == text, f"{part}.{name} differs from its frozen bytes"


def test_the_frozen_file_holds_every_question_kind() -> None:
    inference = json.loads(GOLDEN.read_text(encoding="utf-8"))["inference"]
    assert set(inference) == {"retrieve", "isrel", "issup", "isuse", "isuse_without_passage",
                              "answer_with_passage", "answer_without_passage"}
    assert all(text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
               for text in inference.values())
    assert "<\u200b|im_end|>" in inference["isrel"] and "headings.\n\nEach" in inference["isrel"]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps(rendered(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")
