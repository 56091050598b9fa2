"""RemoteReflectionLM against a real ``python -m llama_cpp.server`` on loopback, and its errors.

The server runs the same GGUF as a local :class:`LlamaCppReflectionLM`, so both must agree: the
reflection probabilities up to llama.cpp's batch-layout noise, greedy text exactly.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import free_port, running

from langchain_selfrag import prompts as P
from langchain_selfrag import scoring as S
from langchain_selfrag import tokens as T
from langchain_selfrag.abstention import bars_for
from langchain_selfrag.lm import ReflectionLMError, load_reflection_lm, resolve_backend
from langchain_selfrag.lm.remote import RemoteReflectionLM

#: Remote vs local: the same llama.cpp build and GGUF. Single-token candidates (forced with
#: logit_bias after the prompt) agree to float noise: measured worst 1.8e-6 absolute. A candidate
#: spelled in several tokens (SmolLM2's vocabulary) is decoded by the server one token at a time,
#: the local backend decodes it in one batch, and llama.cpp's logits move with the batch layout:
#: measured up to 0.42 nats on probabilities near 1e-14, 3.6e-7 absolute, 3.9e-3 on the Self-RAG
#: scores. Log-probs are compared where the probability is above 1e-6.
PROB_TOL = 0.02
LOG_TOL = 0.5

QUESTION = P.format_prompt(P.build_instruction("Who wrote the play Hamlet?"))
EVIDENCE = P.with_evidence(
    QUESTION, "Hamlet", "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601."
)
ANSWERED = EVIDENCE + "[Relevant]Hamlet was written by William Shakespeare."


def _server_deps_missing() -> str | None:
    for mod in ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings", "httpx"):
        if importlib.util.find_spec(mod) is None:
            return mod
    return None


needs_server = pytest.mark.skipif(
    _server_deps_missing() is not None,
    reason=f"llama_cpp.server needs {_server_deps_missing()}: pip install 'langchain-selfrag[server]'",
)


@pytest.fixture(scope="module", params=["bundled", "smollm2"])
def gguf(request) -> tuple[str, Path]:
    """Both kinds of vocabulary: the bundled model's reflection tokens are control tokens, which
    llama-cpp-python's server leaves out of its text; SmolLM2 spells them in several tokens."""
    from langchain_selfrag.bundled.smollm2 import smollm2_gguf_path

    path = request.getfixturevalue("bundled_gguf") if request.param == "bundled" else smollm2_gguf_path()
    if path is None:
        pytest.skip(f"the {request.param} GGUF is not available here")
    return request.param, Path(path)


@pytest.fixture(scope="module")
def server_url(gguf: tuple[str, Path], tmp_path_factory) -> Iterator[str]:
    """``python -m llama_cpp.server`` on a free loopback port, stopped by pid afterwards."""
    if _server_deps_missing():
        pytest.skip(f"llama_cpp.server needs {_server_deps_missing()}")
    port = free_port()
    threads = os.environ.get("SELFRAG_THREADS", "1")
    url = f"http://127.0.0.1:{port}/v1"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf[1]), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", threads, "--n_threads_batch", threads]
    with running(cmd, f"{url}/models", tmp_path_factory.mktemp("server") / "server.log", name="llama_cpp.server"):
        yield url


@pytest.fixture(scope="module")
def remote(server_url: str) -> Iterator[RemoteReflectionLM]:
    lm = load_reflection_lm(server_url)
    assert isinstance(lm, RemoteReflectionLM)
    yield lm
    lm.close()


@pytest.fixture(scope="module")
def local(gguf: tuple[str, Path]):
    from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM

    lm = LlamaCppReflectionLM(gguf[1], n_ctx=2048)
    yield lm
    lm.close()


# -- backend selection ---------------------------------------------------------------------------
def test_urls_pick_the_openai_backend(tmp_path: Path) -> None:
    assert resolve_backend("http://127.0.0.1:8000/v1") == "openai"
    assert resolve_backend("https://example.org/v1") == "openai"
    assert resolve_backend(str(tmp_path / "m.gguf")) == "llamacpp"
    with pytest.raises(ReflectionLMError, match="needs an http"):
        load_reflection_lm(str(tmp_path / "m.gguf"), backend="openai")
    with pytest.raises(ValueError):
        resolve_backend("http://x", backend="vllm")  # type: ignore[arg-type]


