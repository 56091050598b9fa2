"""The decoding guard (no empty answers) and segment stops, on real models in both local backends.

Prompts where the unguarded greedy choice is a banned token (end of sequence, ``[Utility:k]``,
an IsSup token) are found by trying, on the tiny random model and on the bundled Self-RAG model
(which writes ``[Irrelevant][Utility:5]`` and stops after an irrelevant passage).
"""

from __future__ import annotations

import importlib.util
import math
import os
import string
import sys

import pytest
import torch
from greedy import assert_greedy_twins, next_probs, teacher_forced
from loopback import free_port, running

from langchain_selfrag import prompts as P
from langchain_selfrag import tokens as T
from langchain_selfrag.lm import load_reflection_lm
from langchain_selfrag.lm.stopping import SEGMENT_MARKERS, _StopRule
from langchain_selfrag.lm.transformers_lm import TransformersReflectionLM

#: Tiny-model prompts to search: the model's first choice depends mostly on the last characters.
CANDIDATES = [f"hello {c}" for c in string.printable[:94]] + [f"x{a}{b}" for a in "abc" for b in string.printable[:94]]
#: f32 GGUF vs transformers fp32 on the tiny model (test_export measures 3e-5 on probabilities).
CROSS_LOG_TOL = 1e-2
#: The same backend, teacher forcing vs incremental decoding.
SELF_LOG_TOL = 1e-3
#: The bundled Q8_0 GGUF: llama.cpp's logits move with the batch layout (8-bit activations);
#: measured 0.21 nats on a token of p = 2e-4, and 0.38 nats over a 40-token guarded answer.
BUNDLED_LOG_TOL = 0.5
#: The same, on probabilities: p([Utility:5]) after one context measured 0.735 decoded in one batch
#: and 0.690 with the last token decoded alone.
BUNDLED_PROB_TOL = 0.1
#: Two greedy decoders of the bundled model (a server against in-process, another batch layout or
#: another CPU's SIMD kernels) may part where the top two tokens are this close (nats, under the
#: local model). Measured on AMD EPYC family 26 (Zen 5, AVX-512): on FINISHED[0] the greedy path
#: " What brings you to my office?" has top-2 margins 0.044 (office / shop), 0.22, 0.24 and 0.29, and
#: another AMD EPYC's server answered "shop"; llama.cpp's logits move by up to BUNDLED_LOG_TOL between
#: layouts.
NEAR_TIE = BUNDLED_LOG_TOL


@pytest.fixture(scope="module")
def hf(tiny_model_dir) -> TransformersReflectionLM:
    return load_reflection_lm(tiny_model_dir, device="cpu")


@pytest.fixture(scope="module")
def cpp(tiny_model_dir, tmp_path_factory):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from training.export import export_gguf

    path = export_gguf(tiny_model_dir, tmp_path_factory.mktemp("guard") / "tiny.gguf", outtype="f32")
    lm = load_reflection_lm(path, n_threads=1, n_ctx=1024)
    yield lm
    lm.close()


@pytest.fixture(scope="module", params=["transformers", "llamacpp"])
def lm(request, hf):
    return hf if request.param == "transformers" else request.getfixturevalue("cpp")


@pytest.fixture(scope="module")
def bundled(bundled_gguf):
    pytest.importorskip("llama_cpp")
    from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM

    model = LlamaCppReflectionLM(bundled_gguf, n_ctx=2048, n_threads=1)
    yield model
    model.close()


def banned_ids(lm) -> set[int]:
    """What the guard must ban before content, spelled out from the token groups."""
    critique = (*T.GROUPS[T.Kind.ISUSE], *T.GROUPS[T.Kind.ISSUP])
    return set(lm.eos_ids) | {lm.reflection_ids[t] for t in critique}


def isrel_ids(lm) -> set[int]:
    return {lm.reflection_ids[t] for t in T.GROUPS[T.Kind.ISREL]}


def is_content(lm, tid: int) -> bool:
    return tid not in lm.eos_ids and tid not in lm.id_to_reflection and any(ch.isalnum() for ch in lm.decode([tid]))


