"""Every code example of the README and of docs/*.md runs: the pages and the code cannot drift apart.

The ```python and ```bash (```sh, ```console) blocks of each page are extracted. A page's Python blocks run in
order in one fresh Python process, as the cells of a notebook (a later block sees the names an earlier one
made); then its shell blocks run with bash, with this interpreter's ``selfrag`` first on ``PATH``. Both run in
a folder prepared for the page: ``my_docs/``, a copy of the demo corpus (``examples/corpus/``), indexed into
``.selfrag/store`` as ``selfrag index my_docs`` does. A block fails the test when it raises or exits non-zero.

A block that cannot run here (it needs a GPU, a model hub, a server the test does not start, a ``pip install``
or a long run) says so in the page with an HTML comment just before it::

    <!-- docs-test: skip (needs a GPU) -->

and is reported as skipped with that reason. ``docs/chat-models.md`` is left out here (its own test runs it).

The pages run on ``selfrag-smollm2-135m`` (``$SELFRAG_MODEL``, ``conftest.bundled_gguf``): they ask a dozen
questions between them, and the default model's half a minute a question on two cores would take the suite past
its time; their code is the same for any model. The README's example on the default model, as a new user runs it:
``test_torch_free_runtime.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Pages whose blocks another test runs.
EXCLUDED = {"docs/chat-models.md"}
PAGES = [p for p in ["README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")))]
         if p not in EXCLUDED]
RUN_LANGS = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash", "console": "bash"}
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)[^\n]*\n(?P<code>.*?)^```[ \t]*$", re.S | re.M)
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((?P<reason>.*)\)\s*-->\s*$")
#: Seconds one page's blocks may take in all.
PAGE_TIMEOUT = 900


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence
    lang: str  # "python" or "bash"
    code: str
    skip: str | None  # the reason given in the page, or None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str, text: str | None = None) -> list[Block]:
    """The Python and shell blocks of a page, in order, each with the skip reason the page gives it."""
    text = (ROOT / page).read_text() if text is None else text
    found = []
    for m in FENCE.finditer(text):
        lang = RUN_LANGS.get(m["lang"].lower())
        if lang is None:
            continue
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.match(before.strip())
        code = m["code"]
        if m["lang"] == "console":  # a console block's commands are the lines after "$ "
            code = "".join(line[2:] + "\n" for line in code.splitlines() if line.startswith("$ "))
        found.append(Block(page, text.count("\n", 0, m.start()) + 1, lang, code, skip["reason"] if skip else None))
    return found


ALL = [b for page in PAGES for b in blocks(page)]


def counts() -> dict[str, object]:
    """How many blocks run and how many are skipped, with why (for the record)."""
    reasons: dict[str, int] = {}
    for b in ALL:
        if b.skip:
            reasons[b.skip] = reasons.get(b.skip, 0) + 1
    return {"blocks": len(ALL), "run": sum(not b.skip for b in ALL), "skipped": sum(bool(b.skip) for b in ALL),
            "reasons": reasons}


# -- the parser (no model) --------------------------------------------------------------------------------------

def test_blocks_are_found_with_their_skip_reasons():
    page = textwrap.dedent("""\
        Intro.

        ```python
        x = 1
        ```

        <!-- docs-test: skip (needs a GPU (CUDA)) -->
        ```bash
        nvidia-smi
        ```

        ```text
        not code
        ```

        ```console
        $ selfrag --help
        usage: selfrag ...
        ```
        """)
    found = blocks("docs/x.md", page)
    assert [(b.line, b.lang, b.code, b.skip) for b in found] == [
        (3, "python", "x = 1\n", None), (8, "bash", "nvidia-smi\n", "needs a GPU (CUDA)"),
        (16, "bash", "selfrag --help\n", None)]


def test_every_page_but_the_excluded_is_read():
    assert "README.md" in PAGES and "docs/langchain.md" in PAGES and not EXCLUDED & set(PAGES)
    assert counts()["run"] > 0


def test_every_skip_says_why():
    for page in PAGES:
        text = (ROOT / page).read_text()
        marked = len(re.findall(r"<!--\s*docs-test", text))
        assert marked == sum(bool(b.skip) for b in blocks(page)), f"{page}: a docs-test comment stands before no block"
        assert all(b.skip.strip() for b in blocks(page) if b.skip is not None), page


# -- running the pages (the bundled model) ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def prepared(tmp_path_factory) -> Path:
    """A folder with ``my_docs/`` (the demo corpus) indexed into ``.selfrag/store``, copied for each page."""
    folder = tmp_path_factory.mktemp("docs-pages")
    shutil.copytree(ROOT / "examples" / "corpus", folder / "my_docs")
    done = subprocess.run([sys.executable, "-c", "from langchain_selfrag.retrieval import index_path; "
                           "index_path('my_docs', '.selfrag/store')"], cwd=folder, capture_output=True, text=True,
                          timeout=600, env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def _env(model: Path | None = None) -> dict[str, str]:
    """The pages' environment: ``$SELFRAG_MODEL`` is ``model``, or unset (the default model)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False", "PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("SELFRAG_MODEL", None)
    if model is not None:
        env["SELFRAG_MODEL"] = str(model)
    return env


def _python_script(page_blocks: list[Block]) -> str:
    """One script that runs the blocks in order in one namespace, each compiled under its page and line."""
    lines = ["import sys", "__ns = {'__name__': '__main__'}"]
    for b in page_blocks:
        lines.append(f"print('--- {b.id}', flush=True)")
        lines.append(f"exec(compile({b.code!r}, {b.id!r}, 'exec'), __ns)")
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if any(not b.skip for b in blocks(p))])
def test_the_page_s_blocks_run(page, prepared, tmp_path, bundled_gguf):
    env = _env(bundled_gguf)
    folder = tmp_path / "page"
    shutil.copytree(prepared, folder)
    runnable = [b for b in blocks(page) if not b.skip]
    python = [b for b in runnable if b.lang == "python"]
    if python:
        done = subprocess.run([sys.executable, "-c", _python_script(python)], cwd=folder, capture_output=True,
                              text=True, timeout=PAGE_TIMEOUT, env=env)
        assert done.returncode == 0, f"a Python block of {page} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    for b in (b for b in runnable if b.lang == "bash"):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", b.code], cwd=folder, capture_output=True, text=True,
                              timeout=PAGE_TIMEOUT, env=env)
        assert done.returncode == 0, f"the shell block {b.id} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", [b for b in ALL if b.skip], ids=lambda b: b.id)
def test_a_marked_block_is_skipped_with_its_reason(block):
    pytest.skip(f"{block.id}: {block.skip}")


if __name__ == "__main__":  # python tests/integration_tests/test_docs_examples.py: the counts
    import json

    print(json.dumps(counts(), indent=1))
