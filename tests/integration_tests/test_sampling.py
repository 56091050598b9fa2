"""Seeded temperature / top-p sampling in ``ReflectionLM.generate``: the pure sampler and every backend.

The backends draw with the shared :func:`sample_token` from the logits they read, one stream per
prompt position seeded by ``(seed, i)``. Frequency tests compare a few hundred first tokens with
the model's own next-token distribution (read through ``_first_position_probs``) within four
standard errors, so a sampler that ignores temperature, top-p or the model's logits fails them.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from langchain_selfrag import tokens as T
from langchain_selfrag.fakes import FakeReflectionLM, FakeSegment
from langchain_selfrag.lm.sampling import (
    TokenSampler,
    make_samplers,
    sample_token,
    sampling_probs,
    stream_seed,
)

PROMPT = "hello world, a prompt for sampling"
PROMPTS = ["hello world", "a somewhat longer prompt, to force left padding", "x"]


# -- the pure sampler ------------------------------------------------------------------------------
def test_top_p_keeps_the_smallest_nucleus_reaching_it() -> None:
    logits = np.log([0.5, 0.3, 0.15, 0.05])
    assert np.allclose(sampling_probs(logits, 1.0, 1.0), [0.5, 0.3, 0.15, 0.05])
    assert np.allclose(sampling_probs(logits, 1.0, 0.7), [0.625, 0.375, 0.0, 0.0])
    assert np.allclose(sampling_probs(logits, 1.0, 0.85), [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0])
    assert np.allclose(sampling_probs(logits, 1.0, 0.4), [1.0, 0.0, 0.0, 0.0])
    # log-probs or logits shifted by a constant: the same distribution
    assert np.allclose(sampling_probs(logits + 7.0, 1.0, 0.7), [0.625, 0.375, 0.0, 0.0])


def test_temperature_scales_the_logits() -> None:
    logits = np.array([2.0, 1.0, 0.0])
    half = np.exp(logits / 0.5) / np.exp(logits / 0.5).sum()
    assert np.allclose(sampling_probs(logits, 0.5), half)
    assert sampling_probs(logits, 1e-3)[0] == pytest.approx(1.0)  # cold: the argmax
    assert np.allclose(sampling_probs(logits, 1e4), [1 / 3] * 3, atol=1e-3)  # hot: uniform
    assert sample_token(logits, 0.0, 1.0, np.random.default_rng(0)) == 0
    assert sample_token(logits, 0.0, 1.0, np.random.default_rng(0), banned={0}) == 1
    with pytest.raises(ValueError):
        sampling_probs(logits, 0.0)


def test_banned_ids_get_no_mass_and_top_p_applies_after_the_ban() -> None:
    logits = np.log([0.5, 0.3, 0.15, 0.05])
    p = sampling_probs(logits, 1.0, 0.6, banned={0})
    assert np.allclose(p, [0.0, 1.0, 0.0, 0.0])  # 0.3/0.5 = 0.6 of the allowed mass
    with pytest.raises(ValueError, match="banned"):
        sampling_probs(logits, 1.0, 1.0, banned={0, 1, 2, 3})


def reference_probs(probs, temperature: float, top_p: float) -> np.ndarray:
    """Tempered softmax cut to its top-p nucleus, written out plainly (a full sort)."""
    p = np.asarray(probs, dtype=np.float64) ** (1.0 / temperature)
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    keep = int(np.searchsorted(np.cumsum(p[order]), top_p)) + 1
    want = np.zeros_like(p)
    want[order[:keep]] = p[order[:keep]]
    return want / want.sum()


def test_the_nucleus_shortcut_equals_a_full_sort() -> None:
    rng = np.random.default_rng(3)
    for scale in (0.1, 1.0, 5.0, 30.0):
        logits = rng.normal(size=500) * scale
        probs = np.exp(logits - logits.max())
        for temperature in (0.5, 1.0):
            for top_p in (0.05, 0.5, 0.9, 0.999):
                want = reference_probs(probs / probs.sum(), temperature, top_p)
                assert np.allclose(sampling_probs(logits, temperature, top_p), want)


def test_draw_frequencies_match_the_distribution_and_seeds_repeat() -> None:
    logits = np.log([0.5, 0.3, 0.15, 0.05])
    draws = [sample_token(logits, 1.0, 0.85, np.random.default_rng(s)) for s in range(4000)]
    counts = Counter(draws)
    assert counts[3] == 0
    for tid, p in enumerate(sampling_probs(logits, 1.0, 0.85)[:3]):
        assert abs(counts[tid] / 4000 - p) < 4 * math.sqrt(p * (1 - p) / 4000)
    again = [sample_token(logits, 1.0, 0.85, np.random.default_rng(s)) for s in range(200)]
    assert again == draws[:200]


def test_a_banned_draw_is_redrawn_from_the_allowed_ids_and_counted() -> None:
    logits = np.log([0.6, 0.3, 0.1])
    sampler = TokenSampler(1.0, 1.0, np.random.default_rng(0))
    picks = [sampler.choose(logits, {0}) for _ in range(3000)]
    assert all(tid != 0 for tid, _ in picks)
    moved = sum(changed for _, changed in picks) / 3000
    assert abs(moved - 0.6) < 0.04  # the unmasked draw was the banned id
    share = sum(tid == 1 for tid, _ in picks) / 3000
    assert abs(share - 0.75) < 0.04  # 0.3 / (0.3 + 0.1)


def test_samplers_are_one_stream_per_prompt() -> None:
    assert make_samplers(3, 0.0, 1.0, 5) == [None, None, None]
    samplers = make_samplers(3, 0.8, 0.9, 5)
    assert [s.seed for s in samplers] == [stream_seed(5, i) for i in range(3)]
    assert len({s.seed for s in samplers}) == 3
    assert stream_seed(5, 1) != stream_seed(6, 0)  # not seed + index
    draws = [[s.rng.random() for _ in range(3)] for s in make_samplers(2, 1.0, 1.0, 5)]
    assert draws == [[s.rng.random() for _ in range(3)] for s in make_samplers(2, 1.0, 1.0, 5)]
    assert draws[0] != draws[1]
    assert make_samplers(1, 1.0, 1.0, None)[0].seed is None
    for bad in ({"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"seed": 1.5}):
        args = {"temperature": 1.0, "top_p": 1.0, "seed": 0} | bad
        with pytest.raises(ValueError):
            make_samplers(1, args["temperature"], args["top_p"], args["seed"])


# -- the fake ----------------------------------------------------------------------------------------
def test_the_fake_draws_its_variants_by_seed_and_position() -> None:
    seg = FakeSegment("first answer.", isrel=None, variants=("second answer.", "third answer."))
    lm = FakeReflectionLM(no_retrieval=seg)
    greedy = lm.generate(["q"] * 8)
    assert {g.text for g in greedy} == {"first answer.[Utility:5]"}
    a = [g.text for g in lm.generate(["q"] * 16, temperature=1.0, seed=3)]
    b = [g.text for g in lm.generate(["q"] * 16, temperature=1.0, seed=3)]
    c = [g.text for g in lm.generate(["q"] * 16, temperature=1.0, seed=4)]
    assert a == b and a != c
    assert len(set(a)) == 3
    assert lm.generate_options[-1] | {"guard": None} == {
        "guard": None, "stop_at_segment": False, "temperature": 1.0, "top_p": 1.0, "seed": 4}
    assert "temperature" not in lm.generate_options[0]
    with pytest.raises(ValueError):
        lm.generate(["q"], temperature=-1.0)


# -- local backends ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory) -> Path:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from training.export import export_gguf

    return export_gguf(tiny_model_dir, tmp_path_factory.mktemp("sampling") / "tiny.gguf", outtype="f32")


@pytest.fixture(scope="module", params=["llamacpp", "llamacpp-single", "transformers"])
def lm(request, tiny_model_dir, tiny_gguf):
    if request.param.startswith("llamacpp"):
        from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM

        seqs = 1 if request.param == "llamacpp-single" else 16
        model = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=2048, n_seq_max=seqs)
        yield model
        model.close()
    else:
        pytest.importorskip("torch")
        from langchain_selfrag.lm import load_reflection_lm

        yield load_reflection_lm(tiny_model_dir, backend="transformers")


def texts(gens) -> list[list[int]]:
    return [g.token_ids for g in gens]


def test_same_seed_same_samples_other_seeds_differ(lm) -> None:
    prompts = [PROMPT] * 6 + PROMPTS
    a = lm.generate(prompts, max_new_tokens=12, temperature=1.0, seed=11)
    b = lm.generate(prompts, max_new_tokens=12, temperature=1.0, seed=11)
    c = lm.generate(prompts, max_new_tokens=12, temperature=1.0, seed=12)
    assert texts(a) == texts(b)
    assert [g.text for g in a] == [g.text for g in b]
    assert texts(a) != texts(c)
    assert len({tuple(ids) for ids in texts(a)[:6]}) >= 4  # copies of one prompt: different samples
    # prompt i's stream does not depend on the other prompts of the call
    alone = lm.generate(prompts[:1], max_new_tokens=12, temperature=1.0, seed=11)
    assert texts(alone) == texts(a)[:1]


def test_temperature_zero_is_the_greedy_path(lm) -> None:
    lm.generate(PROMPTS, max_new_tokens=10)  # the same prefix cache before both calls (llama.cpp)
    zero = lm.generate(PROMPTS, max_new_tokens=10, temperature=0.0, top_p=0.5, seed=3)
    greedy = lm.generate(PROMPTS, max_new_tokens=10)
    assert texts(zero) == texts(greedy)
    assert [g.cumulative_logprob for g in zero] == [g.cumulative_logprob for g in greedy]
    assert [g.reflections for g in zero] == [g.reflections for g in greedy]


def test_sampled_logprobs_and_reflection_probs_are_the_models(lm) -> None:
    gens = lm.generate(PROMPTS * 3, max_new_tokens=10, temperature=1.5, seed=1)
    prompt_ids = lm._encode_prompts(PROMPTS * 3)
    full = lm._continuation_logprobs(prompt_ids, [g.token_ids for g in gens])
    for gen, want in zip(gens, full):
        assert gen.cumulative_logprob == pytest.approx(want, abs=1e-3)
    points = [(i, gen, p) for i, gen in enumerate(gens) for p in gen.reflections]
    assert points  # the tiny model writes reflection tokens when sampled this hot
    for i, gen, point in points:  # the model's unmasked softmax at that position
        context = prompt_ids[i] + gen.token_ids[: point.position]
        want = lm._first_position_probs([context], [lm.reflection_ids[t] for t in point.probs])[0]
        got = [point.probs[t] for t in point.probs]
        assert got == pytest.approx(list(want.values()), abs=1e-4)


def test_guard_and_stop_rules_hold_when_sampling(lm) -> None:
    banned_first = {lm.reflection_ids[t] for t in (*T.UTILITY, *T.GROUPS[T.Kind.ISSUP])} | set(lm.eos_ids)
    gens = lm.generate([PROMPT] * 24, max_new_tokens=6, temperature=3.0, seed=2, guard=True)
    assert all(g.token_ids[0] not in banned_first for g in gens)
    retrieval = lm.reflection_ids[T.RETRIEVAL]
    stopped = lm.generate([PROMPT] * 24, max_new_tokens=30, temperature=3.0, seed=2)
    for g in stopped:
        if retrieval in g.token_ids:
            assert g.token_ids.index(retrieval) == len(g.token_ids) - 1 and g.stop_reason == "retrieval"


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.8), (2.0, 0.95)])
def test_first_token_frequencies_follow_the_model(lm, temperature: float, top_p: float) -> None:
    n, calls = 480, 30
    first: Counter[int] = Counter()
    for seed in range(calls):
        gens = lm.generate([PROMPT] * (n // calls), max_new_tokens=1, temperature=temperature, top_p=top_p, seed=seed)
        first.update(g.token_ids[0] for g in gens)
    ids = list(range(_vocab(lm)))
    probs = lm._first_position_probs(lm._encode_prompts([PROMPT]), ids)[0]
    want = reference_probs([probs[i] for i in ids], temperature, top_p)
    assert sum(first.values()) == n
    assert set(first) <= set(np.flatnonzero(want > 0).tolist())
    for tid in np.flatnonzero(want > 0.03):
        p = want[tid]
        assert abs(first[int(tid)] / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-3, (tid, first[int(tid)], p)


def _vocab(lm) -> int:
    return int(getattr(lm, "n_vocab", 0) or len(lm.tokenizer))


def test_batched_and_one_at_a_time_llamacpp_draw_the_same(tiny_gguf) -> None:
    from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM

    batched = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=2048)
    single = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=2048, n_seq_max=1)
    try:
        prompts = [PROMPT] * 5 + PROMPTS
        a = batched.generate(prompts, max_new_tokens=12, temperature=1.0, top_p=0.9, seed=9)
        b = single.generate(prompts, max_new_tokens=12, temperature=1.0, top_p=0.9, seed=9)
        assert texts(a) == texts(b)
    finally:
        batched.close()
        single.close()


# -- remote: the server samples, seeded per prompt ------------------------------------------------------
@pytest.fixture(scope="module")
def remote_tiny(tiny_gguf, tmp_path_factory):
    """``python -m llama_cpp.server`` on the tiny GGUF (text mode), stopped afterwards."""
    import importlib.util
    import os
    import sys

    from loopback import free_port, running

    for mod in ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings", "httpx"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"llama_cpp.server needs {mod}")
    from langchain_selfrag.lm import load_reflection_lm

    port, threads = free_port(), os.environ.get("SELFRAG_THREADS", "1")
    url = f"http://127.0.0.1:{port}/v1"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(tiny_gguf), "--host", "127.0.0.1", "--port",
           str(port), "--n_ctx", "1024", "--n_threads", threads, "--n_threads_batch", threads]
    with running(cmd, f"{url}/models", tmp_path_factory.mktemp("server") / "server.log", name="llama_cpp.server"):
        model = load_reflection_lm(url)
        yield model
        model.close()


@pytest.mark.slow
def test_remote_sampling_is_seeded_per_prompt(remote_tiny, tiny_gguf) -> None:
    from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM

    remote = remote_tiny
    a = remote.generate([PROMPT] * 4, max_new_tokens=8, temperature=1.0, top_p=0.95, seed=1)
    b = remote.generate([PROMPT] * 4, max_new_tokens=8, temperature=1.0, top_p=0.95, seed=1)
    c = remote.generate([PROMPT] * 4, max_new_tokens=8, temperature=1.0, top_p=0.95, seed=2)
    assert [g.text for g in a] == [g.text for g in b]
    assert [g.text for g in a] != [g.text for g in c]
    assert len({g.text for g in a}) >= 2
    zero = remote.generate(PROMPTS, max_new_tokens=8, temperature=0.0, seed=5)
    assert [g.text for g in zero] == [g.text for g in remote.generate(PROMPTS, max_new_tokens=8)]
    # the server's first tokens follow the model's tempered distribution (its top-k / min-p switched off);
    # the tiny byte-level vocabulary's lone bytes do not survive the server's text, so printable ones are compared
    local = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=1024)
    try:
        ids = list(range(local.n_vocab))
        probs = local._first_position_probs(local._encode_prompts(["The cat"]), ids)[0]
        pieces = [local.decode([i]) for i in ids]
    finally:
        local.close()
    n = 320
    first = Counter(g.text for seed in range(n // 16)
                    for g in remote.generate(["The cat"] * 16, max_new_tokens=1, temperature=2.0, seed=seed))
    want = reference_probs([probs[i] for i in ids], 2.0, 1.0)
    checked = 0
    for piece, p in zip(pieces, want):
        if p > 0.04 and piece.isprintable() and piece.isascii():
            checked += 1
            assert abs(first[piece] / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-3, (piece, first[piece], p)
    assert checked >= 3
