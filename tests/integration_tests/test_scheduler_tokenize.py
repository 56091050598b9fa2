"""``scheduler.tokenize`` answers while another query decodes, on real backends.

A graph's ``prepare`` and its passage fitting tokenize; they must not wait behind another query's
whole decode. Each test holds a real decode open (its ``on_token`` callback, run in the scheduler's
worker in the middle of decoding, waits for a release), tokenizes, and only then releases it: the
generate cannot have finished before ``tokenize`` returned, whatever the machine's speed.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError

import pytest

from langchain_selfrag.lm.scheduler import BatchScheduler
from langchain_selfrag.prompts import format_prompt, with_evidence

#: How long ``tokenize`` may take beside the held decode before the test fails (it takes milliseconds).
TOKENIZE_WAIT_S = 20.0
#: How long the decode is held at most; longer than TOKENIZE_WAIT_S, so it is still held when tokenize is judged.
HOLD_S = 90.0
TEXT = "Ada Lovelace wrote the first published algorithm for Babbage's Analytical Engine."
#: A prompt with evidence: the bundled model answers it (without evidence it asks for retrieval first).
PROMPT = with_evidence(format_prompt("Who was Ada Lovelace?"), "Ada Lovelace", TEXT)


def tokenize_while_decoding(lm, prompt: str) -> None:
    """Start a generate through the scheduler, hold it mid-decode, tokenize, then release it."""
    sched = BatchScheduler(lm)
    want = lm.tokenize(TEXT, add_bos=True)
    decoding, release = threading.Event(), threading.Event()

    def hold(index: int, piece: str) -> None:
        decoding.set()
        release.wait(HOLD_S)

    with ThreadPoolExecutor(2) as pool:
        generation = pool.submit(sched.generate, [prompt], max_new_tokens=48, guard=True, stop_at_retrieval=False,
                                 on_token=hold)
        try:
            while not decoding.wait(0.5):
                assert not generation.done(), f"the generate streamed no answer text: {generation.result()}"
            tokenized = pool.submit(sched.tokenize, TEXT, add_bos=True)
            try:
                got = tokenized.result(timeout=TOKENIZE_WAIT_S)
            except FutureTimeoutError:
                pytest.fail(f"tokenize waited more than {TOKENIZE_WAIT_S:g} s behind another query's decode")
            assert not generation.done(), "the decode was released early: the test proves nothing"
            assert got == want
        finally:
            release.set()
        assert generation.result(timeout=300)[0].answer
    sched.close()


def test_llamacpp_tokenize_does_not_wait_for_a_decode(bundled_gguf):
    pytest.importorskip("llama_cpp")
    from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM

    lm = LlamaCppReflectionLM(bundled_gguf, n_threads=1, n_ctx=2048)
    try:
        tokenize_while_decoding(lm, PROMPT)
    finally:
        lm.close()


def test_transformers_tokenize_does_not_wait_for_a_decode(tiny_model_dir):
    """The transformers backend's tokenizer lock is its own and short: held per tokenizer call only."""
    pytest.importorskip("torch")
    from langchain_selfrag.lm import load_reflection_lm

    lm = load_reflection_lm(tiny_model_dir)
    tokenize_while_decoding(lm, PROMPT)