def traps(lm, wanted: set[int], n: int = 4) -> list[str]:
    """Candidate prompts whose unguarded first token is in ``wanted``."""
    firsts = lm.generate(CANDIDATES, max_new_tokens=1)
    found = [p for p, g in zip(CANDIDATES, firsts) if g.token_ids[0] in wanted]
    assert found, "no candidate prompt starts with a banned token; widen CANDIDATES"
    return found[:n]


def check_guarded(lm, gen) -> None:
    """Before the first content token no banned id was chosen, and IsRel only first."""
    for pos, tid in enumerate(gen.token_ids):
        if is_content(lm, tid):
            return
        assert tid not in banned_ids(lm)
        assert pos == 0 or tid not in isrel_ids(lm)


# -- the ban hook ---------------------------------------------------------------------------------
def test_ban_hook_follows_the_rule(hf):
    ban = hf._ban_hook()
    rel, nore = hf.reflection_ids[T.RELEVANT], hf.reflection_ids[T.NO_RETRIEVAL]
    word = hf.tokenize("Paris", add_bos=False)[0]
    space = hf.tokenize(" ", add_bos=False)[0]
    assert set(ban([])) == banned_ids(hf)
    assert set(ban([rel])) == banned_ids(hf) | isrel_ids(hf)
    assert set(ban([rel, nore, space])) == banned_ids(hf) | isrel_ids(hf)  # whitespace is no content
    assert not ban([rel, word]) and not ban([word, hf.reflection_ids[T.UTILITY[4]]])
    allowed = {hf.reflection_ids[t] for t in (T.RETRIEVAL, T.NO_RETRIEVAL, T.CONTINUE)}
    assert not allowed & set(ban([rel]))


def test_guard_flags_must_match_the_prompts(hf):
    with pytest.raises(ValueError, match="2 flags for 3 prompts"):
        hf.generate(["a", "b", "c"], max_new_tokens=2, guard=[True, False])


# -- the guard on the tiny model, both backends ----------------------------------------------------
def test_guard_replaces_banned_first_tokens(lm):
    prompts = traps(lm, banned_ids(lm))
    plain = lm.generate(prompts, max_new_tokens=12)
    guarded = lm.generate(prompts, max_new_tokens=12, guard=True)
    for a, b in zip(plain, guarded):
        assert a.token_ids[0] in banned_ids(lm) and a.guarded == 0
        assert b.token_ids[0] not in banned_ids(lm) and b.guarded >= 1
        # content needs a letter or digit; a random model may write none in 12 tokens, and then the
        # guard must have held to the length limit
        assert any(is_content(lm, t) for t in b.token_ids) or b.stop_reason == "length"
        check_guarded(lm, b)


def test_guard_avoids_an_immediate_end_of_sequence(lm):
    prompts = traps(lm, set(lm.eos_ids), n=2)
    for gen in lm.generate(prompts, max_new_tokens=1):
        assert gen.stop_reason == "eos" and gen.text == ""
    for gen in lm.generate(prompts, max_new_tokens=6, guard=True):
        assert gen.token_ids[0] not in lm.eos_ids and gen.guarded >= 1 and gen.text


def test_guard_per_prompt(lm):
    prompts = traps(lm, banned_ids(lm), n=2)
    prompts = [prompts[0], prompts[-1]]
    plain = lm.generate(prompts, max_new_tokens=8)
    mixed = lm.generate(prompts, max_new_tokens=8, guard=[True, False])
    assert mixed[0].guarded >= 1 and mixed[0].token_ids != plain[0].token_ids
    assert mixed[1].guarded == 0 and mixed[1].token_ids == plain[1].token_ids


def test_guard_keeps_the_unmasked_probabilities(lm):
    prompts = traps(lm, banned_ids(lm))
    for prompt, gen in zip(prompts, lm.generate(prompts, max_new_tokens=10, guard=True)):
        # A masked softmax would raise the chosen token's log-prob by log(1 / allowed mass).
        assert gen.cumulative_logprob == pytest.approx(teacher_forced(lm, prompt, gen.token_ids), abs=SELF_LOG_TOL)
        for point in gen.reflections:
            group = [lm.reflection_ids[t] for t in T.GROUPS[point.kind]]
            ref = next_probs(lm, prompt, gen.token_ids[: point.position], group)
            for tok, p in point.probs.items():
                assert p == pytest.approx(ref[lm.reflection_ids[tok]], rel=1e-3, abs=1e-9)


