"""Abstention by default when the evidence is absent, the paper preset, and corrective retrieval.

Fast tests drive the graph with ``FakeReflectionLM`` (the reflection tokens are scripted) over a
real BM25 retriever on the invented corpus ``tests/data/invented_corpus.json``, and rewrite with
langchain_core's fake chat model. The slow test runs the bundled model end to end over the same
corpus, indexed into the embedded Chroma store, through ``SelfRAGChain`` with the defaults.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cookbook.selfrag_smollm2.realworld import index_corpus, right
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.graph import ABSTAIN_ANSWER

CORPUS = json.loads((Path(__file__).resolve().parents[1] / "data" / "invented_corpus.json").read_text())


# -- the bundled model, end to end ----------------------------------------------------------------
@pytest.fixture(scope="module")
def outputs(bundled_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Question -> SelfRAGChain (defaults) output, over the corpus indexed by ``selfrag index``."""
    from langchain_selfrag.lm import load_reflection_lm
    from langchain_selfrag.retrieval import open_store

    store = index_corpus(CORPUS, tmp_path_factory.mktemp("abstention"))  # `selfrag index`, as a user indexes
    chain = SelfRAGChain(load_reflection_lm(bundled_gguf), open_store(store))
    questions = [q["question"] for q in CORPUS["answerable"]] + CORPUS["unanswerable_invented"] \
        + CORPUS["unanswerable_real_world"]
    return {q: chain.invoke(q) for q in questions}


def _rejection(outputs: dict[str, dict[str, Any]], questions: list[str]) -> tuple[float, list[str]]:
    answered = [f"{q!r} -> {outputs[q]['answer']!r}" for q in questions if not outputs[q]["abstained"]]
    for q in questions:
        if outputs[q]["abstained"]:
            assert outputs[q]["answer"] == ABSTAIN_ANSWER and outputs[q]["abstain_reason"]
    return 1 - len(answered) / len(questions), answered


@pytest.mark.slow
def test_bundled_model_answers_from_the_corpus_and_abstains_on_real_world_questions(
        outputs: dict[str, dict[str, Any]]) -> None:
    assert len(CORPUS["answerable"]) >= 20
    assert len(CORPUS["unanswerable_invented"]) + len(CORPUS["unanswerable_real_world"]) >= 20
    given = [q for q in CORPUS["answerable"] if not outputs[q["question"]]["abstained"]]
    missed = [f"{q['question']!r} -> {outputs[q['question']]['answer']!r} ({outputs[q['question']]['abstain_reason']})"
              for q in CORPUS["answerable"] if not right(q, outputs[q["question"]])]
    # trust is selective: what it answers is right, and it answers most of what the corpus states
    coverage = len(given) / len(CORPUS["answerable"])
    accuracy = sum(right(q, outputs[q["question"]]) for q in given) / max(len(given), 1)
    assert coverage >= 0.75 and accuracy >= 0.9, (f"answerable: coverage {coverage:.2f}, selective accuracy "
                                                  f"{accuracy:.2f}; not right:\n" + "\n".join(missed))
    rejection, answered = _rejection(outputs, CORPUS["unanswerable_real_world"])
    assert rejection >= 0.9, f"real-world questions abstained {rejection:.2f}; answered:\n" + "\n".join(answered)


@pytest.mark.slow
def test_bundled_model_abstains_on_unanswerable_questions_about_the_corpus_entities(
        outputs: dict[str, dict[str, Any]]) -> None:
    unanswerable = CORPUS["unanswerable_invented"] + CORPUS["unanswerable_real_world"]
    rejection, answered = _rejection(outputs, unanswerable)
    assert rejection >= 0.9, f"unanswerable abstained {rejection:.2f}; answered:\n" + "\n".join(answered)
