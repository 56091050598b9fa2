"""The embedded Chroma default with offline MiniLM embeddings, loading, chunking and the adapter."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import contextvars
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda

import langchain_selfrag.retrieval as R
from langchain_selfrag.errors import (
    EmptyStoreError,
    NoDocumentsError,
    RetrieverError,
    RetrieverTimeoutError,
    StoreError,
    StoreTimeoutError,
)
from langchain_selfrag.retrieval import (
    RETRIEVER_THREADS,
    afetch_documents,
    chunk_id,
    document_title,
    fetch_documents,
    format_skipped,
    index_path,
    iter_files,
    load_file,
    minilm_path,
    open_store,
    split_documents,
    store_size,
)

DOCS_DIR = Path(__file__).resolve().parents[2] / "examples" / "corpus"  # what `make demo` indexes


def write_corpus(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "paris.md").write_text("# Paris\n\nParis is the capital and largest city of France.\n")
    (root / "sub" / "bananas.txt").write_text("Bananas are long yellow fruit that grow in bunches.\n")
    (root / "more.jsonl").write_text(json.dumps({"title": "Rome", "text": "Rome is the capital of Italy."}) + "\n")
    (root / "image.png").write_bytes(b"\x89PNG")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "secret.md").write_text("do not index")
    return root


def test_minilm_ships_offline() -> None:
    path = minilm_path()
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()


def test_loading_and_chunking(tmp_path: Path) -> None:
    root = write_corpus(tmp_path / "c")
    files = iter_files(root)
    assert [f.name for f in files] == ["more.jsonl", "paris.md", "bananas.txt"]
    md = load_file(root / "paris.md", "paris.md")
    assert md[0].metadata == {"source": "paris.md", "title": "Paris"}
    rows = load_file(root / "more.jsonl", "more.jsonl")
    assert rows[0].metadata["title"] == "Rome" and rows[0].metadata["source"] == "more.jsonl#1"
    long = Document("word " * 400, metadata={"source": "long.txt"})
    chunks = split_documents([long], chunk_size=200, chunk_overlap=20)
    assert len(chunks) > 5 and [c.metadata["chunk"] for c in chunks] == list(range(len(chunks)))
    assert len({chunk_id(c) for c in chunks}) == len(chunks)
    assert document_title(Document("x", metadata={"source": "a/b/notes.md"})) == "notes"


def test_bad_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(NoDocumentsError, match="no such file"):
        iter_files(tmp_path / "missing")
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(NoDocumentsError, match="bad.jsonl:2"):
        load_file(tmp_path / "bad.jsonl")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NoDocumentsError):
        index_path(empty, tmp_path / "store", progress=False)


def test_index_and_search_persistent_chroma(tmp_path: Path) -> None:
    root = write_corpus(tmp_path / "c")
    store_dir = tmp_path / "store"
    stats = index_path(root, store_dir, progress=False)
    assert (stats.files, stats.chunks, stats.total) == (3, 3, 3)
    assert [(p.name, reason) for p, reason in stats.skipped] == [("image.png", "unsupported format .png")]
    assert stats["chunks"] == 3  # the old dict-style access keeps working
    again = index_path(root, store_dir, progress=False)  # idempotent
    assert again["total"] == 3
    store = open_store(store_dir)
    assert store_size(store) == 3
    top = fetch_documents(store, "Which city is the capital of France?", 1)
    assert top[0].metadata["source"] == "paris.md"
    retriever = store.as_retriever(search_kwargs={"k": 2})
    top = fetch_documents(retriever, "yellow fruit", 5)  # k=5 reaches the retriever: all 3 chunks
    assert top[0].metadata["source"].endswith("bananas.txt") and len(top) == 3
    assert retriever.search_kwargs == {"k": 2}  # the caller's retriever is not modified


def test_empty_or_missing_store(tmp_path: Path) -> None:
    with pytest.raises(EmptyStoreError, match="selfrag index"):
        open_store(tmp_path / "nothing")
    open_store(tmp_path / "empty", must_exist=False)
    with pytest.raises(EmptyStoreError, match="holds no documents"):
        open_store(tmp_path / "empty")


def test_fetch_documents_adapters() -> None:
    docs = [Document("a"), Document("b"), Document("c")]
    assert fetch_documents(lambda q: docs, "q", 2) == docs[:2]
    assert fetch_documents(None, "q", 2) == []
    with pytest.raises(RetrieverError, match="cannot retrieve"):
        fetch_documents(42, "q", 2)


def test_the_demo_corpus_loads() -> None:
    files = iter_files(DOCS_DIR)
    assert len(files) >= 3
    assert all(load_file(f) for f in files)


def test_reindexing_a_changed_file_replaces_its_chunks(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "rows.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    store_dir = tmp_path / "store"
    assert index_path(root, store_dir, progress=False)["total"] == 2
    (root / "rows.jsonl").write_text('{"text": "three"}\n')
    assert index_path(root, store_dir, progress=False)["total"] == 1
    assert [d.page_content for d in fetch_documents(open_store(store_dir), "three", 5)] == ["three"]


# -- public Chroma API only -------------------------------------------------------------------------
def test_retrieval_touches_no_private_attribute() -> None:
    modules = sorted(Path(R.__file__).parent.glob("*.py"))  # every module of the retrieval package
    private = [f"{path.name} line {n.lineno}: .{n.attr}"
               for path in modules for n in ast.walk(ast.parse(path.read_text()))
               if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
               and not (isinstance(n.value, ast.Name) and n.value.id == "self")]
    assert private == []


def fake_store(path: Path, texts: list[str]) -> Any:
    store = open_store(path, embeddings=DeterministicFakeEmbedding(size=16), must_exist=False)
    store.add_documents([Document(t, metadata={"source": f"{t}.txt", "file": f"{t}.txt"}) for t in texts],
                        ids=[f"id-{t}" for t in texts])
    return store


def test_store_size_counts_with_the_client_or_public_get(tmp_path: Path) -> None:
    from langchain_chroma import Chroma

    store = fake_store(tmp_path / "s", ["a", "b", "c"])
    assert store_size(store) == 3
    store.delete(where={"file": "b.txt"})
    assert store_size(store) == 2
    other = Chroma(collection_name="selfrag", embedding_function=DeterministicFakeEmbedding(size=16),
                   persist_directory=str(tmp_path / "s"))  # not made by open_store: counted via get()
    assert store_size(other) == 2


# -- k reaches the source ----------------------------------------------------------------------------
class ListRetriever(BaseRetriever):
    """Returns its first ``k`` documents (a retriever with its own ``k`` field)."""

    docs: list[Document]
    k: int = 2

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return self.docs[: self.k]


class AllRetriever(BaseRetriever):
    """Returns every document (no ``k`` knob: the adapter slices)."""

    docs: list[Document]

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return list(self.docs)


SIX = [Document(f"doc {i}") for i in range(6)]


def test_k_reaches_retrievers_and_stores(tmp_path: Path) -> None:
    store = fake_store(tmp_path / "s", [f"t{i}" for i in range(6)])
    default = store.as_retriever()  # its own default is k=4
    assert len(fetch_documents(default, "t1", 6)) == 6
    assert default.search_kwargs == {}
    assert len(fetch_documents(store, "t1", 5)) == 5
    own = ListRetriever(docs=SIX)
    assert fetch_documents(own, "q", 5) == SIX[:5] and own.k == 2
    assert fetch_documents(AllRetriever(docs=SIX), "q", 3) == SIX[:3]
    assert fetch_documents(RunnableLambda(lambda q: SIX), "q", 1) == SIX[:1]


# -- async ---------------------------------------------------------------------------------------------
class AsyncOnlyRetriever(ListRetriever):
    """Fails on the sync path, so a test can tell which path ran."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        raise AssertionError("the sync path was used")

    async def _aget_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        await asyncio.sleep(0)
        return self.docs[: self.k]


