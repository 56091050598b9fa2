"""Batched ``candidate_probs`` on llama.cpp: the prompts of one call share ``llama_decode`` calls.

Prompt i of a run goes on KV sequence i, its multi-token candidates on sequences after the
prompts; the prefix common to the prompts is decoded once. Results equal one prompt at a time up to
the float noise of the batch layout (exactly so on an f32 model, to a few hundredths on Q8_0).
"""

from __future__ import annotations

import math

import pytest

from langchain_selfrag import tokens as T
from langchain_selfrag.prompts import format_prompt, with_evidence

pytest.importorskip("llama_cpp")

from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM, common_prefix  # noqa: E402

#: Tiny f32 model, batched vs one prompt at a time: measured at most 5e-5 on log-probs (AMD EPYC).
F32_LOG_TOL = 1e-3
#: Bundled Q8_0 model: llama.cpp quantises activations to 8 bits, so probabilities move with the batch
#: layout. Measured at most 0.016 on this CPU (AMD EPYC; 3 questions x 5 passages, IsRel and
#: "[Relevant]<word>" candidates, cold and warm prefix cache); the bound leaves about 3x room.
Q8_PROB_TOL = 0.05

QUESTION = "Who first climbed Mount Travik, and in which year?"
PASSAGES = [
    "Mount Travik was first climbed in 1921 by Elsa Marrow, a surveyor from the valley town of Kessar.",
    "The Zorblat festival features snail races every spring; the winner gets a copper bell.",
    "Kessari coins contain mostly tin with a little silver, according to the royal mint records.",
    "Elsa Marrow later wrote a book about her climbs, including her ascent of Travik in the summer of 1921.",
    "Travik is the highest peak of the northern range, at 4,210 metres above sea level.",
]
PROMPTS = [with_evidence(format_prompt(QUESTION), f"Doc {i}", text) for i, text in enumerate(PASSAGES)]
ISREL = list(T.GROUPS[T.Kind.ISREL])
#: Several tokens each ([Relevant] then a word): scored on candidate sequences beside the prompts.
MULTI = ["[Relevant]Elsa", "[Relevant]Mount", "[Relevant]The", "[Irrelevant]The"]


class DecodeLog:
    """Records the entries of every ``_decode_entries`` call of ``lm``."""

    def __init__(self, lm: LlamaCppReflectionLM, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[list[tuple]] = []
        decode = lm._decode_entries

        def logged(entries):
            self.calls.append(list(entries))
            return decode(entries)

        monkeypatch.setattr(lm, "_decode_entries", logged)

    def sequences(self) -> set[int]:
        return {seq for call in self.calls for entry in call for seq in entry[2]}


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory):
    from langchain_selfrag.export.gguf import export_gguf

    return export_gguf(tiny_model_dir, tmp_path_factory.mktemp("candidate-batch") / "tiny.gguf", outtype="f32")


@pytest.fixture(scope="module")
def tiny_lm(tiny_gguf):
    lm = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=2048)
    yield lm
    lm.close()


def one_at_a_time(lm: LlamaCppReflectionLM, candidates: list[str]) -> list[dict[str, float]]:
    lm._forget_cache()
    return [lm.candidate_probs([p], candidates)[0] for p in PROMPTS]


def assert_close_logs(got: list[dict[str, float]], want: list[dict[str, float]], tol: float) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for cand in w:
            assert math.log(g[cand]) == pytest.approx(math.log(w[cand]), abs=tol), cand


@pytest.mark.parametrize("candidates", [ISREL, MULTI], ids=["single-token", "multi-token"])
def test_f32_batched_equals_one_at_a_time(tiny_lm, candidates, monkeypatch):
    want = one_at_a_time(tiny_lm, candidates)
    tiny_lm._forget_cache()
    log = DecodeLog(tiny_lm, monkeypatch)
    got = tiny_lm.candidate_probs(PROMPTS, candidates)
    assert_close_logs(got, want, F32_LOG_TOL)
    assert len(log.calls) < len(PROMPTS)  # one prefill per run of prompts, not one per prompt
    assert set(range(4)) <= log.sequences()  # the prompts sat on sequences of their own
    if candidates is ISREL:  # single ids: every prompt in one run
        assert len(log.calls) == 1


