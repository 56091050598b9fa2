"""The store's lexical index (SQLite FTS5, BM25): what a chunk is indexed by, queries that cannot
break FTS5's syntax, and writes, replacements and deletions by store id."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.documents import Document

from langchain_selfrag.retrieval.lexical import LexicalIndex, headed_text, match_query


def test_a_chunk_is_indexed_under_its_title_and_section_path() -> None:
    doc = Document("Run pip install.", metadata={"title": "Glom", "section": "Glom > Install > From source"})
    assert headed_text(doc) == "Glom > Install > From source\nRun pip install."
    assert headed_text(Document("Bare.", metadata={})) == "Bare."
    assert headed_text(Document("x", metadata={"section": "CLI"})) == "CLI\nx"


@pytest.mark.parametrize("question", ['What does "--spec" AND NOT do?', "NEAR(a b) * ^ : -x", "C++ (c) 'quoted'"])
def test_questions_with_fts5_operators_are_matched_word_by_word(question: str) -> None:
    index = LexicalIndex(":memory:", "c")
    index.add(["1"], [Document("the spec option and near words x c")])
    assert [d.id for d in index.search(question, 3)] == ["1"]
    assert match_query("?! ...") == "" and index.search("?! ...", 3) == []


def test_bm25_ranks_the_chunk_with_the_rare_words_first_and_returns_it_whole() -> None:
    index = LexicalIndex(":memory:", "c")
    docs = [Document("The cache is cleared every hour.", metadata={"source": "a.md", "chunk": 0}),
            Document("Use --ttl to set how long the TTLCache keeps an entry.", metadata={"source": "b.md", "chunk": 3}),
            Document("The cache keeps an entry.", metadata={"source": "c.md", "chunk": 1})]
    index.add(["a", "b", "c"], docs)
    top = index.search("How long does TTLCache keep an entry?", 2)
    assert [d.id for d in top] == ["b", "c"]
    assert top[0].page_content == docs[1].page_content and top[0].metadata == docs[1].metadata
    assert {d.id for d in index.search("entries", 5)} == {"b", "c"}  # porter stemming: entries ~ entry
    assert index.search("anything", 0) == []


def test_writes_replace_by_id_deletes_drop_and_collections_stay_apart(tmp_path: Path) -> None:
    path = tmp_path / "lexical.sqlite3"
    one, two = LexicalIndex(path, "one"), LexicalIndex(path, "two")
    one.add(["x", "y"], [Document("alpha beta"), Document("gamma")])
    two.add(["x"], [Document("alpha")])
    one.add(["x"], [Document("delta")])  # the same id again replaces the chunk
    assert (one.count(), two.count()) == (2, 1)
    assert [d.id for d in one.search("alpha", 5)] == [] and [d.id for d in one.search("delta", 5)] == ["x"]
    one.delete(["x", "missing"])
    assert one.ids() == {"y"} and two.ids() == {"x"}
    one.close()
    reopened = LexicalIndex(path, "one")
    assert reopened.ids() == {"y"} and [d.page_content for d in reopened.search("gamma", 1)] == ["gamma"]
    reopened.clear()
    assert reopened.count() == 0 and LexicalIndex(path, "two").count() == 1
    with pytest.raises(ValueError, match="2 ids for 1 chunks"):
        reopened.add(["a", "b"], [Document("a")])