def test_guard_equals_a_manual_masked_argmax(hf):
    """Greedy on full forwards, with the rule written out here, against the guarded generate."""
    for prompt in traps(hf, banned_ids(hf)):
        ids = hf.tokenize(prompt, add_bos=True)
        out, cum, changed = [], 0.0, 0
        for step in range(10):
            with torch.no_grad():
                logits = hf.model(input_ids=torch.tensor([ids + out])).logits[0, -1].double()
            logp = torch.log_softmax(logits, dim=-1)
            masked = logits.clone()
            if not any(is_content(hf, t) for t in out):
                ban = banned_ids(hf) | (isrel_ids(hf) if step else set())
                masked[sorted(ban)] = -math.inf
            tid = int(masked.argmax())
            changed += tid != int(logits.argmax())
            out.append(tid)
            cum += float(logp[tid])
            if tid in hf.eos_ids or tid == hf.reflection_ids[T.RETRIEVAL]:
                break
        gen = hf.generate([prompt], max_new_tokens=10, guard=True)[0]
        assert gen.token_ids == out and gen.guarded == changed >= 1
        assert gen.cumulative_logprob == pytest.approx(cum, abs=1e-4)


def test_both_backends_make_the_same_guarded_choices(hf, cpp):
    prompts = traps(hf, banned_ids(hf))
    a = hf.generate(prompts, max_new_tokens=10, guard=True, stop_at_segment=True)
    b = cpp.generate(prompts, max_new_tokens=10, guard=True, stop_at_segment=True)
    for prompt, x, y in zip(prompts, a, b):
        # f32 against fp32: the same path unless two tokens tie within float noise (random weights)
        shared = assert_greedy_twins(hf, prompt, y, x, near_tie=CROSS_LOG_TOL, log_tol=CROSS_LOG_TOL)
        assert x.guarded >= 1 and y.guarded >= 1
        if shared == len(x.token_ids):
            assert x.guarded == y.guarded
            assert x.cumulative_logprob == pytest.approx(y.cumulative_logprob, abs=CROSS_LOG_TOL)


# -- segment stops --------------------------------------------------------------------------------
def first_content(lm, ids: list[int]) -> int | None:
    return next((k for k, t in enumerate(ids) if is_content(lm, t)), None)


def test_stop_at_segment_stops_at_a_marker_after_content(lm):
    markers = {lm.reflection_ids[t] for t in SEGMENT_MARKERS}
    plain = lm.generate(CANDIDATES, max_new_tokens=12, stop_at_retrieval=False)
    cases = []
    for prompt, gen in zip(CANDIDATES, plain):
        start = first_content(lm, gen.token_ids)
        at = next((k for k, t in enumerate(gen.token_ids) if t in markers and start is not None and k > start), None)
        if at is not None:
            cases.append((prompt, gen, at))
    assert cases, "no candidate generation has a segment marker after content"
    for prompt, gen, at in cases[:4]:
        cut = lm.generate([prompt], max_new_tokens=12, stop_at_retrieval=False, stop_at_segment=True)[0]
        assert cut.token_ids == gen.token_ids[: at + 1] and cut.stop_reason == "segment"
        assert cut.text.endswith(lm.id_to_reflection[gen.token_ids[at]])
        assert len(cut.token_ids) < len(gen.token_ids) or gen.stop_reason == "length"


def test_no_segment_stop_before_content(lm):
    rule = _StopRule(lm, True, True)
    marker = lm.reflection_ids[T.NO_RETRIEVAL]
    word = lm.tokenize("Paris", add_bos=False)[0]
    rel = lm.reflection_ids[T.RELEVANT]
    assert not rule.stop([marker]) and not rule.stop([rel, marker])
    assert rule.stop([rel, word, marker]) and rule.reason([rel, word, marker], "", 10) == "segment"
    assert not _StopRule(lm, True, False).stop([rel, word, marker])


