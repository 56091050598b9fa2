"""The store on a real Chroma server (``chroma run`` on 127.0.0.1): same passages as the embedded store searched by
its embeddings alone (the server has no lexical index)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from corpora import invented_corpus
from loopback import free_port, port_is_open, running

from langchain_selfrag.cli import main
from langchain_selfrag.errors import EmptyStoreError, StoreError
from langchain_selfrag.graph.context import default_store, resolve_context
from langchain_selfrag.retrieval import index_path, open_store, store_size
from langchain_selfrag.retrieval.hybrid import HybridStore

ROOT = Path(__file__).resolve().parents[2]
#: chromadb 1.x serves the v2 API; the v1 heartbeat answers 410 Gone.
HEARTBEAT = "/api/v2/heartbeat"
QUESTIONS = ["Who first climbed Mount Travik?", "What do people race at the Zorblat festival?",
             "Which metal do Kessari coins contain?"]


def selfrag(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    return subprocess.run([sys.executable, "-m", "langchain_selfrag.cli", *args], check=False, capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Chroma server on a free port of 127.0.0.1, stopped by pid at the end of the module."""
    exe = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    if exe is None:
        pytest.skip("the chroma CLI (from chromadb) is not installed")
    tmp = tmp_path_factory.mktemp("chroma-server")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [exe, "run", "--path", str(tmp / "data"), "--host", "127.0.0.1", "--port", str(port)]
    with running(cmd, url + HEARTBEAT, tmp / "server.log", name="chroma run", timeout=30,
                 accept=lambda body: "nanosecond heartbeat" in json.loads(body),
                 env={**os.environ, "ANONYMIZED_TELEMETRY": "False"}) as proc:
        yield url
    assert proc.returncode is not None and not port_is_open(port)