# -- errors --------------------------------------------------------------------------------------
@needs_server
def test_unreachable_server_fails_fast_with_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    start = time.monotonic()
    with pytest.raises(ReflectionLMError, match="cannot reach .*after 2 attempts"):
        RemoteReflectionLM(url, max_retries=1, backoff=0.05, timeout=2)
    assert time.monotonic() - start < 5


class _JunkHandler(http.server.BaseHTTPRequestHandler):
    """Answers /v1/models with whatever ``reply`` says; everything else 404."""

    reply: tuple[int, bytes] = (200, b"")

    def _answer(self) -> None:
        status, body = self.reply if self.path == "/v1/models" else (404, b"{}")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def junk_server() -> Iterator[tuple[str, type[_JunkHandler]]]:
    handler = type("Handler", (_JunkHandler,), {})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler
    httpd.shutdown()
    httpd.server_close()


@needs_server
@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((200, b"<html>surprise</html>"), r"malformed response from .*/v1/models: not JSON"),
        ((200, b'{"object": "list"}'), r"malformed response from .*/models"),
        ((200, json.dumps({"data": [{"id": "m"}]}).encode()), r"no tokenize endpoint"),
        ((503, b"overloaded"), r"HTTP 503: overloaded \(after 2 attempts\)"),
        ((401, b'{"error": "bad key"}'), r"rejected the request \(HTTP 401\)"),
    ],
)
def test_malformed_or_failing_server_gives_a_clear_error(junk_server, reply, message) -> None:
    url, handler = junk_server
    handler.reply = reply
    with pytest.raises(ReflectionLMError, match=message):
        RemoteReflectionLM(url, max_retries=1, backoff=0.01, timeout=5)


# -- against llama_cpp.server -----------------------------------------------------------------
@needs_server
def test_probe_reads_the_servers_capabilities(remote: RemoteReflectionLM, local) -> None:
    caps = remote.capabilities
    assert caps.mode == "text"  # llama-cpp-python's server takes no token-id prompts
    assert caps.tokenize_path == "/extras/tokenize"
    assert caps.forced_logprobs and caps.grammar
    assert not caps.logprob_token_ids and not caps.prompt_logprobs
    for text in (QUESTION, EVIDENCE, *T.REFLECTION_TOKENS):
        assert remote.tokenize(text, add_bos=True) == local.tokenize(text, add_bos=True)
        assert remote.tokenize(text, add_bos=False) == local.tokenize(text, add_bos=False)
    assert remote.has_reflection_vocab == local.has_reflection_vocab
    assert remote.reflection_ids == local.reflection_ids
    ids = local.tokenize(EVIDENCE, add_bos=False)
    assert remote.decode(ids) == local.decode(ids)
    # the served file is named, so it gets the abstention bars the same file gets locally
    assert Path(remote.model_path).name == Path(local.model_path).name
    assert bars_for(remote)[0] == bars_for(local)[0]


def top_single_tokens(local, prompt: str, n: int = 6, start: int = 0) -> list[str]:
    """``n`` of the most probable next tokens after ``prompt``, from rank ``start`` on, that are
    plain text and whole tokens on their own (no reflection or end-of-generation tokens)."""
    import numpy as np

    logits, _ = local._score_prompt(local.tokenize(prompt, add_bos=True))
    out = []
    for tid in map(int, np.argsort(-logits)[start : start + 200]):
        if tid in local.eos_ids or tid in local.id_to_reflection:
            continue
        text = local.decode([tid])
        if text and local.tokenize(text, add_bos=False) == [tid]:
            out.append(text)
        if len(out) == n:
            break
    return out


