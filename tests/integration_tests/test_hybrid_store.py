"""`selfrag index` stores are searched by embeddings and BM25 fused: the lexical index beside Chroma
stays in step with re-indexing and deletions, is rebuilt when it is missing or behind, and a search
finds by words what the embeddings rank low."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from langchain_core.embeddings import DeterministicFakeEmbedding

from langchain_selfrag.retrieval import index_path, open_store
from langchain_selfrag.retrieval.hybrid import HybridStore, fusion_depth, in_step
from langchain_selfrag.retrieval.lexical import LEXICAL_FILE


def corpus(root: Path) -> Path:
    root.mkdir(parents=True)
    for i in range(4):
        (root / f"f{i}.md").write_text(f"# File {i}\n\n## Part {i}\n\n" + f"Paragraph {i} says little. " * 40 + "\n")
    (root / "cli.md").write_text("# Tool\n\n## Options\n\nThe --frobnicate-depth option sets how deep it goes.\n")
    return root


def both(store: Path) -> tuple[set[str], set[str]]:
    """Chunk ids of the dense and of the lexical index, read back from disk."""
    s = open_store(store, embeddings=DeterministicFakeEmbedding(size=16))
    assert isinstance(s, HybridStore)
    return set(s.dense.get(include=[])["ids"]), s.lexical.ids()


def index(root: Path, store: Path):
    return index_path(root, store, embeddings=DeterministicFakeEmbedding(size=16), progress=False, batch_size=4)


def test_index_twice_delete_a_file_and_reindex_leave_both_indexes_with_the_same_chunks(tmp_path: Path) -> None:
    root, store = corpus(tmp_path / "docs"), tmp_path / "store"
    first = index(root, store)
    dense, lexical = both(store)
    assert len(dense) == first.total > 5 and dense == lexical
    second = index(root, store)  # nothing changed: nothing embedded, nothing doubled
    assert second.plan.chunks_to_embed == 0 and both(store) == (dense, lexical)
    os.remove(root / "f1.md")
    (root / "f2.md").write_text("# File 2\n\nRewritten.\n")
    third = index(root, store)
    assert third.plan.removed == ["f1.md"] and third.plan.changed == ["f2.md"]
    dense, lexical = both(store)
    assert dense == lexical and len(dense) == third.total < first.total


def test_a_missing_or_stale_lexical_index_is_rebuilt_from_the_collection(tmp_path: Path) -> None:
    root, store = corpus(tmp_path / "docs"), tmp_path / "store"
    index(root, store)
    os.remove(store / LEXICAL_FILE)  # a store made before the lexical index
    s = open_store(store, embeddings=DeterministicFakeEmbedding(size=16))
    assert in_step(s.dense, s.lexical)
    s.lexical.delete(list(s.lexical.ids())[:2])  # written around it: the next index run puts it right
    index(root, store)
    dense, lexical = both(store)
    assert dense == lexical


def test_a_search_finds_by_words_what_the_embeddings_miss(tmp_path: Path) -> None:
    root, store = corpus(tmp_path / "docs"), tmp_path / "store"
    index(root, store)
    question = "Which option sets how deep the frobnicate goes?"
    hybrid = open_store(store, embeddings=DeterministicFakeEmbedding(size=16))
    dense = open_store(store, embeddings=DeterministicFakeEmbedding(size=16), lexical=False)
    assert not isinstance(dense, HybridStore)
    found = hybrid.similarity_search(question, k=2)
    assert found[0].metadata["file"] == "cli.md" and len(found) == 2
    assert len({d.id for d in found}) == 2  # a chunk found by both indexes comes once
    assert [d.metadata["file"] for d in hybrid.similarity_search(question, k=2, filter={"file": "f0.md"})] == ["f0.md"] * 2
    assert fusion_depth(5) == 20 and fusion_depth(10) == 40


def test_a_read_only_store_folder_is_searched_by_embeddings_alone(tmp_path: Path) -> None:
    root, store = corpus(tmp_path / "docs"), tmp_path / "store"
    index(root, store)
    os.remove(store / LEXICAL_FILE)
    (store / LEXICAL_FILE).mkdir()  # a path that cannot be opened as the index
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = open_store(store, embeddings=DeterministicFakeEmbedding(size=16))
    assert not isinstance(s, HybridStore) and s.similarity_search("paragraph", k=1)
    assert any("searched by its embeddings alone" in str(w.message) for w in caught)


def test_from_texts_makes_a_hybrid_store_in_memory() -> None:
    store = HybridStore.from_texts(["The --frobnicate-depth option sets the depth.", "Paragraph one says little."],
                                   DeterministicFakeEmbedding(size=16), [{"file": "cli.md"}, {"file": "f0.md"}],
                                   ids=["a", "b"], collection_name="from-texts")
    assert in_step(store.dense, store.lexical) and store.lexical.ids() == {"a", "b"}
    assert store.similarity_search("frobnicate depth", k=1)[0].id == "a"
