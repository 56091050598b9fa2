"""Papers are cited by their titles (Self-RAG as Asai et al., ICLR 2024), never by a file number
that only the people who wrote this code could look up."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILE_NUMBER = re.compile(r"\bseed[ _-]?\d{3}\b", re.IGNORECASE)


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:  # not a git checkout (an sdist): every file under the root
        return [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [ROOT / name for name in out.stdout.splitlines()]


def test_no_paper_is_cited_by_a_file_number() -> None:
    found = []
    for path in tracked_text_files():
        if path.suffix in {".py", ".md", ".sh", ".toml", ".txt", ".rst", ".cfg"} and path.is_file():
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if FILE_NUMBER.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:80]}")
    assert found == []


def test_the_readme_names_both_papers() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "Asai et al." in readme and "ICLR 2024" in readme
    assert "LLMs can learn self-restraint through iterative self-reflection" in " ".join(readme.split())
