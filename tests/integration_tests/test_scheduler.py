"""The per-model scheduler: concurrent callers share batched backend calls, and stay apart."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from langchain_selfrag.lm.scheduler import BatchScheduler


def run_threads(fn, args_list):
    with ThreadPoolExecutor(len(args_list)) as pool:
        return list(pool.map(lambda a: fn(*a), args_list))


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory):
    pytest.importorskip("llama_cpp")
    from langchain_selfrag.export.gguf import export_gguf

    return export_gguf(tiny_model_dir, tmp_path_factory.mktemp("sched") / "tiny.gguf", outtype="f32")


def test_real_model_concurrent_equals_one_at_a_time(tiny_gguf):
    """Distinct prompts from 6 threads through one llama.cpp model: each gets its own greedy text."""
    from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM
    from langchain_selfrag.prompts import format_prompt, with_evidence

    lm = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=2048)
    try:
        prompts = [with_evidence(format_prompt(f"Question number {i} about topic {i * 7}?"), f"Doc {i}", f"Text {i} " * (i + 1))
                   for i in range(6)]
        want = [lm.generate([p], max_new_tokens=8)[0] for p in prompts]
        sched = BatchScheduler(lm)
        got = run_threads(lambda p: sched.generate([p], max_new_tokens=8)[0], [(p,) for p in prompts])
        assert [g.token_ids for g in got] == [w.token_ids for w in want]
        for g, w in zip(got, want):
            assert g.cumulative_logprob == pytest.approx(w.cumulative_logprob, abs=1e-3)
        assert sched.calls < len(prompts)
        sched.close()
    finally:
        lm.close()


def test_transformers_concurrent_equals_one_at_a_time(tiny_model_dir):
    """The transformers backend batches across callers too: same greedy ids as one prompt at a time."""
    pytest.importorskip("torch")
    from langchain_selfrag.lm import load_reflection_lm
    from langchain_selfrag.prompts import format_prompt

    lm = load_reflection_lm(tiny_model_dir)
    prompts = [format_prompt(f"Question {i}: what is item {i * 3}?") for i in range(5)]
    want = [lm.generate([p], max_new_tokens=6)[0] for p in prompts]
    gate = threading.Event()

    class Gated:
        """The model, its first call held until every caller has queued."""

        def __init__(self) -> None:
            self.generate_calls: list[int] = []

        def __getattr__(self, name):
            return getattr(lm, name)

        def generate(self, prompts, **options):
            gate.wait(30)
            self.generate_calls.append(len(prompts))
            return lm.generate(prompts, **options)

    gated = Gated()
    sched = BatchScheduler(gated)
    with ThreadPoolExecutor(len(prompts)) as pool:
        futures = [pool.submit(sched.generate, [p], max_new_tokens=6) for p in prompts]
        time.sleep(0.5)
        gate.set()
        got = [f.result(60)[0] for f in futures]
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    # the held call took whatever had queued; everything queued behind it ran as one padded batch
    assert sum(gated.generate_calls) == len(prompts) and len(gated.generate_calls) <= 2, gated.generate_calls
    sched.close()
