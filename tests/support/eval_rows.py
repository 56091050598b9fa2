"""Three questions with their passages (the JSONL rows `selfrag eval` reads), for end-to-end eval tests."""

from __future__ import annotations

import json
from pathlib import Path

ROWS = [
    {
        "question": "Where is the Eiffel Tower?",
        "answers": ["Paris"],
        "ctxs": [
            {"title": "Eiffel", "text": "The Eiffel Tower is in Paris."},
            {"title": "Rome", "text": "Rome is in Italy."},
        ],
    },
    {
        "question": "Who wrote Hamlet?",
        "answers": ["Shakespeare"],
        "ctxs": [
            {"title": "Rome", "text": "Rome is in Italy."},
            {"title": "Hamlet", "text": "Hamlet is by Shakespeare."},
        ],
    },
    {"question": "What is 2+2?", "answers": ["4"], "ctxs": [{"title": "Math", "text": "Two plus two is four."}]},
]


def write_rows(path: Path) -> Path:
    """Write :data:`ROWS` as JSONL to ``path``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def run_eval(monkeypatch, lm, *argv) -> int:
    """``selfrag eval ARGV --quiet`` with ``lm`` as the model every system loads."""
    from langchain_selfrag.evaluation import cli

    monkeypatch.setattr(cli, "load_model", lambda path: lm)
    return cli.main([*map(str, argv), "--quiet"])