def test_the_shared_prefix_is_decoded_once_and_stays_cached(tiny_lm, monkeypatch):
    ids = [tiny_lm.tokenize(p, add_bos=True) for p in PROMPTS]
    shared = min(common_prefix(ids[0], other) for other in ids)
    tails = sum(len(i) - shared for i in ids)
    tiny_lm._forget_cache()
    log = DecodeLog(tiny_lm, monkeypatch)
    first = tiny_lm.candidate_probs(PROMPTS, ISREL)
    assert len(log.calls[0]) == shared + tails  # the common prefix once, then each prompt's own tail
    assert tiny_lm.cached_tokens == ids[0]  # sequence 0 keeps prompt 0 for the next call
    again = tiny_lm.candidate_probs(PROMPTS, ISREL)
    assert len(log.calls[1]) == tails  # the cached prefix is not decoded again
    assert_close_logs(again, first, F32_LOG_TOL)


def test_the_next_call_reuses_the_batched_prompt_it_extends(tiny_lm, monkeypatch):
    """After a batch, each prompt stays on its sequence until the next call, which takes the one it
    extends (a question's answer after its passage's IsRel question) and drops the others."""
    longer = PROMPTS[3] + T.RELEVANT + "Elsa Marrow climbed it in 1921."
    ids, longer_ids = tiny_lm.tokenize(PROMPTS[3], add_bos=True), tiny_lm.tokenize(longer, add_bos=True)
    assert longer_ids[: len(ids)] == ids
    tiny_lm._forget_cache()
    want = tiny_lm.candidate_probs([longer], list(T.GROUPS[T.Kind.ISSUP]))
    tiny_lm._forget_cache()
    tiny_lm.candidate_probs(PROMPTS, ISREL)
    log = DecodeLog(tiny_lm, monkeypatch)
    got = tiny_lm.candidate_probs([longer], list(T.GROUPS[T.Kind.ISSUP]))
    assert len(log.calls[0]) == len(longer_ids) - len(ids)  # prompt 3's cells were reused
    assert tiny_lm.cached_tokens == longer_ids and tiny_lm._kept == {}  # the other prompts left the cache
    assert_close_logs(got, want, F32_LOG_TOL)
    other = tiny_lm.tokenize(PROMPTS[1], add_bos=True)
    tiny_lm.candidate_probs([PROMPTS[1]], ISREL)  # prompt 1 is no longer kept: only the shared prefix is reused
    assert len(log.calls[1]) == len(other) - common_prefix(longer_ids, other)


@pytest.mark.parametrize("n_seq_max, calls", [(1, 5), (2, 3)])
def test_fewer_sequences_split_the_prompts_into_runs(tiny_gguf, n_seq_max, calls, monkeypatch):
    """``n_seq_max`` bounds a run: 1 scores one prompt at a time (as before), 2 in runs of 2, 2, 1."""
    lm = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=2048, n_seq_max=n_seq_max)
    try:
        want = one_at_a_time(lm, ISREL)
        lm._forget_cache()
        log = DecodeLog(lm, monkeypatch)
        got = lm.candidate_probs(PROMPTS, ISREL)
        assert len(log.calls) == calls
        assert_close_logs(got, want, F32_LOG_TOL)
        if n_seq_max == 1:
            assert got == want  # the same decodes as one prompt at a time
    finally:
        lm.close()


def test_bundled_batched_matches_one_at_a_time(bundled_gguf, monkeypatch):
    lm = LlamaCppReflectionLM(bundled_gguf, n_threads=1, n_ctx=2048)
    try:
        for candidates in (ISREL, MULTI):
            want = one_at_a_time(lm, candidates)
            lm._forget_cache()
            log = DecodeLog(lm, monkeypatch)
            got = lm.candidate_probs(PROMPTS, candidates)
            assert len(log.calls) < len(PROMPTS)
            for g, w in zip(got, want, strict=True):
                assert g == pytest.approx(w, abs=Q8_PROB_TOL)
    finally:
        lm.close()
