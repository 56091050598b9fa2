"""explain_questions (how/why questions a passage answers in one sentence) and the explain_data builder."""

from __future__ import annotations

import json

import pytest

from cookbook.data import explain_data
from cookbook.data.explain_data import explain_rows
from langchain_selfrag import tokens as T
from langchain_selfrag.calibrate.questions import explain_questions
from training.selfrag.qa_data import Passage

GUIDE = """Quillcache stores parsed pages on disk.

To clear the page cache, run quillcache purge with the --all flag.

Stale entries are removed by comparing each page's checksum with the one on the server.

You can limit the cache size by setting QUILL_MAX_MB before the first import.

Use the --dry-run option to preview a purge.

Remote pages are not cached because their checksums cannot be read offline.

A page cannot be pinned because pinning was removed in 2.0.
"""


def test_each_form_gives_its_question_and_the_whole_sentence_as_answer() -> None:
    pairs = dict(explain_questions(GUIDE, limit=10))
    assert pairs["How do I clear the page cache?"] == "To clear the page cache, run quillcache purge with the --all flag."
    assert pairs["How are stale entries removed?"].startswith("Stale entries are removed by comparing")
    assert pairs["How can I limit the cache size?"].endswith("before the first import.")
    assert pairs["How do I preview a purge?"] == "Use the --dry-run option to preview a purge."
    assert pairs["Why are remote pages not cached?"].endswith("cannot be read offline.")
    assert pairs["Why can a page not be pinned?"] == "A page cannot be pinned because pinning was removed in 2.0."
    assert len(pairs) == 6  # the first sentence explains nothing


def test_vague_sentences_discourse_markers_and_the_limit() -> None:
    text = ("To date, nobody has measured the cache. To use it, call open. It is removed by calling purge. "
            "This is slow because the disk is slow. To clear the page cache, run quill purge --all.")
    assert explain_questions(text) == [("How do I clear the page cache?", "To clear the page cache, run quill purge --all.")]
    assert len(explain_questions(GUIDE, limit=2)) == 2
    assert explain_questions("") == []
    assert explain_questions("`purge` is run by calling the cleaner on every page.") == []  # opens with code


def test_a_name_keeps_its_case_and_a_common_word_is_lowered() -> None:
    text = "We love Quill. Quill is fast because it reads pages lazily. Pages are found by scanning the index."
    questions = [q for q, _ in explain_questions(text)]
    assert questions == ["Why is Quill fast?", "How are pages found?"]


def _passage(i: int, text: str, doc: str = "quill.md") -> Passage:
    return Passage(f"doc:{doc}#{i}", "Quill", text, article=f"doc:{doc}")


def test_rows_answer_on_the_explaining_chunk_and_decline_on_another_chunk_of_the_same_document() -> None:
    chunks = {"quill.md": [_passage(0, "To clear the page cache, run quillcache purge with the --all flag."),
                           _passage(1, "The page cache lives in ~/.quill and is cleared on upgrade.")],
              "other.md": [_passage(0, "The page cache of Other is cleared nightly.", "other.md")]}
    rows = explain_rows(chunks)
    assert [r["variant"] for r in rows] == ["doc_explain", "doc_explain_same_document"]
    relevant, irrelevant = rows
    assert relevant["output"].endswith(T.RELEVANT + "To clear the page cache, run quillcache purge with the --all flag."
                                       + T.FULLY_SUPPORTED + T.UTILITY[4])
    assert irrelevant["passage"] == "doc:quill.md#1" and T.IRRELEVANT in irrelevant["output"]
    assert irrelevant["no_loss_spans"]  # the sentence after [Irrelevant] is read, not trained
    lone = explain_rows({"quill.md": chunks["quill.md"][:1]})
    assert [r["variant"] for r in lone] == ["doc_explain"]


def test_the_file_replays_the_trained_file_and_leaves_out_this_project(tmp_path, monkeypatch) -> None:
    from training.selfrag.doc_sources import DocText

    seen = {}

    def fake_docs(dirs, exclude=(), **kw):
        seen["exclude"] = set(exclude)
        return [DocText("quill", "quill.md", GUIDE, "readme")]

    monkeypatch.setattr(explain_data, "installed_docs", fake_docs)
    trained = tmp_path / "trained.jsonl"
    trained.write_text("".join(json.dumps({"instruction": f"q{i}", "input": "", "output": "x", "id": f"t{i}"}) + "\n"
                               for i in range(10)))
    out = tmp_path / "x" / "explain.jsonl"
    assert explain_data.main(["--trained", str(trained), "--replay", "4", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["replayed"] == 4 and summary["new"] == len(rows) - 4 > 0
    assert {"langchain-selfrag"} <= seen["exclude"]
    assert len({r["id"] for r in rows}) == len(rows)


def test_bad_arguments_are_clear_errors(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        explain_data.main(["--out", str(tmp_path / "o.jsonl"), "--replay", "3"])
    assert "--replay needs --trained" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        explain_data.main(["--out", str(tmp_path / "o.jsonl"), "--trained", str(tmp_path / "none.jsonl")])
    assert "no such file" in capsys.readouterr().err


def test_a_replay_larger_than_the_trained_file_takes_all_of_it_but_the_new_questions(tmp_path, monkeypatch) -> None:
    from training.selfrag.doc_sources import DocText

    monkeypatch.setattr(explain_data, "installed_docs", lambda dirs, exclude=(), **kw: [DocText("quill", "quill.md", GUIDE, "readme")])
    trained = tmp_path / "trained.jsonl"
    asked = ["How do I clear the page cache?"] + [f"q{i}" for i in range(4)]  # the first is asked anew
    trained.write_text("".join(json.dumps({"instruction": q, "input": "", "output": "x"}) + "\n" for q in asked))
    rows, summary = explain_data.build(trained, replay=50)
    assert summary["replayed"] == 4
