"""The persistent Chroma store: embedded on disk, or a Chroma server (with a request timeout)."""

from __future__ import annotations

import os
import sqlite3
import warnings
import weakref
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from ..errors import EmptyStoreError, StoreError, StoreTimeoutError
from .embeddings import default_embeddings
from .hybrid import HybridStore, refill_lexical
from .lexical import LEXICAL_FILE, LexicalIndex

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

#: Where ``selfrag index`` / ``selfrag ask`` keep the store unless told otherwise.
DEFAULT_STORE = ".selfrag/store"
DEFAULT_COLLECTION = "selfrag"

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
               chroma_url: str | None = None, chroma_timeout: float | None = None, lexical: bool = True) -> VectorStore:
    """The Chroma store: embedded on disk at ``path``, or on the Chroma server at ``chroma_url``.

    An embedded store comes with its lexical index (``lexical=True``): a
    :class:`~.hybrid.HybridStore` that searches by embeddings and BM25 fused, its index in the
    store's folder (:data:`~.lexical.LEXICAL_FILE`), made from the collection when it is missing or
    does not hold as many chunks. A store on a Chroma server is searched by its embeddings alone: a
    lexical index would be a file on this machine, which the server's other clients do not see.

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
    if chroma_url is None and lexical:
        return _with_lexical(store, store_path / LEXICAL_FILE, collection)
    return store


def _with_lexical(dense: VectorStore, path: Path, collection: str) -> VectorStore:
    """The hybrid store over ``dense`` and its lexical index at ``path`` (refilled from the collection
    when it holds another number of chunks); ``dense`` alone, with a warning, when the index cannot be
    opened or written (a read-only folder)."""
    try:
        index = LexicalIndex(path, collection)
        if index.count() != store_size(dense):
            refill_lexical(dense, index)
    except (sqlite3.Error, OSError) as exc:
        warnings.warn(f"the lexical index {path} cannot be used ({exc}): the store is searched by its "
                      "embeddings alone", stacklevel=3)
        return dense
    hybrid = HybridStore(dense, index)
    _CLIENTS[hybrid] = _CLIENTS[dense]
    return hybrid


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
