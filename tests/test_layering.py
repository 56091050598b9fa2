"""The package's layers point one way: the inference library never imports the training recipes."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "langchain_selfrag"
# Top-level modules the inference package must never import, at any depth of a function.
FORBIDDEN = {"training", "cookbook", "graphs", "trl", "tests"}


def imported_roots(source: str) -> set[str]:
    """Top-level module names of every absolute import in ``source`` (function bodies included)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_imported_roots_sees_nested_imports():
    source = "import os\ndef f():\n    from training.sft import x\n    import trl.trainer\nfrom .x import y\n"
    assert imported_roots(source) == {"os", "training", "trl"}


def test_inference_package_never_imports_training():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        bad = imported_roots(path.read_text(encoding="utf-8")) & FORBIDDEN
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_runtime_imports_stay_out_of_training():
    """Importing and wiring up the public API loads neither the recipes nor TRL."""
    code = (
        "import sys\n"
        "import langchain_selfrag, langchain_selfrag.cli, langchain_selfrag.chain, langchain_selfrag.graph\n"
        "import langchain_selfrag.bundled, langchain_selfrag.retrieval, langchain_selfrag.chat_model\n"
        "import langchain_selfrag.lm, langchain_selfrag.evaluation.cli\n"
        "langchain_selfrag.cli.build_parser()\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'training', 'cookbook', 'trl'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT.parent, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""


@pytest.mark.slow
def test_wheel_installs_only_langchain_selfrag(tmp_path):
    """``pip install langchain-selfrag`` adds one top-level package and no ``training``/``graphs``."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    if out.returncode != 0:
        pytest.skip(f"could not build a wheel here: {out.stderr.strip()[-300:]}")
    (wheel,) = tmp_path.glob("langchain_selfrag-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    packages = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert packages == {"langchain_selfrag"}
    assert not [n for n in names if n.startswith(("training/", "graphs/", "cookbook/", "tests/"))]
