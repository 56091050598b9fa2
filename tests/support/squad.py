"""A one-paragraph SQuAD 2.0 file (an answerable and an unanswerable question) for the data builders' tests."""

from __future__ import annotations

import json
from pathlib import Path

from cookbook.data.varied_data import KEEP_OUT_ARTICLES

CONTEXT = ("The Zorvian Canal was dug in 1871 by the river guild. It links the two harbours of the old town "
           "and carries about forty barges a day.")


def squad_file(tmp_path: Path, title: str = "Zorvian_Canal") -> Path:
    """``title``'s article and one the trust suite keeps out, both with CONTEXT's two questions."""
    qas = [{"question": "When was the Zorvian Canal dug?", "id": "a", "is_impossible": False,
            "answers": [{"text": "1871", "answer_start": CONTEXT.index("1871")}]},
           {"question": "When was the Zorvian Canal filled in?", "id": "u", "is_impossible": True, "answers": [],
            "plausible_answers": [{"text": "1871", "answer_start": CONTEXT.index("1871")}]}]
    articles = [{"title": t, "paragraphs": [{"context": CONTEXT, "qas": qas}]} for t in (title, KEEP_OUT_ARTICLES[0])]
    path = tmp_path / "part.json"
    path.write_text(json.dumps({"version": "v2.0", "data": articles}))
    return path
