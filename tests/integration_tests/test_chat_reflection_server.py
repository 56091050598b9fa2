"""ChatReflectionLM over ``ChatOpenAI`` talking to real servers on loopback: llama.cpp's OpenAI server serving a
real chat model (SmolLM2-135M-Instruct), and servers that fail in each way a user meets.

The same GGUF run locally (``BackendTransport``, exact probabilities of the answer words) must read the same
judgements as the server's top log-probabilities, renormalised over the words.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import free_port, running

from langchain_selfrag import tokens as T
from langchain_selfrag.lm import ChatModelError, ChatReflectionLM, load_reflection_lm
from langchain_selfrag.prompts import format_prompt, with_evidence

from .test_cli import in_process

langchain_openai = pytest.importorskip("langchain_openai", reason="needs the openai extra")
pytest.importorskip("llama_cpp.server", reason="needs the server extra")

ROOT = Path(__file__).resolve().parents[2]
QUESTION = format_prompt("Who first climbed Mount Travik?")
TRAVIK = with_evidence(QUESTION, "travik.txt", "Mount Travik is 4123 metres tall. Ilsa Brenner first climbed it in 1911.")
KESSAR = with_evidence(QUESTION, "kessar.txt", "Coins of the Kessari empire were struck from tin and cobalt.")
#: Server (top-10 log-probabilities, the GGUF's own chat template) against the local backend (the words'
#: whole probabilities, ChatML): the same weights and layout, so the same judgement up to llama.cpp's
#: batch-layout noise, the mass outside the top 10 and the other spellings of a word that the server's top 10
#: holds (" Yes"); measured worst difference 0.0075 (SmolLM2-135M-Instruct, 2026-11-29, an Intel Xeon).
WORD_TOL = 0.03


@pytest.fixture(scope="module")
def server_url(smollm2_gguf: Path, tmp_path_factory) -> Iterator[str]:
    """``python -m llama_cpp.server`` serving SmolLM2-135M-Instruct on a free loopback port."""
    port = free_port()
    threads = os.environ.get("SELFRAG_THREADS", "1")
    url = f"http://127.0.0.1:{port}/v1"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", threads, "--n_threads_batch", threads]
    with running(cmd, f"{url}/models", tmp_path_factory.mktemp("chat-server") / "server.log", name="llama_cpp.server"):
        yield url


def chat(url: str, **options):
    return langchain_openai.ChatOpenAI(model="smollm2", base_url=url, api_key="none", max_retries=0, **options)


def test_reflection_is_read_from_the_servers_log_probabilities(server_url: str) -> None:
    lm = load_reflection_lm(chat(server_url))
    assert isinstance(lm, ChatReflectionLM)
    retrieve, = lm.candidate_probs([QUESTION], T.GROUPS[T.Kind.RETRIEVE])
    assert sum(retrieve.values()) == pytest.approx(1.0) and retrieve[T.CONTINUE] == 0.0
    rel = lm.candidate_probs([TRAVIK, KESSAR], T.GROUPS[T.Kind.ISREL])
    for probs in rel:
        assert sum(probs.values()) == pytest.approx(1.0) and 0.0 < probs[T.RELEVANT] < 1.0
    gens = lm.generate([TRAVIK, KESSAR], max_new_tokens=24, first_candidates=T.GROUPS[T.Kind.ISREL])
    written = [g for g in gens if g.answer]
    assert len(written) == 1  # write_top=1: only the passage judged most relevant gets an answer
    assert written[0].probs_for(T.Kind.ISSUP) and written[0].probs_for(T.Kind.ISUSE)
    assert written[0].cumulative_logprob < 0.0  # the answer's own log-probabilities came back too


def test_the_server_and_the_local_gguf_read_the_same_judgement(server_url: str, smollm2_gguf: Path) -> None:
    from langchain_selfrag.lm.llamacpp import LlamaCppReflectionLM

    local_model = LlamaCppReflectionLM(smollm2_gguf, n_ctx=2048)
    try:
        remote, local = load_reflection_lm(chat(server_url)), ChatReflectionLM(local_model)
        prompts = [QUESTION, TRAVIK, KESSAR]
        for group, asked in ((T.Kind.RETRIEVE, prompts[:1]), (T.Kind.ISREL, prompts[1:])):
            far = remote.candidate_probs(asked, T.GROUPS[group])
            near = local.candidate_probs(asked, T.GROUPS[group])
            for a, b in zip(far, near):
                assert a == pytest.approx(b, abs=WORD_TOL), (group, a, b)
    finally:
        local_model.close()


# -- errors ----------------------------------------------------------------------------------------------
class _Handler(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint answering every chat completion with ``reply`` (status, body)."""

    reply: tuple[int, bytes] = (200, b"")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body = self.reply
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def fake_server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def completion(message: dict, logprobs=None) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": logprobs}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


def test_a_server_without_log_probabilities_fails_at_once_naming_the_setting(fake_server) -> None:
    url, handler = fake_server
    handler.reply = (200, completion({"role": "assistant", "content": "Yes"}))
    lm = load_reflection_lm(chat(url))
    with pytest.raises(ChatModelError, match=rf"ChatOpenAI 'smollm2' at {url} returned no token log-probabilities"
                                             r".*ChatOpenAI\(logprobs=True, top_logprobs=10\)"):
        lm.candidate_probs([QUESTION], T.GROUPS[T.Kind.RETRIEVE])