def test_afetch_documents_uses_the_async_apis(tmp_path: Path) -> None:
    store = fake_store(tmp_path / "s", [f"t{i}" for i in range(6)])

    async def lookup(q: str) -> list[Document]:
        return SIX

    async def main() -> list[list[Document]]:
        return list(await asyncio.gather(
            afetch_documents(store, "t2", 5),
            afetch_documents(store.as_retriever(), "t2", 6),
            afetch_documents(AsyncOnlyRetriever(docs=SIX), "q", 4),
            afetch_documents(ListRetriever(docs=SIX), "q", 3),  # sync-only: LangChain's executor
            afetch_documents(lookup, "q", 2),
            afetch_documents(lambda q: SIX, "q", 2),
            afetch_documents(None, "q", 2),
        ))

    got = asyncio.run(main())
    assert [len(d) for d in got] == [5, 6, 4, 3, 2, 2, 0]
    assert got[2] == SIX[:4]


def test_afetch_documents_errors_and_timeout() -> None:
    async def slow(q: str) -> list[Document]:
        await asyncio.sleep(5)
        return SIX

    def broken(q: str) -> list[Document]:
        raise KeyError("index gone")

    start = time.perf_counter()
    with pytest.raises(RetrieverTimeoutError, match="did not answer within 0.1 s"):
        asyncio.run(afetch_documents(slow, "q", 2, timeout=0.1))
    assert time.perf_counter() - start < 2
    with pytest.raises(RetrieverError, match="KeyError") as info:
        asyncio.run(afetch_documents(broken, "q", 2, timeout=1))
    assert isinstance(info.value.__cause__, KeyError)
    with pytest.raises(RetrieverError, match="cannot retrieve"):
        asyncio.run(afetch_documents(42, "q", 2))
    with pytest.raises(RetrieverError, match="str objects instead of Documents"):
        asyncio.run(afetch_documents(lambda q: ["text"], "q", 2))