@needs_server
def test_reflection_probabilities_agree_with_the_local_backend(remote: RemoteReflectionLM, local) -> None:
    """Retrieve at the first position, IsRel after evidence, IsSup and IsUse after an answer, and the
    most probable single next tokens (which have probabilities far from 0, unlike the reflection
    tokens of a base model)."""
    cases = [
        (QUESTION, T.GROUPS[T.Kind.RETRIEVE], S.retrieve_probability),
        (EVIDENCE, T.GROUPS[T.Kind.ISREL], S.isrel_score),
        (ANSWERED, T.GROUPS[T.Kind.ISSUP], S.issup_score),
        (ANSWERED, T.GROUPS[T.Kind.ISUSE], S.isuse_score),
        (QUESTION, top_single_tokens(local, QUESTION), None),
        (EVIDENCE, top_single_tokens(local, EVIDENCE), None),
    ]
    worst_p = worst_log = worst_score = 0.0
    for prompt, cands, score in cases:
        want = local.candidate_probs([prompt], cands)[0]
        got = remote.candidate_probs([prompt], cands)[0]
        assert set(got) == set(cands)
        worst_p = max([worst_p, *(abs(got[c] - want[c]) for c in cands)])
        worst_log = max([worst_log, *(abs(math.log(got[c] / want[c])) for c in cands if want[c] > 1e-6)])
        if score is not None:
            worst_score = max(worst_score, abs(score(got) - score(want)))
    print(f"remote vs local: worst abs diff {worst_p:.2e} (probabilities), {worst_log:.3f} nats (log-probs), "
          f"{worst_score:.2e} (Self-RAG scores)")
    assert worst_p <= PROB_TOL
    assert worst_log <= LOG_TOL
    assert worst_score <= PROB_TOL
    assert not remote.approximate


@needs_server
def test_top_k_fallback_is_marked_approximate_and_warns_once(server_url: str, local) -> None:
    """Without logit_bias forcing (a server that ignores it), probabilities come from the top-k
    log-probs: ids outside them count 0, the candidates are renormalised, one warning is given."""
    lm = RemoteReflectionLM(server_url, top_k=5)
    try:
        lm.capabilities.forced_logprobs = False
        present = top_single_tokens(local, QUESTION, n=3)
        rare = top_single_tokens(local, QUESTION, n=1, start=500)[0]
        cands = [*present, rare]
        want = local.candidate_probs([QUESTION], cands)[0]
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            got = lm.candidate_probs([QUESTION], cands)[0]
            lm.candidate_probs([EVIDENCE], cands)
        assert len([w for w in record if "approximate" in str(w.message)]) == 1
        assert lm.approximate
        assert got[rare] == 0.0
        total = sum(want[c] for c in present)
        for cand in present:
            # the server and the local model decode in different batch layouts (see PROB_TOL)
            assert got[cand] == pytest.approx(want[cand] / total, abs=PROB_TOL)
        if not lm.has_reflection_vocab:
            with pytest.raises(ReflectionLMError, match="neither prompt_logprobs nor logit_bias"):
                lm.candidate_probs([QUESTION], [T.RETRIEVAL, T.NO_RETRIEVAL])
    finally:
        lm.close()


