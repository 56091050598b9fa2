"""llama.cpp: the K prompts of one ``generate`` decoded together equal one-at-a-time decoding.

The tiny random model exported as f32 GGUF has no 8-bit activation quantisation, so batched and
one-at-a-time decoding agree to float rounding. The bundled Q8_0 Self-RAG model moves with the
batch layout: on these prompts the greedy tokens are the same and probabilities differ by at most
0.011 (measured). Q4_1 SmolLM2 moves more (greedy choices flip where two logits are within about
0.15 nats), so on it only the first-position candidates are compared.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from greedy import Q4_TOKEN_LOG_TOL

from langchain_selfrag import prompts as P
from langchain_selfrag import tokens as T
from langchain_selfrag.lm import ReflectionLMError
from langchain_selfrag.lm.llamacpp import (
    TESTED_BINDING,
    LlamaCppReflectionLM,
    check_binding_version,
    plan_groups,
)

pytest.importorskip("llama_cpp")

#: Tiny f32 model: batched vs one at a time (measured 4e-5 on log-probs, 6e-6 on probabilities).
F32_LOG_TOL = 1e-3
F32_PROB_TOL = 1e-4
#: Bundled Q8_0 model: measured 0.011 (build v2) and 0.088 (build v3, [Utility:5] at the end of a
#: 40-token answer) on reflection probabilities, 0.08 nats on a 40-token answer.
Q8_PROB_TOL = 0.15
Q8_LOG_TOL = 0.5
#: Where batched and one-at-a-time greedy texts part, the two tokens' log-probabilities differ by less.
Q8_TIE_GAP = 0.1

QUESTION = P.format_prompt(P.build_instruction("Who wrote the play Hamlet?"))
PASSAGES = [
    "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601.",
    "The Globe Theatre was built in 1599 by Shakespeare's company.",
    "Paris is the capital of France.",
    "Denmark is a Nordic country; Elsinore castle is in Helsingør.",
    "Christopher Marlowe was an English playwright, a contemporary of Shakespeare.",
]
EVIDENCE = [P.with_evidence(QUESTION, "Doc", text) for text in PASSAGES]
TINY_PROMPTS = [f"hello world {c} and some more text {c * 3}" for c in "abcdefg"]


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory) -> Path:
    pytest.importorskip("gguf")
    from training.export import export_gguf

    return export_gguf(tiny_model_dir, tmp_path_factory.mktemp("batching") / "tiny.gguf", outtype="f32")


@pytest.fixture(scope="module")
def bundled_path(bundled_gguf: Path) -> Path:
    return bundled_gguf


def pair(path: Path, **options) -> tuple[LlamaCppReflectionLM, LlamaCppReflectionLM]:
    """The same model twice: batched (default sequences) and one prompt at a time."""
    batched = LlamaCppReflectionLM(path, n_threads=1, **options)
    single = LlamaCppReflectionLM(path, n_threads=1, n_seq_max=1, **options)
    assert batched.generates_in_batches and not single.generates_in_batches
    return batched, single


def assert_same_generations(got, want, log_tol: float, prob_tol: float) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.token_ids == w.token_ids
        assert g.stop_reason == w.stop_reason
        assert g.guarded == w.guarded
        assert g.cumulative_logprob == pytest.approx(w.cumulative_logprob, abs=log_tol)
        assert g.first_probs == pytest.approx(w.first_probs, abs=prob_tol)
        assert [(r.position, r.token) for r in g.reflections] == [(r.position, r.token) for r in w.reflections]
        for rg, rw in zip(g.reflections, w.reflections):
            assert rg.probs == pytest.approx(rw.probs, abs=prob_tol)


def assert_near_tie(lm: LlamaCppReflectionLM, prompt: str, a: list[int], b: list[int]) -> None:
    """Greedy texts may part only where two tokens were within the layout noise of each other.

    The bundled model rambles after an irrelevant passage; there a batch-layout difference of a few
    hundredths of a nat flips a near tie (measured on build v3: 2 of 5 prompts part at token 10+).
    """
    cut = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    probs = lm._first_position_probs([lm.tokenize(prompt, add_bos=True) + a[:cut]], [a[cut], b[cut]])[0]
    gap = abs(math.log(probs[a[cut]]) - math.log(probs[b[cut]]))
    assert cut > 0 and gap < Q8_TIE_GAP, (cut, gap)


class CountingLib:
    """The binding module with ``llama_decode`` calls counted."""

    def __init__(self, lib) -> None:
        self._lib, self.decodes = lib, 0

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def llama_decode(self, ctx, batch):
        self.decodes += 1
        return self._lib.llama_decode(ctx, batch)


# -- pure parts -----------------------------------------------------------------------------------
def test_binding_version_pin():
    import llama_cpp

    check_binding_version(llama_cpp.__version__)  # fails here, clearly, on an untested release
    low, high = TESTED_BINDING
    check_binding_version(".".join(map(str, low)))
    for version in ("0.3.35", ".".join(map(str, high)), "1.0.0", "0.3", "dev"):
        with pytest.raises(ReflectionLMError, match="untested"):
            check_binding_version(version)


def test_plan_groups_counts_the_shared_prefix_once():
    prompts = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8, 9], [1, 2, 3, 4, 10, 11], [9, 9]]
    # shared 3 + tails 3 + 3 + 3 + extra 2 each: 18 cells for the first three
    assert plan_groups(prompts, extra=2, n_ctx=18, width=8) == [[0, 1, 2], [3]]
    assert plan_groups(prompts, extra=2, n_ctx=17, width=8) == [[0, 1], [2, 3]]
    assert plan_groups(prompts, extra=2, n_ctx=100, width=2) == [[0, 1], [2, 3]]
    assert plan_groups(prompts, extra=50, n_ctx=10, width=8) == [[0], [1], [2], [3]]


# -- tiny f32 model: exact ----------------------------------------------------------------------
def test_tiny_batched_equals_one_at_a_time(tiny_gguf):
    batched, single = pair(tiny_gguf, n_ctx=1024)
    try:
        guards = [i % 2 == 0 for i in range(len(TINY_PROMPTS))]
        options = {"max_new_tokens": 20, "first_candidates": T.GROUPS[T.Kind.ISREL], "guard": guards}
        assert_same_generations(batched.generate(TINY_PROMPTS, **options), single.generate(TINY_PROMPTS, **options),
                                F32_LOG_TOL, F32_PROB_TOL)
        options["stop_at_segment"], options["guard"] = True, True
        assert_same_generations(batched.generate(TINY_PROMPTS, **options), single.generate(TINY_PROMPTS, **options),
                                F32_LOG_TOL, F32_PROB_TOL)
    finally:
        batched.close()
        single.close()


def test_one_llama_decode_per_step_for_all_sequences(tiny_gguf):
    lm = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=1024)
    try:
        lm._lib = counter = CountingLib(lm._lib)
        gens = lm.generate(TINY_PROMPTS[:5], max_new_tokens=12, stop_at_retrieval=False)
        steps = max(len(g.token_ids) for g in gens)
        assert counter.decodes == 1 + (steps - 1)  # the prefill, then one per step after the first
        first = lm.tokenize(TINY_PROMPTS[0], add_bos=True)
        assert lm.cached_tokens == first + gens[0].token_ids[:-1]  # sequence 0 stays cached
    finally:
        lm.close()


def test_runs_split_to_fit_a_short_context(tiny_gguf):
    long_prompts = [p + " filler" * 12 for p in TINY_PROMPTS[:4]]
    batched, single = pair(tiny_gguf, n_ctx=256)
    try:
        ids = [batched.tokenize(p, add_bos=True) for p in long_prompts]
        assert plan_groups(ids, 20, 256, 16) == [[0], [1], [2], [3]]  # two prompts cannot share the cache
        lm = batched
        lm._lib = counter = CountingLib(lm._lib)
        got = lm.generate(long_prompts, max_new_tokens=20, stop_at_retrieval=False)
        assert counter.decodes >= len(long_prompts)
        assert_same_generations(got, single.generate(long_prompts, max_new_tokens=20, stop_at_retrieval=False),
                                F32_LOG_TOL, F32_PROB_TOL)
    finally:
        batched.close()
        single.close()


def test_context_overflow_is_a_clear_error_and_the_model_recovers(tiny_gguf):
    lm = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=128)
    try:
        too_long = [TINY_PROMPTS[0] + " filler" * lm.context_length, TINY_PROMPTS[1]]
        with pytest.raises(ReflectionLMError, match="context overflow"):
            lm.generate(too_long, max_new_tokens=4)
        with pytest.raises(ReflectionLMError, match="context overflow"):  # generation runs past n_ctx
            lm.generate(TINY_PROMPTS[:2], max_new_tokens=lm.context_length, stop_at_retrieval=False)
        again = lm.generate(TINY_PROMPTS[:3], max_new_tokens=4)
        assert all(g.token_ids for g in again)
    finally:
        lm.close()


def test_unknown_llama_options_are_refused(tiny_gguf):
    with pytest.raises(TypeError, match="not_an_option"):
        LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=128, not_an_option=1)
    lm = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=128, n_seq_max=3, main_gpu=0, offload_kqv=True)
    try:
        assert lm.n_seq_max == 3 and lm.context_length >= 128  # llama.cpp pads n_ctx up
    finally:
        lm.close()


# -- real models --------------------------------------------------------------------------------
@pytest.mark.slow
def test_bundled_batched_equals_one_at_a_time(bundled_path):
    batched, single = pair(bundled_path, n_ctx=2048)
    try:
        options = {"max_new_tokens": 40, "first_candidates": T.GROUPS[T.Kind.ISREL], "guard": True}
        got, want = batched.generate(EVIDENCE, **options), single.generate(EVIDENCE, **options)
        same = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g.token_ids == w.token_ids]
        assert 0 in same  # the relevant passage: a confident answer, identical in both layouts
        assert_same_generations([got[i] for i in same], [want[i] for i in same], Q8_LOG_TOL, Q8_PROB_TOL)
        for i in set(range(len(EVIDENCE))) - set(same):
            assert_near_tie(single, EVIDENCE[i], got[i].token_ids, want[i].token_ids)
        assert any(r.token == T.FULLY_SUPPORTED for g in got for r in g.reflections)  # IsSup read in the batch
    finally:
        batched.close()
        single.close()


def test_smollm2_multi_token_first_candidates_in_a_batch(smollm2_gguf):
    """A base vocabulary: ``[Relevant]``/``[Irrelevant]`` ride on branch sequences beside each prompt."""
    batched, single = pair(smollm2_gguf, n_ctx=2048)
    try:
        cands = [T.RELEVANT, T.IRRELEVANT, *T.GROUPS[T.Kind.ISUSE]]
        got = batched.generate(EVIDENCE, max_new_tokens=1, first_candidates=cands)
        want = single.candidate_probs(EVIDENCE, cands)
        for g, w in zip(got, want, strict=True):
            for cand in cands:
                tol = Q4_TOKEN_LOG_TOL * len(single.tokenize(cand, add_bos=False))
                assert math.log(g.first_probs[cand]) == pytest.approx(math.log(w[cand]), abs=tol)
    finally:
        batched.close()
        single.close()
