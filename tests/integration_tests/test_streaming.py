"""Streaming: answer text leaves the graph while it is decoded, and the chunks add up to ``invoke``.

Short-form answers without retrieval stream token by token (``token`` events), long-form segments
as soon as every beam shares them (``segment`` events); nothing streams while the run could still
abstain. Real backends (tiny llama.cpp GGUF, tiny transformers model) pass pieces that add up to
each generation's answer and decode the same ids as without a callback.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from langchain_selfrag.chain import SelfRAGChain


def added(chunks: list[dict]) -> dict:
    total = chunks[0]
    for ch in chunks[1:]:
        total = total + ch
    return dict(total)


def astream(chain: SelfRAGChain, question: Any) -> list[dict]:
    async def collect() -> list[dict]:
        return [ch async for ch in chain.astream(question)]

    return asyncio.run(collect())


# -- real backends ---------------------------------------------------------------------------------------------
PROMPTS = [
    "### Instruction:\nWho wrote Hamlet?\n\n### Response:\n[No Retrieval]",
    "### Instruction:\nName a large city in France, please.\n\n### Response:\n[No Retrieval]",
    "### Instruction:\nQ\n\n### Response:\n",
]


def check_streamed_generate(lm: Any, prompts: list[str], **options: Any) -> None:
    """With ``on_token`` the ids equal those without, and each prompt's pieces add up to its answer."""
    want = lm.generate(prompts, max_new_tokens=24, stop_at_retrieval=False, **options)
    got_pieces: dict[int, list[str]] = {i: [] for i in range(len(prompts))}
    got = lm.generate(prompts, max_new_tokens=24, stop_at_retrieval=False,
                      on_token=lambda i, piece: got_pieces[i].append(piece), **options)
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert [g.text for g in got] == [w.text for w in want]
    for i, gen in enumerate(got):
        assert "".join(got_pieces[i]) == gen.answer
        assert all(got_pieces[i])
    assert any(len(p) > 1 for p in got_pieces.values())  # several pieces, not the answer at the end


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from langchain_selfrag.export.gguf import export_gguf

    return export_gguf(tiny_model_dir, tmp_path_factory.mktemp("stream") / "tiny.gguf", outtype="f32")


@pytest.mark.parametrize("n_seq_max", [None, 1])
def test_llamacpp_pieces_add_up_and_ids_are_unchanged(tiny_gguf, n_seq_max: int | None) -> None:
    from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM

    options = {"n_seq_max": n_seq_max} if n_seq_max else {}
    lm = LlamaCppReflectionLM(tiny_gguf, n_threads=1, n_ctx=2048, **options)
    try:
        check_streamed_generate(lm, PROMPTS)  # several prompts: decoded together unless n_seq_max=1
        check_streamed_generate(lm, PROMPTS[:1], guard=True)  # one prompt: its own path
    finally:
        lm.close()


def test_transformers_pieces_add_up_and_ids_are_unchanged(tiny_model_dir) -> None:
    from langchain_selfrag.lm import load_reflection_lm

    lm = load_reflection_lm(tiny_model_dir)
    lm.batch_size = 2  # the three prompts go in two chunks: the callbacks follow their prompts
    check_streamed_generate(lm, PROMPTS)
    check_streamed_generate(lm, PROMPTS, guard=[True, False, True])


def test_tiny_model_chain_stream_adds_up(tiny_model_dir) -> None:
    from langchain_selfrag.lm import load_reflection_lm

    chain = SelfRAGChain.from_retriever(load_reflection_lm(tiny_model_dir), None, max_new_tokens=12)
    expected = chain.invoke("What is the capital of France?")
    assert added(list(chain.stream("What is the capital of France?"))) == expected
    assert added(astream(chain, "What is the capital of France?")) == expected


@pytest.fixture(scope="module")
def remote_lm(tmp_path_factory, bundled_gguf):
    """The bundled GGUF behind ``python -m llama_cpp.server`` on loopback (stopped afterwards)."""
    import importlib.util
    import os
    import sys

    from loopback import free_port, running

    for mod in ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings", "httpx"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"llama_cpp.server needs {mod}")
    from langchain_selfrag.lm import load_reflection_lm

    path = bundled_gguf
    port, threads = free_port(), os.environ.get("SELFRAG_THREADS", "1")
    url = f"http://127.0.0.1:{port}/v1"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", "2048", "--n_threads", threads, "--n_threads_batch", threads]
    with running(cmd, f"{url}/models", tmp_path_factory.mktemp("server") / "server.log", name="llama_cpp.server"):
        lm = load_reflection_lm(url)
        yield lm
        lm.close()


def test_remote_pieces_add_up_and_text_is_unchanged(remote_lm) -> None:
    prompts = PROMPTS[:2]
    check_streamed_generate(remote_lm, prompts)
    check_streamed_generate(remote_lm, prompts, guard=True)  # the guarded head, one token per request