# -- the bundled Self-RAG model: the issue itself ------------------------------------------------------
#: Chat prompts whose assistant turn is complete: SmolLM2-135M-Instruct (and the bundled model
#: built on it) end it at once.
FINISHED = [
    "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\nHello! How can I help you today?",
    "<|im_start|>user\nWhat is 2+2? Answer with a number only.<|im_end|>\n<|im_start|>assistant\n4",
]
QUESTIONS = ["Who discovered penicillin?", "What is the capital of France?", "When did World War II end?"]
BANANA_TEXT = "The banana is an elongated, edible fruit produced by several kinds of large herbaceous flowering plants."
BANANA = ("Banana", BANANA_TEXT)


def test_bundled_model_answers_after_an_irrelevant_passage(bundled):
    """The issue's empty answers (``[Irrelevant][Utility:5]``) are gone from build v3 by training alone."""
    prompts = [P.with_evidence(P.format_prompt(P.build_instruction(q)), *BANANA) for q in QUESTIONS]
    gens = bundled.generate(prompts, max_new_tokens=40)
    assert all(g.token_ids[0] == bundled.reflection_ids[T.IRRELEVANT] for g in gens)
    assert all(g.answer.strip() for g in gens), [g.text for g in gens]


def test_bundled_model_guard_writes_content_with_unmasked_probabilities(bundled):
    """Where the bundled model would end at once (a finished chat turn), the guard makes it write."""
    for prompt in FINISHED:
        plain = bundled.generate([prompt], max_new_tokens=1)[0]
        assert plain.token_ids[0] in bundled.eos_ids and not plain.answer
        fixed = bundled.generate([prompt], max_new_tokens=12, guard=True)[0]
        assert fixed.answer and fixed.guarded >= 1
        check_guarded(bundled, fixed)
        # Unmasked: a softmax over the allowed ids would differ by -log(1 - banned mass) at the first
        # position, more than twice the tolerance, so the comparison below can tell the two apart.
        banned_mass = sum(next_probs(bundled, prompt, [], sorted(banned_ids(bundled))).values())
        assert -math.log1p(-banned_mass) > 2 * BUNDLED_LOG_TOL
        assert fixed.cumulative_logprob == pytest.approx(
            teacher_forced(bundled, prompt, fixed.token_ids), abs=BUNDLED_LOG_TOL
        )


def test_bundled_model_does_not_stop_at_a_leading_retrieve_token(bundled):
    prompt = P.format_prompt(P.build_instruction("Write a short essay about the history of Rome."))
    plain = bundled.generate([prompt], max_new_tokens=30)[0]
    assert plain.token_ids[0] == bundled.reflection_ids[T.NO_RETRIEVAL]
    cut = bundled.generate([prompt], max_new_tokens=30, guard=True, stop_at_segment=True)[0]
    # The second call reuses the cached prompt prefix: a different batch layout, so a greedy near-tie
    # late in the text may flip (measured at token 28 of 30 with build v3); the start must agree.
    assert cut.token_ids[:20] == plain.token_ids[:20] and cut.guarded == 0 and cut.stop_reason == plain.stop_reason