@needs_server
def test_approximate_reaches_the_chain_output_and_selfrag_ask(gguf: tuple[str, Path], request, monkeypatch,
                                                              capsys) -> None:
    """A model that has answered from its server's top-1 log-probs: the chain output and ``selfrag ask``
    say that its probabilities are approximate, and why; a model that has not, that they are not."""
    if gguf[0] != "bundled":
        pytest.skip("one model is enough: the bundled one")
    from langchain_core.documents import Document

    import langchain_selfrag.graph.context as context
    from langchain_selfrag.chain import SelfRAGChain
    from langchain_selfrag.cli import main

    server_url = request.getfixturevalue("server_url")
    passage = Document("Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601.",
                       metadata={"source": "hamlet.txt"})
    question = {"question": "Who wrote the play Hamlet?", "passages": [passage]}
    settings = {"max_new_tokens": 16, "mode": "always"}
    exact = RemoteReflectionLM(server_url)
    lm = RemoteReflectionLM(server_url, top_k=1)
    try:
        out = SelfRAGChain.from_retriever(exact, **settings).invoke(question)
        assert out["approximate"] is False and out["approximate_reason"] is None
        # One call as through a server that ignores logit_bias: the runner-up is not in the top-1 list.
        lm.capabilities.forced_logprobs = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lm.candidate_probs([QUESTION], top_single_tokens(request.getfixturevalue("local"), QUESTION, n=2))
        lm.capabilities.forced_logprobs = True  # (the graph's multi-token candidates need forcing)
        out = SelfRAGChain.from_retriever(lm, **settings).invoke(question)
        assert out["approximate"] is True
        assert "read from the top-1 log-probs" in out["approximate_reason"]
        monkeypatch.setattr(context, "default_lm", lambda model: lm)
        assert main(["ask", "Who wrote the play Hamlet?", "--model", server_url, "--mode", "never",
                     "--max-new-tokens", "16", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["approximate"] is True and data["approximate_reason"] == lm.approximate_reason
    finally:
        lm.close()
        exact.close()


@needs_server
def test_greedy_generation_equals_the_local_backend(remote: RemoteReflectionLM, local) -> None:
    cands = T.GROUPS[T.Kind.ISREL]
    # One prompt at a time locally, as the server decodes: batched llama.cpp logits move with the layout.
    want = [local.generate([p], max_new_tokens=24, first_candidates=cands)[0] for p in (QUESTION, EVIDENCE)]
    got = remote.generate([QUESTION, EVIDENCE], max_new_tokens=24, first_candidates=cands)
    for a, b in zip(want, got):
        assert b.text == a.text
        assert b.stop_reason == a.stop_reason
        assert len(b.token_ids) == len(a.token_ids)
        assert b.cumulative_logprob == pytest.approx(a.cumulative_logprob, abs=0.05 * max(1, len(a.token_ids)))
        assert [(p.token, p.kind) for p in b.reflections] == [(p.token, p.kind) for p in a.reflections]
        for p, q in zip(b.reflections, a.reflections):
            assert p.probs == pytest.approx(q.probs, abs=PROB_TOL)
        for cand in cands:
            assert b.first_probs[cand] == pytest.approx(a.first_probs[cand], abs=PROB_TOL)
    assert not remote.approximate


@needs_server
@pytest.mark.slow
def test_selfrag_ask_through_the_server_gives_the_local_answer(tmp_path: Path, server_url: str,
                                                              gguf: tuple[str, Path], capsys) -> None:
    if gguf[0] == "smollm2":
        pytest.skip("the end-to-end run needs only one model: the bundled one")
    docs = tmp_path / "docs"
    docs.mkdir()
    facts = {
        "zorblax.txt": "The Zorblax Tower in the city of Quenmoor was designed by the architect Hilda Varnsworth "
                       "in 1874. It is built from blue granite and is 212 metres tall.",
        "pelumbra.txt": "Pelumbra is a fictional fruit grown on the island of Tessaly. It tastes of pepper and "
                        "honey and ripens only in the month of Ostrin.",
        "kavroth.txt": "The Kavroth river flows north from the Drell mountains into the Silent Sea. Its largest "
                       "tributary is the Mirren.",
    }
    for name, text in facts.items():
        (docs / name).write_text(text)
    from langchain_selfrag.cli import main
    from langchain_selfrag.graph.context import default_lm

    store = tmp_path / "store"
    assert main(["index", str(docs), "--store", str(store), "--quiet"]) == 0
    capsys.readouterr()
    question = "Who designed the Zorblax Tower?"
    answers = {}
    # `selfrag ask` run by its main in this process (a subprocess costs seconds of imports; test_cli.py runs the
    # command itself), once on the file and once through the server
    try:
        for model in (str(gguf[1]), server_url):
            code = main(["ask", question, "--model", model, "--store", str(store), "--k", "3",
                         "--max-new-tokens", "24", "--json"])
            out, err = capsys.readouterr()
            assert code == 0, err
            answers[model] = json.loads(out)
    finally:
        default_lm.cache_clear()  # the models the asks loaded are not kept for later tests (nor the server's URL)
    ours, theirs = answers[server_url], answers[str(gguf[1])]
    print(f"remote answer {ours['answer']!r} (retrieved={ours['retrieved']}), local {theirs['answer']!r}")
    assert ours["answer"] == theirs["answer"]
    assert ours["retrieved"] == theirs["retrieved"]
    assert len(ours["trace"]) == len(theirs["trace"])
    for a, b in zip(ours["trace"], theirs["trace"]):
        assert a["selected"] == b["selected"]
        if a["selected"]:
            assert a["text"] == b["text"]
            keys = ("isrel", "issup", "isuse", "score")
        else:
            # A long unselected continuation (e.g. the answer written after [Irrelevant]) can flip at a
            # greedy near-tie: server and local decode in different batch layouts. Its start and its
            # IsRel (read before any generated token) must still agree.
            assert a["text"][:20] == b["text"][:20]
            keys = ("isrel",)
        for key in keys:
            assert (a[key] is None) == (b[key] is None)
            if a[key] is not None:
                assert a[key] == pytest.approx(b[key], abs=PROB_TOL)
