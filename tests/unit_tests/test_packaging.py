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


def test_the_readme_python_section_starts_with_a_pip_line_for_each_use() -> None:
    import re

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use it from Python\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    assert section.index("```bash") < section.index("```python")  # install first, then the code
    lines = [line for line in block.splitlines() if line.strip()]
    assert all(line.startswith("pip install") for line in lines)
    named = {extra for line in lines for group in re.findall(r"\[([a-z0-9_,]+)\]", line.split("#")[0])
             for extra in group.split(",")}
    assert {"local", "llamacpp", "smollm2", "transformers", "training", "serve"} <= named
    assert named <= set(PROJECT["optional-dependencies"])
