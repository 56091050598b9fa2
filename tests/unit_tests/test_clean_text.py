"""Markdown and reStructuredText reach the store as clean text: rendered, headings as metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_selfrag.retrieval import load_file, split_documents
from langchain_selfrag.retrieval.formats.markdown import render_markdown
from langchain_selfrag.retrieval.formats.rst import render_rst

DATA = Path(__file__).resolve().parents[1] / "data" / "markup"
#: What must never reach a prompt: link targets, badges, image and comment markup, rst directives and roles.
MARKUP = ["](", "http", "badge", ".svg", "<!--", "<p", "<img", "![", "[changes]", ".. ", "::", "|pypi|",
          "`", ":class:", ":ref:", "_ ", "Table of contents", "toctree", "hidden", "comment"]


def joined(path: Path) -> str:
    return "\n\n".join(d.page_content for d in load_file(path, path.name))


@pytest.mark.parametrize("name", ["readme.md", "readme.rst"])
def test_no_markup_reaches_the_text(name: str) -> None:
    text = joined(DATA / name)
    assert [m for m in MARKUP if m in text] == []
    assert "Apache2 licensed" in text and "pip install sortedlib" in text  # link text and code kept


def test_markdown_title_sections_code_and_tables() -> None:
    docs = load_file(DATA / "readme.md", "readme.md")
    assert [d.metadata for d in docs] == [
        {"source": "readme.md", "title": "sortedlib"},
        {"source": "readme.md", "title": "sortedlib", "section": "Install"},
        {"source": "readme.md", "title": "sortedlib", "section": "Performance"},
    ]
    assert docs[0].page_content == ("sortedlib is an Apache2 licensed library of sorted collections; see the changelog "
                                    "and issue #1509. Use SortedList for lists.")
    assert docs[1].page_content == "Install\n\npip install sortedlib"
    assert docs[2].page_content == ("Performance\n\noperation | time\nadd | O(log n)\n\n"
                                    "- fast\n- pure Python\n  - no C compiler")


def test_rst_title_sections_roles_and_directives() -> None:
    docs = load_file(DATA / "readme.rst", "readme.rst")
    assert [d.metadata.get("section") for d in docs] == [None, "Install", "Performance"]
    assert {d.metadata["title"] for d in docs} == {"sortedlib"}
    assert docs[0].page_content == ("sortedlib is an Apache2 licensed sorted collections library with a fast "
                                    "Sorted List type; see sortedlib.SortedDict and the guide.")
    assert docs[1].page_content == "Install\n\npip install sortedlib\n\nNote: Needs Python 3.9 or later."
    assert docs[2].page_content == "Performance\n\noperation | time\nadd | O(log n)"


def test_nested_headings_make_a_path_and_bare_headings_join_the_next_section() -> None:
    clean = render_markdown("# T\n\nintro\n\n## API\n\n### get\n\nget a value\n\n## Notes\n\nmore\n")
    assert clean.title == "T"
    assert clean.segments() == [("intro", {}), ("API\n\nget\n\nget a value", {"section": "API > get"}),
                                ("Notes\n\nmore", {"section": "Notes"})]
    assert render_markdown("---\ntitle: From front matter\n---\n# Heading\n\ntext\n").title == "From front matter"
    assert render_markdown("## Only a section\n\ntext\n").title is None


def test_rst_without_a_document_title_keeps_every_section() -> None:
    clean = render_rst("Intro.\n\nFirst\n-----\n\nBody.\n\nSecond\n------\n\nMore.\n")
    assert clean.title is None
    assert [meta for _, meta in clean.segments()] == [{}, {"section": "First"}, {"section": "Second"}]


def test_rst_include_and_raw_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    clean = render_rst(f"Title\n=====\n\n.. include:: {secret}\n\n.. raw:: html\n\n   <b>raw</b>\n\nText.\n")
    assert "SECRET" not in clean.text and "raw" not in clean.text and clean.text == "Text."


def test_chunks_are_numbered_per_source_across_sections() -> None:
    docs = load_file(DATA / "readme.md", "readme.md")
    chunks = split_documents(docs, chunk_size=40, chunk_overlap=0)
    assert [c.metadata["chunk"] for c in chunks] == list(range(len(chunks)))
    assert all(c.metadata["title"] == "sortedlib" for c in chunks)
