"""A relevance head on a real llama.cpp chat model (SmolLM2-135M-Instruct): hidden states that match
its logits, a head fitted from a Self-RAG training file, and the chain judging relevance with it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_selfrag import tokens as T
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.graph.context import load_judge
from langchain_selfrag.lm import load_reflection_lm
from langchain_selfrag.lm.judge import JudgePrompt, RelevanceJudge
from langchain_selfrag.lm.llamacpp.hidden import LlamaCppHiddenStates
from langchain_selfrag.lm.reader import ReaderCriticLM, ReaderTurn
from langchain_selfrag.lm.relevance_head import RelevanceHeadError
from training.relevance_head import answer_direction, train_relevance_head

TURNS = [ReaderTurn("What is the capital of Freedonia?", "", "Freedonia", "The capital of Freedonia is Zubrowka."),
         ReaderTurn("What is the capital of Freedonia?", "", "Weather", "Rain is expected on Tuesday.")]


def test_the_hidden_state_gives_the_models_yes_no_odds(smollm2_gguf) -> None:
    """h · (Yes row - No row) is the log-odds the plain judge reads from the logits."""
    states = LlamaCppHiddenStates(smollm2_gguf, n_ctx=1024)
    lm = load_reflection_lm(smollm2_gguf, n_ctx=1024, n_seq_max=1)
    try:
        prompts = [JudgePrompt()(t) for t in TURNS]
        hidden = states.last_hidden(prompts)
        assert hidden.shape == (2, states.n_embd) and np.isfinite(hidden).all()
        assert np.array_equal(hidden, states.last_hidden(prompts))  # one prompt per decode: no layout noise
        yes, no = (states.tokenize(w, add_bos=False)[0] for w in ("Yes", "No"))
        odds = hidden.astype(np.float64) @ answer_direction(smollm2_gguf, yes, no)
        plain = RelevanceJudge(lm).isrel(TURNS)
        expected = [np.log(p[T.RELEVANT] / p[T.IRRELEVANT]) for p in plain]
        # measured 0.09 and 0.02 apart on 2 AMD cores: llama.cpp quantises activations, and the layouts differ
        assert odds == pytest.approx(expected, abs=0.3)
    finally:
        states.close()
        lm.close()


def write_training_file(path) -> None:
    rows = []
    for i in range(12):
        country, capital = f"Land{i}", f"City{i}"
        passage = f"The capital of {country} is {capital}."
        rows.append({"instruction": f"What is the capital of {country}?", "variant": "squad_pair_relevant",
                     "output": f"[Retrieval]<paragraph>{country}\n{passage}</paragraph>[Relevant]{capital}[Utility:5]"})
        rows.append({"instruction": f"What is the capital of {country}?", "variant": "doc_near_miss",
                     "output": f"[Retrieval]<paragraph>Weather\nRain in {country} on day {i}.</paragraph>[Irrelevant]x[Utility:1]"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.slow
def test_a_fitted_head_judges_for_the_chain(tmp_path, smollm2_gguf, bundled_gguf) -> None:
    train = tmp_path / "train.jsonl"
    write_training_file(train)
    # threads: $SELFRAG_THREADS (one per pytest-xdist worker); two on top of the other worker spin against it
    report = train_relevance_head(str(smollm2_gguf), str(train), str(tmp_path / "head"), limit=24)
    assert report["pairs"] == 24 and report["relevant"] == 12 and 0 <= report["untrained_auc"] <= 1
    head_file = tmp_path / "head" / "relevance_head.json"
    assert len(list((tmp_path / "head" / "features").glob("*.npy"))) == 1
    judge = load_judge(str(head_file), n_ctx=1024)
    try:
        good, bad = judge.isrel(TURNS)
        assert good[T.RELEVANT] > 0.5 > bad[T.RELEVANT]
        critic, reader = load_reflection_lm(bundled_gguf, n_ctx=2048), load_reflection_lm(smollm2_gguf, n_ctx=2048)
        lm = ReaderCriticLM(critic, reader, judge=judge)
        assert lm.model_path == head_file
        docs = [Document("Rain is expected on Tuesday.", metadata={"source": "weather.md", "title": "Weather"})]
        out = SelfRAGChain.from_retriever(lm, lambda q: docs, abstain_isrel=0.5, abstain_issup=0).invoke(
            "What is the capital of Freedonia?")
        assert out["abstained"]
        lm.close()
    finally:
        judge.close()
    # a head is tied to its model's bytes
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF but not that one")
    with pytest.raises(RelevanceHeadError, match="fitted on"):
        RelevanceJudge.from_head(head_file, other)
