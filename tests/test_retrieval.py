"""The embedded Chroma default with offline MiniLM embeddings, loading, chunking and the adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.documents import Document

from langchain_selfrag.errors import EmptyStoreError, NoDocumentsError, RetrieverError
from langchain_selfrag.retrieval import (
    chunk_id,
    document_title,
    fetch_documents,
    index_path,
    iter_files,
    load_file,
    minilm_path,
    open_store,
    split_documents,
    store_size,
)

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"


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
    assert stats == {"files": 3, "chunks": 3, "total": 3}
    again = index_path(root, store_dir, progress=False)  # idempotent
    assert again["total"] == 3
    store = open_store(store_dir)
    assert store_size(store) == 3
    top = fetch_documents(store, "Which city is the capital of France?", 1)
    assert top[0].metadata["source"] == "paris.md"
    top = fetch_documents(store.as_retriever(search_kwargs={"k": 2}), "yellow fruit", 5)
    assert top[0].metadata["source"].endswith("bananas.txt") and len(top) == 2


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


def test_project_docs_are_a_corpus() -> None:
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
