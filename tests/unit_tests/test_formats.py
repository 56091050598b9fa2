"""PDF, HTML and Word files made by their libraries become clean text with titles, sections, pages."""

from __future__ import annotations

from pathlib import Path

import pytest
from documents import PDF_FACT, write_broken, write_docx, write_html, write_pdf

from langchain_selfrag.errors import NoDocumentsError
from langchain_selfrag.retrieval import load_file, scan_folder

pytest.importorskip("pypdf")
pytest.importorskip("fpdf")


def test_pdf_pages_sections_and_title(tmp_path: Path) -> None:
    path = write_pdf(tmp_path / "report.pdf", [("Construction", PDF_FACT), ("Repairs", "It was repaired in 1932.")])
    docs = load_file(path, "report.pdf")
    assert [d.metadata for d in docs] == [
        {"source": "report.pdf", "title": "Varrow Bridge Report", "page": 1, "section": "Construction"},
        {"source": "report.pdf", "title": "Varrow Bridge Report", "page": 2, "section": "Repairs"},
    ]
    assert " ".join(docs[0].page_content.split()) == PDF_FACT
    assert docs[1].page_content == "It was repaired in 1932."


def test_html_content_without_boilerplate(tmp_path: Path) -> None:
    docs = load_file(write_html(tmp_path / "festival.html"), "festival.html")
    assert [d.metadata for d in docs] == [{"source": "festival.html", "title": "Zorblat festival"},
                                         {"source": "festival.html", "title": "Zorblat festival", "section": "Schedule"}]
    assert docs[0].page_content == "People race giant snails at the Zorblat festival."
    assert docs[1].page_content == "Schedule\n\nday | event\nMonday | snail race\n\nrace --fast\n  --snails 12"
    text = "\n".join(d.page_content for d in docs)
    for markup in ("<", "http", "badge", "tracker", "Home", "Copyright", "editors", "color"):
        assert markup not in text


def test_docx_headings_lists_and_tables(tmp_path: Path) -> None:
    docs = load_file(write_docx(tmp_path / "observatory.docx"), "observatory.docx")
    assert [(d.metadata["title"], d.metadata["section"]) for d in docs] == [
        ("Quillon Observatory", "History"), ("Quillon Observatory", "History > Staff")]
    assert docs[0].page_content == ("History\n\nThe Quillon Observatory was founded in 1902 on Mount Ferrow.\n\n"
                                    "- first telescope in 1903\n- second dome in 1911\n\ntelescope | aperture\nGreat | 1 m")
    assert docs[1].page_content == "Staff\n\nThe astronomer Ilse Marrow directs it."


@pytest.mark.parametrize(("name", "reason"), [
    ("truncated.pdf", "cannot parse this .pdf file"),
    ("notzip.docx", "cannot parse this .docx file"),
    ("binary.html", "not a text file (binary content)"),
])
def test_a_broken_file_is_one_clear_error(tmp_path: Path, name: str, reason: str) -> None:
    path = write_broken(tmp_path)[name]
    with pytest.raises(NoDocumentsError) as info:
        load_file(path, name)
    message = str(info.value)
    assert message.startswith(f"{path}: {reason}") and "\n" not in message


def test_unsupported_files_are_listed_with_a_reason(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Notes\n\ntext\n")
    (tmp_path / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0")
    (tmp_path / "Makefile").write_text("all:\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    supported, others = scan_folder(tmp_path)
    assert [p.name for p in supported] == ["notes.md"]
    assert [(p.name, reason) for p, reason in others] == [
        ("Makefile", "unsupported format (no suffix)"), ("old.doc", "unsupported format .doc")]


def test_links_out_of_the_folder_are_not_followed(tmp_path: Path) -> None:
    """A folder handed over by someone else cannot pull a private file into the store through a link."""
    root, outside = tmp_path / "docs", tmp_path / "private"
    (root / "sub").mkdir(parents=True)
    (outside / "keys").mkdir(parents=True)
    (outside / "secret.md").write_text("# Secret\n\nthe password\n")
    (outside / "keys" / "k.md").write_text("# Key\n\nk\n")
    (root / "notes.md").write_text("# Notes\n\ntext\n")
    (root / "secret.md").symlink_to(outside / "secret.md")
    (root / "keys").symlink_to(outside / "keys", target_is_directory=True)
    (root / "sub" / "same.md").symlink_to(root / "notes.md")  # inside the folder: read
    supported, others = scan_folder(root)
    assert [p.relative_to(root).as_posix() for p in supported] == ["notes.md", "sub/same.md"]
    assert [(p.name, reason) for p, reason in others] == [
        ("keys", "a symbolic link to a folder outside the folder: not followed"),
        ("secret.md", "a symbolic link to a file outside the folder: not followed")]


def test_a_missing_optional_package_is_a_reason_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    path = write_pdf(tmp_path / "r.pdf", [("A", "text")])
    monkeypatch.setitem(sys.modules, "pypdf", None)  # as if pypdf were not installed
    with pytest.raises(NoDocumentsError, match=r"reading \.pdf files needs pypdf: pip install 'langchain-selfrag\[documents\]'"):
        load_file(path, "r.pdf")
