"""Re-indexing keeps the store in step with the folder: gone files leave, changed files are replaced,
unchanged ones are not embedded again, an interrupted run resumes, other folders are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from documents import PDF_FACT, write_broken, write_docx, write_html, write_pdf
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from langchain_selfrag.cli import main
from langchain_selfrag.retrieval import (
    RECORDS_FILE,
    SQLiteRecordManager,
    index_path,
    open_store,
    records_path,
    store_size,
)


class CountingEmbedding(DeterministicFakeEmbedding):
    """Counts the texts it embeds; raises KeyboardInterrupt once ``fail_after`` texts were embedded."""

    embedded: int = 0
    fail_after: int | None = None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.fail_after is not None and self.embedded + len(texts) > self.fail_after:
            raise KeyboardInterrupt("interrupted")
        self.embedded += len(texts)
        return super().embed_documents(texts)


def corpus(root: Path, n: int = 3) -> Path:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"f{i}.md").write_text(f"# File {i}\n\n" + f"Paragraph {i}. " * 80 + "\n\nEnd of file.\n")
    return root


def sources(store_dir: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for meta in open_store(store_dir, embeddings=DeterministicFakeEmbedding(size=16)).get(include=["metadatas"])["metadatas"]:
        out[meta["file"]] = out.get(meta["file"], 0) + 1
    return out


def run(root: Path, store: Path, emb: DeterministicFakeEmbedding | None = None, **kw):
    return index_path(root, store, embeddings=emb or DeterministicFakeEmbedding(size=16), progress=False,
                      batch_size=4, **kw)


def test_a_deleted_file_leaves_the_store_and_dry_run_says_so_first(tmp_path: Path) -> None:
    root, store = corpus(tmp_path / "c"), tmp_path / "store"
    first = run(root, store)
    assert (first.files, first.plan.added, first.total) == (3, ["f0.md", "f1.md", "f2.md"], first.chunks)
    per_file = sources(store)
    (root / "f1.md").unlink()
    dry = run(root, store, dry_run=True)
    assert dry.dry_run and dry.plan.removed == ["f1.md"] and dry.plan.unchanged == ["f0.md", "f2.md"]
    assert dry.plan.chunks_to_delete == per_file["f1.md"] and dry.plan.chunks_to_embed == 0
    assert sources(store) == per_file  # the dry run wrote nothing
    again = run(root, store)
    assert again.plan.removed == ["f1.md"]
    assert sources(store) == {"f0.md": per_file["f0.md"], "f2.md": per_file["f2.md"]}
    assert again.total == store_size(open_store(store, embeddings=DeterministicFakeEmbedding(size=16)))


def test_changed_files_are_replaced_and_unchanged_ones_not_embedded_again(tmp_path: Path) -> None:
    root, store = corpus(tmp_path / "c"), tmp_path / "store"
    emb = CountingEmbedding(size=16)
    first = run(root, store, emb)
    assert emb.embedded == first.chunks
    (root / "f0.md").write_text("# File 0\n\nA short new text.\n")
    emb.embedded = 0
    again = run(root, store, emb)
    assert again.plan.changed == ["f0.md"] and again.plan.unchanged == ["f1.md", "f2.md"]
    assert emb.embedded == 1 and again.plan.chunks_to_embed == 1  # only the changed file's one chunk
    texts = open_store(store, embeddings=emb).get(where={"file": "f0.md"})["documents"]
    assert texts == ["A short new text."]


def test_an_interrupted_run_resumes_to_the_same_chunks_with_nothing_doubled(tmp_path: Path) -> None:
    root, store = corpus(tmp_path / "c", n=4), tmp_path / "store"
    whole = run(root, tmp_path / "reference")
    emb = CountingEmbedding(size=16, fail_after=6)
    with pytest.raises(KeyboardInterrupt):
        run(root, store, emb)
    partial = store_size(open_store(store, embeddings=emb))
    assert 0 < partial < whole.chunks
    emb.fail_after, emb.embedded = None, 0
    resumed = run(root, store, emb)
    assert resumed.total == whole.total == whole.chunks
    assert emb.embedded == whole.chunks - partial  # what was written before the interrupt is not embedded again
    assert sources(store) == sources(tmp_path / "reference")


def test_other_folders_in_the_same_store_are_left_alone(tmp_path: Path) -> None:
    a, b, store = corpus(tmp_path / "a", 2), corpus(tmp_path / "b", 2), tmp_path / "store"
    total_a, total_b = run(a, store).chunks, run(b, store).chunks
    (a / "f0.md").unlink()
    again = run(a, store)
    assert again.plan.removed == ["f0.md"] and again.total == total_a + total_b - (total_a - again.chunks)
    run(b / "f1.md", store)  # one file of b, indexed on its own: recognised, not written twice
    assert again.total == store_size(open_store(store, embeddings=DeterministicFakeEmbedding(size=16)))


def test_a_store_written_before_records_is_taken_over_without_duplicates(tmp_path: Path) -> None:
    root, store = corpus(tmp_path / "c", 2), tmp_path / "store"
    emb = DeterministicFakeEmbedding(size=16)
    old = open_store(store, embeddings=emb, must_exist=False)
    old.add_documents([Document("# File 0 raw markup", metadata={"source": "f0.md", "file": "f0.md", "chunk": 0})],
                      ids=["legacy-sha1-id"])  # as the indexer wrote before records were kept
    dry = run(root, store, dry_run=True)
    assert dry.plan.unrecorded == 1 and not (store / RECORDS_FILE).exists()
    report = run(root, store)
    assert report.plan.unrecorded == 1 and report.total == report.chunks
    assert "legacy-sha1-id" not in open_store(store, embeddings=emb).get()["ids"]


def test_records_that_outlive_their_chunks_are_forgotten(tmp_path: Path) -> None:
    root, store = corpus(tmp_path / "c", 2), tmp_path / "store"
    first = run(root, store)
    vs = open_store(store, embeddings=DeterministicFakeEmbedding(size=16))
    vs.delete(ids=vs.get()["ids"])  # the collection emptied behind the indexer's back
    again = run(root, store)
    assert again.total == first.chunks and again.plan.chunks_to_embed == first.chunks


def test_a_dry_run_on_a_new_store_makes_nothing(tmp_path: Path) -> None:
    root = corpus(tmp_path / "c", 2)
    report = run(root, tmp_path / "store", dry_run=True)
    assert report.plan.added == ["f0.md", "f1.md"] and report.total == 0
    assert not (tmp_path / "store").exists()


def test_the_record_manager_keeps_langchain_s_contract(tmp_path: Path) -> None:
    records = SQLiteRecordManager("ns", tmp_path / "r.sqlite3")
    other = SQLiteRecordManager("other", tmp_path / "r.sqlite3")
    records.update(["a", "b"], group_ids=["g1", "g2"])
    other.update(["a"], group_ids=["g9"])
    assert records.exists(["a", "b", "c"]) == [True, True, False] and records.count() == 2
    middle = records.get_time()
    records.update(["b"], group_ids=["g2"], time_at_least=middle)
    assert records.list_keys(before=middle) == ["a"] and records.list_keys(after=middle) == ["b"]
    assert records.list_keys(group_ids=["g2"]) == ["b"] and records.groups() == {"g1": {"a"}, "g2": {"b"}}
    with pytest.raises(ValueError, match="future"):
        records.update(["a"], time_at_least=records.get_time() + 3600)
    records.delete_keys(["a"])
    assert records.exists(["a"]) == [False] and other.exists(["a"]) == [True]  # namespaces are apart
    assert records_path(tmp_path / "s") == tmp_path / "s" / RECORDS_FILE


def test_every_format_in_one_folder_and_broken_ones_listed(tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    root = tmp_path / "c"
    root.mkdir()
    write_pdf(root / "report.pdf", [("Construction", PDF_FACT)])
    write_html(root / "festival.html")
    write_docx(root / "observatory.docx")
    (root / "notes.md").write_text("# Notes\n\nPlain notes.\n")
    broken = write_broken(root / "broken")
    (root / "logo.png").write_bytes(b"\x89PNG")
    report = run(root, tmp_path / "store")
    assert report.files == 4
    reasons = {p.name: r for p, r in report.skipped}
    assert set(reasons) == {*broken, "logo.png"}
    assert reasons["truncated.pdf"].startswith("cannot parse this .pdf file")
    assert reasons["notzip.docx"].startswith("cannot parse this .docx file")
    assert reasons["binary.html"] == "not a text file (binary content)"
    assert reasons["logo.png"] == "unsupported format .png"
    assert set(sources(tmp_path / "store")) == {"report.pdf", "festival.html", "observatory.docx", "notes.md"}


def test_cli_dry_run_then_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, store = corpus(tmp_path / "c", 2), tmp_path / "store"
    assert main(["index", str(root), "--store", str(store), "--quiet"]) == 0
    (root / "f1.md").unlink()
    capsys.readouterr()
    assert main(["index", str(root), "--store", str(store), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dry run, nothing written:") and "would remove 1 file(s) that are gone: f1.md" in out
    assert main(["index", str(root), "--store", str(store), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 file(s) that are gone: f1.md" in out and "1 file(s) unchanged" in out
    (root / "logo.png").write_bytes(b"\x89PNG")
    assert main(["index", str(root), "--store", str(store), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"skipped 1 file(s):\n  {root / 'logo.png'}: unsupported format .png\n  (selfrag index reads .txt" in err


def test_a_moved_store_keeps_its_records(tmp_path: Path) -> None:
    root, store = corpus(tmp_path / "c", 2), tmp_path / "store"
    emb = CountingEmbedding(size=16)
    run(root, store, emb)
    moved = tmp_path / "elsewhere" / "store"
    moved.parent.mkdir()
    store.rename(moved)
    emb.embedded = 0
    again = run(root, moved, emb)
    assert emb.embedded == 0 and again.plan.unchanged == ["f0.md", "f1.md"]
