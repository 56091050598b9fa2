"""ChatSelfRAG on real models: the tiny reflection model, and the bundled model behind a model server with a key."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.messages import HumanMessage, SystemMessage

from langchain_selfrag import tokens as T
from langchain_selfrag.chat_models import ChatSelfRAG

DOCS = [Document("Paris is the capital of France.", metadata={"source": "france.md", "title": "France"})]


def test_tiny_real_model_reports_reflections(tiny_model_dir) -> None:
    from langchain_selfrag.lm import load_reflection_lm

    chat = ChatSelfRAG(lm=load_reflection_lm(tiny_model_dir), retriever=lambda q: DOCS, max_tokens=6,
                       settings={"mode": "always"})
    msg = chat.invoke([SystemMessage("Answer briefly."), HumanMessage("Capital of France?")])
    assert isinstance(msg.content, str) and not T.find_reflection_tokens(msg.content)
    meta = msg.response_metadata
    assert meta["retrieved"] is True and meta["trace"][0]["isrel"] is not None
    for r in meta["reflections"]:
        assert r["token"] in T.REFLECTION_TOKENS and abs(sum(r["probs"].values())) <= 1.0 + 1e-6


# -- a model server behind a key -------------------------------------------------------------------
def _server_deps_missing() -> str | None:
    import importlib.util

    for mod in ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings", "httpx"):
        if importlib.util.find_spec(mod) is None:
            return mod
    return None


@pytest.fixture(scope="module")
def keyed_server(bundled_gguf, tmp_path_factory):
    """``python -m llama_cpp.server --api_key`` on the bundled GGUF, on a free loopback port."""
    import os
    import sys

    from loopback import free_port, running

    if (missing := _server_deps_missing()) is not None:
        pytest.skip(f"llama_cpp.server needs {missing}: pip install 'langchain-selfrag[server]'")
    port, threads = free_port(), os.environ.get("SELFRAG_THREADS", "1")
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_gguf), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", threads, "--n_threads_batch", threads,
           "--api_key", "s3cret"]
    # /docs needs no key; every API route does
    with running(cmd, f"http://127.0.0.1:{port}/docs", tmp_path_factory.mktemp("keyed") / "server.log",
                 name="llama_cpp.server"):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.mark.slow
def test_api_key_timeout_and_retries_reach_the_model_server(keyed_server) -> None:
    from langchain_selfrag.lm import ReflectionLMError
    from langchain_selfrag.lm.scheduler import unwrap

    chat = ChatSelfRAG(base_url=keyed_server, api_key="s3cret", timeout=30, max_retries=1, max_tokens=12,
                       retriever=lambda q: DOCS, settings={"mode": "always", "k": 1})
    msg = chat.invoke("What is the capital of France?")
    assert msg.response_metadata["retrieved"] is True and msg.response_metadata["trace"][0]["isrel"] is not None
    usage = msg.usage_metadata
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    http = unwrap(chat.chain().context.lm)._http
    assert http.client.timeout.read == 30 and http.max_retries == 1
    assert http.client.headers["Authorization"] == "Bearer s3cret"
    for key in (None, "wrong"):
        with pytest.raises(ReflectionLMError, match="HTTP 401"):
            ChatSelfRAG(base_url=keyed_server, api_key=key, max_tokens=4).invoke("hi")
