"""ReaderCriticLM on real llama.cpp models: the bundled Self-RAG model critiques, SmolLM2-135M-Instruct
(a ChatML chat model) reads. The Qwen bases it is meant for read better and load slower; the wiring
is the same."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from langchain_selfrag import tokens as T
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.lm import load_reflection_lm
from langchain_selfrag.lm.reader import ReaderCriticLM, ReaderPrompt, split_selfrag_prompt
from langchain_selfrag.prompts import build_instruction, format_prompt, with_evidence

DOC = Document("Freedonia is a small country. The capital of Freedonia is Zubrowka, on the river Sylva.",
               metadata={"source": "freedonia.md", "title": "Freedonia"})


@pytest.fixture(scope="module")
def models(bundled_gguf, smollm2_gguf):
    critic = load_reflection_lm(bundled_gguf, n_ctx=2048)
    reader = load_reflection_lm(smollm2_gguf, n_ctx=2048)
    yield critic, reader
    critic.close()
    reader.close()


def test_the_answer_is_the_readers_greedy_text_and_its_critique_the_critics(models) -> None:
    critic, reader = models
    lm = ReaderCriticLM(critic, reader)
    prompt = with_evidence(format_prompt(build_instruction("What is the capital of Freedonia?")), "Freedonia",
                           DOC.page_content)
    reader_prompt = ReaderPrompt()(split_selfrag_prompt(prompt))
    # once first, so that both calls below find the prompt cached: llama.cpp's first decode of a prompt and a
    # decode over its cached prefix differ in the last digits (by 0.13 in this log-prob on an AVX2-only EPYC)
    reader.generate([reader_prompt], max_new_tokens=1, stop_at_retrieval=False)
    (gen,) = lm.generate([prompt], first_candidates=T.GROUPS[T.Kind.ISREL], max_new_tokens=24)
    (alone,) = reader.generate([reader_prompt], max_new_tokens=24, stop_at_retrieval=False)
    assert gen.answer == alone.answer and gen.answer
    assert gen.token_ids == alone.token_ids and gen.cumulative_logprob == pytest.approx(alone.cumulative_logprob)
    isrel = critic.candidate_probs([prompt], T.GROUPS[T.Kind.ISREL])[0]
    assert gen.first_probs == pytest.approx(isrel, abs=1e-6)
    best = max(isrel, key=isrel.get)
    issup = critic.candidate_probs([prompt + best + gen.answer], T.GROUPS[T.Kind.ISSUP])[0]
    assert gen.probs_for(T.Kind.ISSUP) == pytest.approx(issup, abs=1e-6)
    assert gen.text.startswith(best + gen.answer) and gen.probs_for(T.Kind.ISUSE)


def test_the_chain_runs_on_a_reader_and_a_critic(models) -> None:
    critic, reader = models
    lm = ReaderCriticLM(critic, reader)
    out = SelfRAGChain.from_retriever(lm, lambda q: [DOC], abstain_isrel=0.0, abstain_issup=0.0,
                                      answer_form="generated").invoke("What is the capital of Freedonia?")
    (cand,) = [t for t in out["trace"] if t.get("chosen")]
    assert not out["abstained"] and out["answer"] == cand["answer"] and out["citations"] == [DOC]


def test_a_judge_gives_isrel_as_its_yes_share_and_the_critic_the_rest(models) -> None:
    """SmolLM2 judges too (a ChatML chat model, as the Qwen judges are): IsRel is its P(Yes) / (P(Yes) + P(No))."""
    from langchain_selfrag.lm.judge import JudgePrompt, RelevanceJudge

    critic, reader = models
    lm = ReaderCriticLM(critic, reader, judge=RelevanceJudge(reader))
    prompt = with_evidence(format_prompt(build_instruction("What is the capital of Freedonia?")), "Freedonia",
                           DOC.page_content)
    (gen,) = lm.generate([prompt], first_candidates=T.GROUPS[T.Kind.ISREL], max_new_tokens=24)
    yes_no = reader.candidate_probs([JudgePrompt()(split_selfrag_prompt(prompt))], ["Yes", "No"])[0]
    assert 0 < yes_no["Yes"] + yes_no["No"] <= 1
    assert gen.first_probs[T.RELEVANT] == pytest.approx(yes_no["Yes"] / (yes_no["Yes"] + yes_no["No"]), abs=1e-6)
    best = max(gen.first_probs, key=gen.first_probs.get)
    issup = critic.candidate_probs([prompt + best + gen.answer], T.GROUPS[T.Kind.ISSUP])[0]
    # llama.cpp's logits depend a little on what its prompt cache held before (8e-4 measured here)
    assert gen.probs_for(T.Kind.ISSUP) == pytest.approx(issup, abs=5e-3)
