"""The questions ReSearch data is made for: ``Who is X?`` lines or JSONL records, with passages in
the ``bio_retrieved_passages.txt`` format (one line per question, passages separated by `` [sep] ``,
each ``title // text``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from langchain_selfrag.jsonl import iter_jsonl
from langchain_selfrag.restraint.claims import guess_entity

#: Separates the passages of one line of ``bio_retrieved_passages.txt``.
PASSAGE_SEP = " [sep] "
#: Separates a passage's title from its text.
TITLE_SEP = " // "


@dataclass(frozen=True)
class Question:
    """One question to search answers for; ``passages`` are kept on the record for evaluators."""

    id: str
    question: str
    entity: str
    passages: tuple[Document, ...] = ()



def parse_passage(raw: str) -> Document | None:
    """``title // text`` as a Document (title in metadata); a passage without `` // `` is all text."""
    raw = raw.strip()
    if not raw:
        return None
    title, sep, text = raw.partition(TITLE_SEP)
    if not sep:
        title, text = "", raw
    return Document(page_content=text.strip(), metadata={"title": title.strip()})


def parse_passage_line(line: str) -> tuple[Document, ...]:
    """The passages of one ``bio_retrieved_passages.txt`` line."""
    return tuple(d for d in (parse_passage(p) for p in line.strip().split(PASSAGE_SEP.strip())) if d is not None)


def _passages_field(value: Any) -> tuple[Document, ...]:
    if isinstance(value, str):
        return parse_passage_line(value)
    docs = []
    for item in value or ():
        if isinstance(item, str):
            doc = parse_passage(item)
        else:
            doc = Document(page_content=str(item.get("text", "")), metadata={"title": str(item.get("title", ""))})
        if doc is not None and doc.page_content:
            docs.append(doc)
    return tuple(docs)


def read_questions(path: str | Path, passages: str | Path | None = None) -> list[Question]:
    """Questions from a ``Who is X?`` text file or a JSONL file, with passages when given."""
    path = Path(path)
    rows: list[dict[str, Any]] = []
    if path.suffix == ".jsonl":
        for lineno, rec in iter_jsonl(path):
            question = str(rec.get("question") or "").strip()
            entity = str(rec.get("entity") or "").strip() or guess_entity(question)
            if not entity:
                raise ValueError(f"{path}:{lineno}: no question or entity")
            rows.append({"id": rec.get("id"), "question": question or f"Who is {entity}?", "entity": entity,
                         "passages": _passages_field(rec.get("passages"))})
    else:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append({"id": None, "question": line.strip(), "entity": guess_entity(line), "passages": ()})
    if passages is not None:
        lines = [ln for ln in Path(passages).read_text(encoding="utf-8").splitlines() if ln.strip()]
        if len(lines) != len(rows):
            raise ValueError(f"{passages} has {len(lines)} passage lines for {len(rows)} questions in {path}")
        for row, line in zip(rows, lines):
            row["passages"] = parse_passage_line(line)
    ids = unique_ids([str(r["id"]) if r["id"] else r["entity"] for r in rows])
    return [Question(i, r["question"], r["entity"], r["passages"]) for i, r in zip(ids, rows)]


def unique_ids(names: Sequence[str]) -> list[str]:
    """``names`` as ids, a repeat getting ``#2``, ``#3`` ..."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out