def test_a_malformed_reply_and_a_dead_server_each_give_one_clear_error(fake_server) -> None:
    url, handler = fake_server
    handler.reply = (200, b"<html>not json</html>")
    with pytest.raises(ChatModelError, match=rf"ChatOpenAI 'smollm2' at {url} could not answer"):
        load_reflection_lm(chat(url)).candidate_probs([QUESTION], T.GROUPS[T.Kind.RETRIEVE])
    bad = {"content": [{"token": "Yes", "logprob": "certain", "top_logprobs": [{"token": "Yes", "logprob": "x"}]}]}
    handler.reply = (200, completion({"role": "assistant", "content": "Yes"}, bad))
    with pytest.raises(ChatModelError, match="malformed"):
        load_reflection_lm(chat(url)).candidate_probs([QUESTION], T.GROUPS[T.Kind.RETRIEVE])
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(ChatModelError, match=rf"at {dead} could not answer: \w*ConnectionError"):
        load_reflection_lm(chat(dead, timeout=5)).candidate_probs([QUESTION], T.GROUPS[T.Kind.RETRIEVE])


def test_a_server_error_reaches_the_chains_caller_as_the_librarys_error(fake_server) -> None:
    from langchain_selfrag.chain import SelfRAGChain

    url, handler = fake_server
    handler.reply = (500, b'{"error": {"message": "model crashed"}}')
    chain = SelfRAGChain(load_reflection_lm(chat(url)), lambda q: [])
    with pytest.raises(ChatModelError, match="could not answer: .*500"):
        chain.invoke("Who first climbed Mount Travik?")


@pytest.mark.slow
def test_calibrate_fits_bars_for_the_chat_model_and_chains_over_it_find_them(server_url: str, tmp_path: Path) -> None:
    """``selfrag calibrate --chat-model openai:NAME --base-url URL`` writes the bars under the chat model's key in
    the cache folder; a chain over the same chat model and server reads them, one over another server does not."""
    from langchain_selfrag.abstention import AbstentionCalibration, bars_for, chat_models_calibration
    from langchain_selfrag.chain import SelfRAGChain
    from langchain_selfrag.graph.context import chat_lm

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "travik.txt").write_text("Mount Travik is 4123 metres tall. Ilsa Brenner first climbed it in 1911.\n")
    (docs / "kessar.txt").write_text("Coins of the Kessari empire were struck from tin and cobalt.\n")
    # One answerable question, the fewest calibrate takes (each costs ~20 s on the server): this test checks where
    # the bars are written and who finds them, not how well they are fitted (unit_tests/test_calibrate.py does).
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"question": "Who first climbed Mount Travik?", "answers": ["Ilsa Brenner"],
                                     "source": "travik.txt"}) + "\n")
    env = {**os.environ, "SELFRAG_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": ""}
    selfrag = [sys.executable, "-m", "langchain_selfrag.cli"]
    from langchain_selfrag.cli import main

    store = tmp_path / "store"
    assert main(["index", str(docs), "--store", str(store), "--quiet"]) == 0  # in this process: calibrate is the test
    spec = ["--chat-model", "openai:smollm2", "--base-url", server_url]
    done = subprocess.run([*selfrag, "calibrate", "--store", str(store), "--questions", str(questions), "--k", "1",
                           "--json", "--quiet", *spec], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    cal = AbstentionCalibration.load(out["path"])
    assert Path(out["path"]).parent == tmp_path / "cache" / "chat-models"
    assert cal.model.startswith("ChatOpenAI-smollm2-")
    # so the chain's bars below can only have come from this calibration, not the bars shipped for chat models
    assert cal.bars != chat_models_calibration().bars
    os.environ["SELFRAG_CACHE_DIR"], saved = str(tmp_path / "cache"), os.environ.get("SELFRAG_CACHE_DIR")
    try:
        chat_lm.cache_clear()
        lm = chat_lm("openai:smollm2", server_url)
        assert bars_for(lm) == (cal.bars, f"calibration of {cal.model}")
        chain = SelfRAGChain(lm, lambda q: [])
        assert (chain.config.abstain_isrel, chain.config.abstain_issup) == (cal.abstain_isrel, cal.abstain_issup)
        other = chat_lm("openai:smollm2", server_url.replace("127.0.0.1", "localhost"))
        assert bars_for(other) == (chat_models_calibration().bars,
                                   "bars shipped for chat models (no calibration for this model)")
    finally:
        chat_lm.cache_clear()
        if saved is None:
            os.environ.pop("SELFRAG_CACHE_DIR", None)
        else:
            os.environ["SELFRAG_CACHE_DIR"] = saved


def test_the_command_line_says_what_failed_in_one_line(fake_server, tmp_path: Path, monkeypatch, capsys) -> None:
    """By selfrag's main in this process (an interpreter per ask costs seconds of imports)."""
    from langchain_selfrag.graph.context import chat_lm

    url, handler = fake_server
    handler.reply = (200, completion({"role": "assistant", "content": "Yes"}))
    monkeypatch.setenv("OPENAI_API_KEY", "")
    monkeypatch.chdir(tmp_path)
    try:
        for base in (url, f"http://127.0.0.1:{free_port()}/v1"):
            code, err = in_process(capsys, "ask", "Who climbed Mount Travik?", "--chat-model", "openai:smollm2",
                                   "--base-url", base, "--mode", "never")
            assert code == 2 and "Traceback" not in err, err[-2000:]
            assert f"selfrag: error: ChatOpenAI 'smollm2' at {base}" in err
            if base == url:  # the server without log-probabilities: the line says so
                assert "returned no token log-probabilities" in err, err[-2000:]
    finally:
        chat_lm.cache_clear()  # the chat models of these servers are not kept for later tests
