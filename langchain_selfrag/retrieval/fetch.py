"""Fetching documents from any retrieval source (retriever, vector store, callable), with timeouts.

:func:`fetch_documents` and :func:`afetch_documents` are how the graph retrieves; a call with a
timeout runs in a small shared pool of daemon threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

from ..errors import RetrieverError, RetrieverTimeoutError

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
