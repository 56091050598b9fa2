"""The package's layers point one way: the inference library never imports the training recipes, each of its
parts imports only parts of its own layer or below (function bodies included), no import closes a circle
(a package's ``__init__`` included, which importing any of its modules runs), and the benchmarks and the
training commands never import the cookbook."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
        "import langchain_selfrag.bundled, langchain_selfrag.retrieval, langchain_selfrag.chat_models\n"
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


# -- the import graph: who imports whom, function bodies included -------------------------------
def module_names(root: Path, top: str) -> dict[str, Path]:
    """Dotted name -> file of every module under the package folder ``root`` (named ``top``)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [top, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def import_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of modules in ``modules`` (relative imports resolved, at any depth), and of the
    packages above each imported module that the importer is not inside: importing ``a.b.c`` runs ``a.b``'s
    ``__init__`` first, so an import of ``a.b.c`` that looks acyclic may still close a circle through it."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                bases = [alias.name for alias in node.names]
                names: list[str] = []
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    bases = [f"{base}.{node.module}" if node.module else base]
                else:
                    bases = [node.module or ""]
                names = [alias.name for alias in node.names]
            else:
                continue
            for base in bases:
                for target in [f"{base}.{n}" for n in names] + [base]:
                    while target and target not in modules:
                        target = target.rpartition(".")[0]
                    if target and target != name:
                        targets.add(target)
                        targets.update(_packages_run(target, name, modules))
                        break
                else:
                    continue
                # `from pkg import sub` (sub a module) depends on pkg.sub, not on pkg's __init__
        edges[name] = targets
    return edges


def _packages_run(target: str, importer: str, modules: dict[str, Path]) -> set[str]:
    """The packages above ``target`` whose ``__init__`` importing it runs: those ``importer`` is not inside."""
    parts = target.split(".")
    above = {".".join(parts[:n]) for n in range(2, len(parts))}
    return {pkg for pkg in above if pkg in modules and not (importer == pkg or importer.startswith(pkg + "."))}


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def test_import_cycles_are_found() -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def write_package(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return module_names(root / "pkg", "pkg")


def test_an_import_hidden_in_a_function_still_closes_a_circle_through_a_packages_init(tmp_path) -> None:
    """``low`` imports ``pkg.lm.words`` inside a function; ``pkg.lm``'s ``__init__`` imports ``pkg.lm.base``, which
    imports ``low``: a circle, though no module imports another that imports it back."""
    modules = write_package(tmp_path, {
        "__init__.py": "", "low.py": "def f():\n    from .lm.words import W\n",
        "lm/__init__.py": "from .base import B\n", "lm/base.py": "from ..low import f\nB = 1\n", "lm/words.py": "W = 1\n"})
    edges = import_edges(modules)
    assert edges["pkg.low"] == {"pkg.lm.words", "pkg.lm"} and edges["pkg.lm.base"] == {"pkg.low"}
    assert import_cycles(edges) == [["pkg.lm", "pkg.lm.base", "pkg.low"]]


def test_an_import_up_a_layer_is_found(tmp_path) -> None:
    modules = write_package(tmp_path, {"__init__.py": "", "tokens.py": "def f():\n    from .graph import g\n",
                                       "graph.py": "from .tokens import f\n"})
    layers = [{"tokens"}, {"graph"}]
    assert upward_imports(import_edges(modules), layers, top="pkg") == {"pkg.tokens": ["pkg.graph"]}
    assert upward_imports(import_edges(modules), [{"tokens", "graph"}], top="pkg") == {}


@pytest.mark.parametrize("top", ["langchain_selfrag", "training"])
def test_no_import_cycles(top: str) -> None:
    """No module imports itself through others, not even from inside a function."""
    edges = import_edges(module_names(ROOT / top, top))
    assert import_cycles(edges) == []


#: The parts of ``langchain_selfrag``, lowest first: a part imports only parts of its own layer or below, at any
#: depth of a function. A new module or subpackage is placed here on purpose (the test names one that is not).
LAYERS: list[set[str]] = [
    {"errors", "tokens", "jsonl", "quiet"},
    {"chatml", "prompts", "scoring", "config"},  # byte-exact text, score formulas, the knobs
    {"questions", "prompt_layouts", "layout_record", "passage_budget", "config_flags"},  # the prompt pieces
    {"retrieval", "export"},
    {"bundled", "abstention", "restraint", "answer_sentence", "passage_reads", "chain_tool"},
    {"lm"},
    {"graph", "fakes"},
    {"chain"},
    {"chat_models", "agents", "evaluation", "calibrate"},
    {"cli"},
    {"__init__"},
]


def part_of(module: str, top: str) -> str:
    """The part of the package a dotted module name belongs to (``langchain_selfrag.lm.base`` -> ``lm``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == top else "__init__"


def upward_imports(edges: dict[str, set[str]], layers: list[set[str]], *, top: str) -> dict[str, list[str]]:
    """Each module's imports of a part in a higher layer than its own."""
    rank = {part: n for n, layer in enumerate(layers) for part in layer}
    return {m: sorted(t for t in targets if rank[part_of(t, top)] > rank[part_of(m, top)])
            for m, targets in edges.items()
            if any(rank[part_of(t, top)] > rank[part_of(m, top)] for t in targets)}


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {part_of(m, "langchain_selfrag") for m in module_names(PACKAGE, "langchain_selfrag")}
    placed = set().union(*LAYERS)
    assert parts - placed == set(), "place the new part in LAYERS"
    assert placed - parts == set()


def test_no_part_imports_a_higher_layer() -> None:
    """Prompts and questions below lm, lm below the graph, the graph below the chain and the command: an import
    that runs back up, even inside a function, is found."""
    edges = import_edges(module_names(PACKAGE, "langchain_selfrag"))
    assert upward_imports(edges, LAYERS, top="langchain_selfrag") == {}


@pytest.mark.parametrize("folder", ["benchmarks", "training"])
def test_benchmarks_and_training_never_import_the_cookbook(folder: str) -> None:
    """They build on the package, training and evaluation; what a recipe and a benchmark share lives in
    training/ (``training.selfrag.retrievers``), never in a recipe."""
    offenders = {str(p.relative_to(ROOT)): "cookbook" for p in sorted((ROOT / folder).rglob("*.py"))
                 if "cookbook" in imported_roots(p.read_text(encoding="utf-8"))}
    assert offenders == {}


def _imports_of(prefix: str) -> dict[str, set[str]]:
    modules = module_names(PACKAGE, "langchain_selfrag")
    edges = import_edges(modules)
    return {m: targets for m, targets in edges.items() if m == prefix or m.startswith(prefix + ".")}


def test_restraint_imports_neither_langgraph_nor_the_graph() -> None:
    """Self-restraint is pure (utility, prompts, claims, scoring): the graph uses it, never the reverse."""
    offenders = {}
    for path in sorted((PACKAGE / "restraint").rglob("*.py")):
        bad = imported_roots(path.read_text(encoding="utf-8")) & {"langgraph"}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}
    graph_users = {m: sorted(t for t in targets if t.startswith("langchain_selfrag.graph"))
                   for m, targets in _imports_of("langchain_selfrag.restraint").items()}
    assert {m: t for m, t in graph_users.items() if t} == {}


def test_importing_restraint_loads_no_langgraph() -> None:
    code = ("import sys, langchain_selfrag.restraint\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'langgraph')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""
