"""The trust suite's docs kind (``benchmarks/trust/docs``): its documents, sources and questions, without a model."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.trust_loss import EXPLAINING_TYPES, answer_right, question_type
from benchmarks.trust_suite import SPLITS, SUITE, suite_questions
from cookbook.data.varied_data import suite_packages
from langchain_selfrag.evaluation.qa.metrics import normalize_answer
from langchain_selfrag.retrieval.formats import read_clean
from training.selfrag.doc_sources import normalise

DOCS = SUITE / "docs"
SPEC = json.loads((DOCS / "questions.json").read_text(encoding="utf-8"))
SOURCES = json.loads((DOCS / "sources.json").read_text(encoding="utf-8"))["files"]
TYPES = ("factoid", *EXPLAINING_TYPES)


def squashed(text: str) -> str:
    return " ".join(text.split())


def documents(split: str) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((DOCS / split).iterdir()) if p.is_file()}


def packages(split: str) -> set[str]:
    return {normalise(row["package"]) for row in SOURCES if row["file"].startswith(f"{split}/")}


@pytest.mark.parametrize("split", SPLITS)
def test_each_part_holds_enough_questions_of_each_type(split: str) -> None:
    answerable, near = SPEC[split]["answerable"], SPEC[split]["near_miss"]
    assert len(answerable) >= 90 and len(near) >= 60
    types = Counter(question_type(q) for q in answerable)
    assert set(types) <= set(TYPES), types
    assert all(types[t] >= 30 for t in TYPES), types


def test_the_packages_are_many_and_no_package_is_in_both_parts() -> None:
    assert len(packages("validation") | packages("test")) >= 20
    assert not packages("validation") & packages("test")
    kinds = Counter(row["kind"] for row in SOURCES)
    assert {"readme", "cli", "guide", "api", "changelog"} <= set(kinds), kinds


def test_every_document_has_one_source_row_with_its_licence_and_origin() -> None:
    files = sorted(f"{split}/{name}" for split in SPLITS for name in documents(split))
    assert sorted(row["file"] for row in SOURCES) == files
    for row in SOURCES:
        assert row["licence"].strip() and row["release"].strip() and row["path"].strip(), row
        stem = Path(row["file"]).stem
        assert stem == row["package"] or stem.startswith(row["package"] + "-"), row  # <package>-<what>.<ext>


def test_sources_md_lists_the_same_rows_as_sources_json() -> None:
    table = [line for line in (DOCS / "SOURCES.md").read_text(encoding="utf-8").splitlines()
             if re.match(r"^\| (validation|test)/", line)]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table]
    assert [(r[0], r[1], r[2], r[4]) for r in rows] == [
        (s["file"], f"{s['package']} {s['release']}", s["path"], s["licence"]) for s in SOURCES]


def test_training_leaves_out_every_package_of_the_suite(tmp_path: Path) -> None:
    assert suite_packages() == packages("validation") | packages("test")
    # several files of one package, named after it and what they hold, leave out one distribution
    listed = tmp_path / "sources.json"
    listed.write_text(json.dumps({"files": [
        {"file": "validation/Python_Slugify-cli.md", "package": "Python_Slugify"},
        {"file": "validation/Python_Slugify-changelog.md", "package": "Python_Slugify"},
        {"file": "test/zope.interface-api.rst", "package": "zope.interface"}]}), encoding="utf-8")
    assert suite_packages(listed) == {"python-slugify", "zope-interface"}


@pytest.mark.parametrize("split", SPLITS)
def test_every_question_names_a_document_of_its_part_and_none_repeats(split: str) -> None:
    docs = documents(split)
    spec = SPEC[split]
    for q in spec["answerable"] + spec["near_miss"]:
        assert q["source"] in docs, q
    for q in spec["near_miss"]:
        assert not q.get("answers") and "sentences" not in q, q
    asked = [q["question"] for s in SPLITS for p in ("answerable", "near_miss") for q in SPEC[s][p]]
    assert not [q for q, n in Counter(asked).items() if n > 1]


@pytest.mark.parametrize("split", SPLITS)
def test_every_answerable_question_has_a_gold_answer_in_its_document(split: str) -> None:
    docs = {name: normalize_answer(text) for name, text in documents(split).items()}
    for q in SPEC[split]["answerable"]:
        golds = [g for g in (normalize_answer(a) for a in q["answers"]) if g]
        assert golds and any(g in docs[q["source"]] for g in golds), q


@pytest.mark.parametrize("split", SPLITS)
def test_explaining_questions_have_the_documents_own_sentences(split: str) -> None:
    docs = {name: squashed(text) for name, text in documents(split).items()}
    for q in SPEC[split]["answerable"]:
        if question_type(q) == "factoid":
            assert "sentences" not in q, q
            continue
        assert q["sentences"], q
        for sentence in q["sentences"]:
            assert squashed(sentence) in docs[q["source"]], (q["question"], sentence)  # verbatim, whitespace aside
        # each short answer (used for gold chunks and the noise-only filter) is part of a gold sentence
        assert any(normalize_answer(a) in normalize_answer(" ".join(q["sentences"])) for a in q["answers"]), q


@pytest.mark.parametrize("split", SPLITS)
def test_quoting_the_gold_sentences_as_selfrag_index_reads_them_is_right(split: str, tmp_path: Path) -> None:
    """Each gold sentence rendered as the loader renders its file (markup gone) is in the text the chain can
    retrieve, and an answer quoting the rendered sentences is scored right."""
    docs, questions = suite_questions("docs", split, None, 0, 0)
    for name, text in docs.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    clean = {name: normalize_answer(read_clean(tmp_path / name).text) for name in docs}
    explaining = [q for q in questions if q["part"] == "answerable" and question_type(q) != "factoid"]
    assert explaining
    for i, q in enumerate(explaining):
        rendered = []
        for j, sentence in enumerate(q["sentences"]):
            alone = tmp_path / f"sentence-{i}-{j}{Path(q['source']).suffix}"
            alone.write_text(sentence + "\n", encoding="utf-8")
            rendered.append(read_clean(alone).text)
            assert normalize_answer(rendered[-1]) in clean[q["source"]], (q["question"], sentence)
        assert answer_right(q, " ".join(rendered), [q["source"]]), q["question"]
        assert not answer_right(q, " ".join(rendered), ["another.md"])  # the document must be cited