def test_remote_guard_equals_the_local_backend(bundled, tmp_path):
    """llama-cpp-python's server (text mode): the guard by logit_bias one token at a time."""
    for mod in ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings", "httpx"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"llama_cpp.server needs {mod}")
    from langchain_selfrag.lm.remote import RemoteReflectionLM

    port, threads = free_port(), os.environ.get("SELFRAG_THREADS", "1")
    url = f"http://127.0.0.1:{port}/v1"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(bundled.model_path), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", threads, "--n_threads_batch", threads]
    irrelevant = P.with_evidence(P.format_prompt(P.build_instruction(QUESTIONS[0])), *BANANA)
    prompts = [FINISHED[0], FINISHED[1], irrelevant]
    want = bundled.generate(prompts[:2], max_new_tokens=12, guard=True, stop_at_segment=True)
    assert all(bundled.generate([p], max_new_tokens=1)[0].stop_reason == "eos" for p in FINISHED)
    with running(cmd, f"{url}/models", tmp_path / "server.log", name="llama_cpp.server"):
        remote = RemoteReflectionLM(url)
        try:
            got = remote.generate(prompts, max_new_tokens=12, guard=[True, True, False], stop_at_segment=True)
        finally:
            remote.close()
    for prompt, a, b in zip(prompts, got, want):
        shared = assert_greedy_twins(bundled, prompt, a, b, near_tie=NEAR_TIE, log_tol=BUNDLED_LOG_TOL)
        assert a.guarded >= 1 and b.guarded >= 1
        check_guarded(bundled, a)
        same = [(r.token, r.probs) for r in a.reflections if r.position < shared]
        assert same == [(r.token, pytest.approx(r.probs, abs=BUNDLED_PROB_TOL)) for r in b.reflections
                        if r.position < shared]
    plain = bundled.generate([irrelevant], max_new_tokens=12, stop_at_segment=True)[0]
    assert got[2].guarded == 0  # unguarded: untouched
    assert_greedy_twins(bundled, irrelevant, got[2], plain, near_tie=NEAR_TIE, log_tol=BUNDLED_LOG_TOL)


# -- a base vocabulary (reflection tokens spelled in several tokens) ---------------------------------
def test_base_vocabulary_guard_bans_end_of_sequence_only(smollm2_gguf):
    pytest.importorskip("llama_cpp")
    base = load_reflection_lm(smollm2_gguf, n_threads=1, n_ctx=1024)
    try:
        assert not base.has_reflection_vocab
        ban = base._ban_hook()
        assert set(ban([])) == set(base.eos_ids) == set(ban(base.tokenize(" ", add_bos=False)))
        assert not ban(base.tokenize("Paris", add_bos=False)) and ban(base.tokenize(":", add_bos=False))
        guarded = base.generate(FINISHED, max_new_tokens=4, guard=True)
        for plain, fixed in zip(base.generate(FINISHED, max_new_tokens=4), guarded):
            assert len(plain.token_ids) == 1 and plain.token_ids[0] in base.eos_ids
            assert plain.text == "" and plain.guarded == 0
            assert fixed.guarded >= 1 and fixed.text.strip() and not base.eos_ids & set(fixed.token_ids)
        rule = _StopRule(base, True, True)
        done = base.tokenize("Paris is big." + T.NO_RETRIEVAL, add_bos=False)
        assert rule.stop(done) and rule.reason(done, base.decode(done), 40) == "segment"
        assert not rule.stop(base.tokenize(T.NO_RETRIEVAL, add_bos=False))
        assert not _StopRule(base, True, False).stop(done)
    finally:
        base.close()


# -- the scripted fake ------------------------------------------------------------------------------
def test_fake_honours_the_guard_and_segment_stops():
    from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment

    fake = FakeReflectionLM(
        passages={
            "empty": FakeSegment("", guarded_text="Paris.", issup=None),
            "long": FakeSegment("One. [Continue to Use Evidence]Two."),
            "lead": FakeSegment("[No Retrieval]Two."),
        }
    )
    ask = P.format_prompt(P.build_instruction("Where?"))
    empty, long, lead = (P.with_evidence(ask, "t", key) for key in ("empty", "long", "lead"))
    plain, fixed = fake.generate([empty, empty], guard=[False, True])
    assert (plain.text, plain.guarded, plain.answer) == ("[Relevant][Utility:5]", 0, "")
    assert (fixed.text, fixed.guarded, fixed.answer) == ("[Relevant]Paris.[Utility:5]", 1, "Paris.")
    assert fake.generate_options[-1] == {"guard": [False, True], "stop_at_segment": False}
    with pytest.raises(ValueError):
        fake.generate([empty], guard=[True, True])
    cut, whole = fake.generate([long], stop_at_segment=True)[0], fake.generate([long])[0]
    assert (cut.text, cut.stop_reason) == ("[Relevant]One. [Continue to Use Evidence]", "segment")
    assert whole.stop_reason == "eos" and whole.text.endswith("Two.[Fully supported][Utility:5]")
    assert fake.generate([lead], stop_at_segment=True)[0].stop_reason == "eos"
