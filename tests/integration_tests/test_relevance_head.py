"""A relevance head on a real llama.cpp chat model (SmolLM2-135M-Instruct): hidden states that match
its logits, and a head fitted from a Self-RAG training file that tells a stated answer from a near miss."""

from __future__ import annotations

import json

import numpy as np
import pytest

from langchain_selfrag import tokens as T
from langchain_selfrag.lm import ChatReflectionLM, load_reflection_lm
from langchain_selfrag.prompts import format_prompt, with_evidence
from langchain_selfrag.questions import Turn
from training.core.hidden_states import LlamaCppHiddenStates
from training.core.relevance_head import RelevanceHead
from training.relevance_head import answer_direction, isrel_prompt, train_relevance_head

TURNS = [Turn("What is the capital of Freedonia?", "", "Freedonia", "The capital of Freedonia is Zubrowka."),
         Turn("What is the capital of Freedonia?", "", "Weather", "Rain is expected on Tuesday.")]


def test_the_hidden_state_gives_the_models_yes_no_odds(smollm2_gguf) -> None:
    """h · (Yes row - No row) is the log-odds the model's IsRel question reads from the logits."""
    states = LlamaCppHiddenStates(smollm2_gguf, n_ctx=1024)
    lm = load_reflection_lm(smollm2_gguf, n_ctx=1024, n_seq_max=1)
    try:
        prompts = [isrel_prompt(t) for t in TURNS]
        hidden = states.last_hidden(prompts)
        assert hidden.shape == (2, states.n_embd) and np.isfinite(hidden).all()
        assert np.array_equal(hidden, states.last_hidden(prompts))  # one prompt per decode: no layout noise
        yes, no = (states.tokenize(w, add_bos=False)[0] for w in ("Yes", "No"))
        odds = hidden.astype(np.float64) @ answer_direction(smollm2_gguf, yes, no)
        asked = [with_evidence(format_prompt(t.instruction), t.title, t.passage) for t in TURNS]
        plain = ChatReflectionLM(lm).candidate_probs(asked, [T.RELEVANT, T.IRRELEVANT])
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
def test_a_fitted_head_tells_a_stated_answer_from_a_near_miss(tmp_path, smollm2_gguf) -> None:
    train = tmp_path / "train.jsonl"
    write_training_file(train)
    # threads: $SELFRAG_THREADS (one per pytest-xdist worker); two on top of the other worker spin against it
    report = train_relevance_head(str(smollm2_gguf), str(train), str(tmp_path / "head"), limit=24)
    assert report["pairs"] == 24 and report["relevant"] == 12 and 0 <= report["untrained_auc"] <= 1
    head = RelevanceHead.load(tmp_path / "head" / "relevance_head.json")
    assert len(list((tmp_path / "head" / "features").glob("*.npy"))) == 1
    states = LlamaCppHiddenStates(smollm2_gguf, n_ctx=1024)
    try:
        good, bad = head.relevant(states.last_hidden([isrel_prompt(t) for t in TURNS]))
    finally:
        states.close()
    assert good > 0.5 > bad
