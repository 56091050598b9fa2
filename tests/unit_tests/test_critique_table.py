"""The critique table ``selfrag ask`` prints: a candidate whose answer was never written shows no score."""

from __future__ import annotations

from langchain_core.documents import Document

from langchain_selfrag.cli import format_result


def _entry(passage: int, text: str, score: float, selected: bool = False) -> dict:
    return {"passage": passage, "text": text, "isrel": 0.9, "issup": 0.8 if text else None, "isuse": 0.5,
            "seq_prob": 1.0 if not text else 0.6, "score": score, "dropped": False, "selected": selected, "depth": 1}


def test_a_candidate_never_written_shows_no_score_above_the_selected_one() -> None:
    passages = [Document(page_content="a", metadata={"source": "a.md"}),
                Document(page_content="b", metadata={"source": "b.md"})]
    out = {"abstained": False, "answer": "It retrieves.", "citations": [passages[0]], "retrieve_probability": 0.9,
           "retrieved": True, "passages": passages,
           "trace": [_entry(0, "It retrieves.", 2.1, selected=True), _entry(1, "", 2.9)]}
    rows = [line for line in format_result(out).splitlines() if line.strip().startswith(("0", "1"))]
    assert len(rows) == 2
    assert "0.60   2.10  a.md  selected" in rows[0]
    assert "2.90" not in rows[1] and "1.00" not in rows[1]
    assert rows[1].endswith("-      -  b.md  no answer written")
