"""Writing a run's ``report.json`` and its Markdown rendering ``report.md``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def write_json_and_markdown(directory: Path, report: Mapping[str, Any],
                            render: Callable[[Mapping[str, Any]], str]) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md`` (``render``: the report as Markdown)."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "report.json"
    md_path = directory / "report.md"
    json_path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    md_path.write_text(render(report), encoding="utf-8")
    return json_path, md_path


def closing_lines(plots: list[str], notes: list[str]) -> list[str]:
    """The end of a Markdown report: each plot as an image, then each note as a quote."""
    lines: list[str] = []
    for name in plots:
        lines += ["", f"![{name}]({name})"]
    for note in notes:
        lines += ["", f"> {note}"]
    return lines