@pytest.fixture(scope="module")
def indexed(chroma_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The invented corpus indexed twice: on the server by the CLI, into an embedded store by the API."""
    tmp = tmp_path_factory.mktemp("chroma-parity")
    corpus = invented_corpus(tmp / "corpus")
    done = selfrag("index", str(corpus), "--chroma-url", chroma_url, "--quiet")
    assert done.returncode == 0, done.stderr
    assert f"indexed 3 file(s) into 4 chunk(s); the store at {chroma_url} now holds 4" in done.stdout
    embedded = tmp / "store"
    assert index_path(corpus, embedded, progress=False).total == 4
    return {"corpus": str(corpus), "store": str(embedded)}


def hits(store, question: str, k: int = 4) -> list[tuple[str | None, str, str]]:
    return [(d.id, d.page_content, d.metadata["source"]) for d in store.similarity_search(question, k=k)]


def test_server_and_embedded_stores_return_the_same_passages(chroma_url: str, indexed: dict[str, str]) -> None:
    import chromadb

    server = chromadb.HttpClient(host="127.0.0.1", port=int(chroma_url.rsplit(":", 1)[1]))
    assert server.get_collection("selfrag").count() == 4  # the chunks really live on the server
    remote = open_store(chroma_url=chroma_url)
    local = open_store(indexed["store"], lexical=False)  # the embedded store by its embeddings alone
    assert not isinstance(remote, HybridStore) and isinstance(open_store(indexed["store"]), HybridStore)
    assert store_size(remote) == store_size(local) == 4
    expected_top = ["travik.txt", "zorblat.md", "kessar.jsonl#1"]
    for question, top in zip(QUESTIONS, expected_top, strict=True):
        got = hits(remote, question)
        assert got == hits(local, question)
        assert got[0][2] == top and all(doc_id for doc_id, _, _ in got)


def test_reindexing_on_the_server_replaces_chunks(chroma_url: str, indexed: dict[str, str]) -> None:
    report = index_path(indexed["corpus"], chroma_url=chroma_url, progress=False)
    assert (report.files, report.chunks, report.total) == (3, 4, 4)


def test_a_deleted_file_leaves_the_server_store_too(chroma_url: str, tmp_path: Path) -> None:
    corpus = invented_corpus(tmp_path / "c")
    records = tmp_path / "records.sqlite3"
    first = index_path(corpus, chroma_url=chroma_url, collection="sync-test", records=records, progress=False)
    assert first.total == 4 and first.plan.added == ["kessar.jsonl", "travik.txt", "zorblat.md"]
    (corpus / "travik.txt").unlink()
    dry = index_path(corpus, chroma_url=chroma_url, collection="sync-test", records=records, progress=False,
                     dry_run=True)
    assert dry.plan.removed == ["travik.txt"] and dry.total == 4
    again = index_path(corpus, chroma_url=chroma_url, collection="sync-test", records=records, progress=False)
    assert again.plan.removed == ["travik.txt"] and again.total == 3
    import chromadb

    server = chromadb.HttpClient(host="127.0.0.1", port=int(chroma_url.rsplit(":", 1)[1]))
    files = {m["file"] for m in server.get_collection("sync-test").get(include=["metadatas"])["metadatas"]}
    assert files == {"kessar.jsonl", "zorblat.md"}


def test_graph_context_and_env_reach_the_server(chroma_url: str, indexed: dict[str, str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    local = open_store(indexed["store"], lexical=False)  # the embedded store by its embeddings alone
    question = QUESTIONS[0]
    assert hits(default_store(chroma_url=chroma_url), question) == hits(local, question)
    monkeypatch.setenv("SELFRAG_CHROMA_URL", chroma_url)
    ctx = resolve_context({"lm": object(), "k": 2})
    assert hits(ctx.retriever, question) == hits(local, question)
    monkeypatch.setenv("SELFRAG_STORE", indexed["store"])  # the env URL wins over the env folder
    assert hits(resolve_context({"lm": object()}).retriever, question) == hits(local, question)
    with pytest.raises(StoreError, match="both 'store' and 'chroma_url'"):
        resolve_context({"lm": object(), "store": indexed["store"], "chroma_url": chroma_url})


@pytest.mark.slow
def test_ask_over_the_server_cites_server_passages(chroma_url: str, indexed: dict[str, str],
                                                   smollm2_gguf: Path) -> None:
    done = selfrag("ask", QUESTIONS[1], "--chroma-url", chroma_url, "--model", str(smollm2_gguf), "--mode", "always",
                   "--k", "2", "--max-new-tokens", "4", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    local = open_store(indexed["store"], lexical=False)  # the embedded store by its embeddings alone
    assert [(p["source"], p["text"]) for p in out["passages"]] == [(s, t) for _, t, s in hits(local, QUESTIONS[1], 2)]
    assert out["retrieved"] is True and len(out["trace"]) == 2


def test_empty_collection_and_bad_urls_are_clear_errors(chroma_url: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(EmptyStoreError, match=f"holds no documents.*--chroma-url {chroma_url}"):
        open_store(chroma_url=chroma_url, collection="nothing-here")
    corpus = invented_corpus(tmp_path / "c")
    closed = f"http://127.0.0.1:{free_port()}"
    for url, message in [("not-a-url", "invalid Chroma URL 'not-a-url'"),
                         ("ftp://127.0.0.1:1", "invalid Chroma URL"),
                         ("http://127.0.0.1:99999", "invalid Chroma URL"),
                         (closed, f"cannot reach the Chroma server at {closed}")]:
        assert main(["index", str(corpus), "--chroma-url", url, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"selfrag: error: {message}") and err.count("\n") == 1, err
    assert main(["ask", "q", "--chroma-url", closed, "--model", "unused.gguf"]) == 2
    assert capsys.readouterr().err.startswith(f"selfrag: error: cannot reach the Chroma server at {closed}")
    with pytest.raises(SystemExit) as info:
        main(["ask", "q", "--store", str(tmp_path), "--chroma-url", chroma_url])
    assert info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