# -- sync timeout: a bounded pool, no thread per call --------------------------------------------------
def _pool_threads() -> int:
    return sum(t.name.startswith("selfrag-retriever") for t in threading.enumerate())


def test_timed_out_calls_leave_at_most_the_pool_alive() -> None:
    release = threading.Event()
    started: list[str] = []

    def stuck(q: str) -> list[Document]:
        started.append(q)
        release.wait(30)
        return SIX

    baseline = threading.active_count() - _pool_threads()
    messages = []
    try:
        for i in range(20):
            with pytest.raises(RetrieverTimeoutError) as info:
                fetch_documents(stuck, f"q{i}", 2, timeout=0.05)
            messages.append(str(info.value))
            assert threading.active_count() <= baseline + RETRIEVER_THREADS
        assert len(started) <= RETRIEVER_THREADS  # the others were cancelled while queued
        assert all(m.startswith("the retriever did not answer within 0.05 s") for m in messages)
        assert sum("never started" in m for m in messages) == 20 - len(started)
    finally:
        release.set()
    assert fetch_documents(lambda q: SIX, "q", 2, timeout=10) == SIX[:2]  # the pool recovers
    assert _pool_threads() <= RETRIEVER_THREADS


def test_the_pool_runs_calls_side_by_side() -> None:
    barrier = threading.Barrier(RETRIEVER_THREADS, timeout=5)  # breaks unless all calls run at once

    def meet(q: str) -> list[Document]:
        barrier.wait()
        return [Document(q)]

    results: list[str] = []
    callers = [threading.Thread(target=lambda i=i: results.extend(
        d.page_content for d in fetch_documents(meet, f"q{i}", 1, timeout=10))) for i in range(RETRIEVER_THREADS)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert sorted(results) == [f"q{i}" for i in range(RETRIEVER_THREADS)]
    assert _pool_threads() <= RETRIEVER_THREADS


def test_sync_errors_keep_their_cause_and_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller")
    assert fetch_documents(lambda q: [Document(var.get())], "q", 1, timeout=5)[0].page_content == "caller"
    for timeout in (None, 5):
        with pytest.raises(RetrieverError, match="ZeroDivisionError") as info:
            fetch_documents(lambda q: [1 / 0], "q", 1, timeout=timeout)
        assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_a_hung_retriever_does_not_block_interpreter_exit() -> None:
    code = ("import time\nfrom langchain_selfrag.retrieval import fetch_documents\n"
            "try:\n    fetch_documents(lambda q: time.sleep(120), 'q', 1, timeout=0.2)\n"
            "except TimeoutError as exc:\n    print(exc)\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    assert "did not answer within 0.2 s" in done.stdout
    assert time.perf_counter() - start < 60


# -- indexing keeps going past bad files -----------------------------------------------------------------
def mixed_corpus(root: Path) -> Path:
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nA file that indexes fine.\n")
    (root / "bad.jsonl").write_text('{"text": "ok"}\nnot json\n')
    (root / "blank.txt").write_text("   \n")
    return root


def test_index_path_skips_bad_files_and_reports_them(tmp_path: Path) -> None:
    root = mixed_corpus(tmp_path / "c")
    report = index_path(root, tmp_path / "store", embeddings=DeterministicFakeEmbedding(size=16), progress=False)
    assert (report.files, report.chunks, report.total) == (1, 1, 1)
    reasons = {p.name: r for p, r in report.skipped}
    assert set(reasons) == {"bad.jsonl", "blank.txt"}
    assert reasons["bad.jsonl"].startswith("line 2: invalid JSON")
    assert reasons["blank.txt"] == "holds no text"
    assert report.as_dict()["skipped"][0] == [str(root / "bad.jsonl"), reasons["bad.jsonl"]]
    json.dumps(report.as_dict())


def test_index_path_strict_and_nothing_indexable(tmp_path: Path) -> None:
    root = mixed_corpus(tmp_path / "c")
    with pytest.raises(NoDocumentsError, match=r"2 file\(s\).*strict.*\n.*bad.jsonl: line 2"):
        index_path(root, tmp_path / "store", embeddings=DeterministicFakeEmbedding(size=16), progress=False,
                   strict=True)
    assert not (tmp_path / "store").exists()  # strict writes nothing
    (root / "good.md").unlink()
    with pytest.raises(NoDocumentsError, match="no file under .* could be indexed"):
        index_path(root, tmp_path / "store", embeddings=DeterministicFakeEmbedding(size=16), progress=False)


def test_format_skipped_is_short() -> None:
    skipped = [(Path(f"f{i}.jsonl"), "line 1: invalid JSON") for i in range(12)]
    lines = format_skipped(skipped).splitlines()
    assert len(lines) == 11 and lines[0] == "  f0.jsonl: line 1: invalid JSON" and lines[-1] == "  ... and 2 more"


# -- a Chroma server that never answers --------------------------------------------------------------
@contextlib.contextmanager
def silent_server(lifetime: float = 30.0):
    """A TCP server on 127.0.0.1 that accepts connections and never answers; yields its port.

    It stops by itself after ``lifetime`` seconds (closing every connection), or when the test ends.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        deadline = time.monotonic() + lifetime
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
        for conn in held:
            conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)


def test_a_chroma_server_that_never_answers_fails_within_the_timeout() -> None:
    with silent_server() as port:
        start = time.monotonic()
        with pytest.raises(StoreTimeoutError) as caught:
            open_store(chroma_url=f"http://127.0.0.1:{port}", chroma_timeout=1.0)
        took = time.monotonic() - start
    assert took < 8, took
    message = str(caught.value)
    assert "host 127.0.0.1" in message and f"port {port}" in message and "within 1 s" in message


def test_selfrag_ask_fails_with_a_clear_error_on_a_silent_chroma_server(monkeypatch, capsys) -> None:
    from langchain_selfrag.cli import main

    monkeypatch.setenv("SELFRAG_CHROMA_TIMEOUT", "1.5")
    with silent_server() as port:
        start = time.monotonic()
        code = main(["ask", "Who first climbed Mount Travik?", "--chroma-url", f"http://127.0.0.1:{port}"])
        took = time.monotonic() - start
    assert code == 2 and took < 8, (code, took)
    err = capsys.readouterr().err
    assert err.startswith("selfrag: error: the Chroma server at http://127.0.0.1:") and "within 1.5 s" in err


class _StallingChroma(http.server.BaseHTTPRequestHandler):
    """Answers what chromadb's client asks while it starts (heartbeat, identity, tenant, database)
    and then stalls on every other request: a server that stops answering after the client is made."""

    ANSWERS = {
        "/api/v2/heartbeat": {"nanosecond heartbeat": 1},
        "/api/v2/auth/identity": {"user_id": "", "tenant": "default_tenant", "databases": ["default_database"]},
        "/api/v2/tenants/default_tenant": {"name": "default_tenant"},
        "/api/v2/tenants/default_tenant/databases/default_database": {
            "id": "00000000-0000-0000-0000-000000000000", "name": "default_database", "tenant": "default_tenant"},
    }
    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.ANSWERS.get(self.path.split("?")[0])
        if body is None:
            self.release.wait(20)  # bounded: the server never outlives the test by long
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_chroma_server_that_stalls_after_the_client_starts_times_out_too() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StallingChroma)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        with pytest.raises(StoreTimeoutError, match="reading collection 'selfrag' timed out"):
            open_store(chroma_url=f"http://127.0.0.1:{server.server_address[1]}", chroma_timeout=1.0,
                       collection="selfrag")
        assert time.monotonic() - start < 8
    finally:
        _StallingChroma.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize("value", ["soon", "0", "-3"])
def test_a_malformed_chroma_timeout_is_refused(monkeypatch, value: str) -> None:
    monkeypatch.setenv("SELFRAG_CHROMA_TIMEOUT", value)
    with pytest.raises(StoreError, match="SELFRAG_CHROMA_TIMEOUT must be a number of seconds > 0"):
        R.chroma_timeout()
