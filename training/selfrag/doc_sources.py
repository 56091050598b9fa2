"""Documentation installed on this machine, as training text.

Three kinds, all written by the packages' own authors: the README of each installed distribution
(the long description of its METADATA, markdown or reStructuredText as published on PyPI),
documentation files shipped inside packages (``*.md`` / ``*.rst``), and API reference pages made from
the docstrings of public functions and classes (read with :mod:`ast`: nothing is imported or run).
Each is a :class:`DocText` named as a user would name the file they index.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

#: Suffix of a README by its METADATA ``Description-Content-Type``.
_SUFFIX = {"text/markdown": ".md", "text/x-rst": ".rst", "text/plain": ".txt"}


@dataclass(frozen=True)
class DocText:
    """One document: the distribution it comes from, a file name (with the suffix that tells its
    format), its raw text, and its kind (``readme``, ``docfile`` or ``api``)."""

    package: str
    name: str
    text: str
    kind: str


def normalise(name: str) -> str:
    """A distribution name in PEP 503 form (``Python_Slugify`` -> ``python-slugify``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def site_dirs(extra: Iterable[str | Path] = ()) -> list[Path]:
    """The ``site-packages`` folders of this interpreter, plus ``extra`` ones."""
    dirs = [Path(p) for p in sys.path if p.endswith("site-packages")] + [Path(p) for p in extra]
    seen, out = set(), []
    for d in dirs:
        if d.is_dir() and d.resolve() not in seen:
            seen.add(d.resolve())
            out.append(d)
    return out


def distributions(dirs: Iterable[Path], exclude: Collection[str] = ()) -> list[metadata.Distribution]:
    """One distribution per normalised name found in ``dirs`` (first found wins), minus ``exclude``."""
    skip = {normalise(n) for n in exclude}
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=[str(d) for d in dirs]):
        name = normalise(dist.metadata.get("Name") or "")
        if name and name not in skip and name not in found:
            found[name] = dist
    return [found[k] for k in sorted(found)]


def readme(dist: metadata.Distribution, min_chars: int = 800) -> DocText | None:
    """The distribution's long description as a file of its format (None when short or missing)."""
    meta = dist.metadata
    text = meta.get_payload() if hasattr(meta, "get_payload") else None
    text = text or meta.get("Description") or ""
    if len(text.strip()) < min_chars:
        return None
    kind = (meta.get("Description-Content-Type") or "").split(";")[0].strip().lower()
    suffix = _SUFFIX.get(kind) or (".rst" if re.search(r"^(=+|-+|\*+)\s*$", text, re.M) and "```" not in text else ".md")
    name = normalise(meta["Name"])
    return DocText(name, f"{name}{suffix}", text, "readme")


def doc_files(dist: metadata.Distribution, *, per_package: int, min_chars: int = 600, max_chars: int = 40_000) -> list[DocText]:
    """Up to ``per_package`` markdown / reStructuredText files shipped inside the distribution
    (licences and metadata folders left out), in a stable order."""
    out = []
    name = normalise(dist.metadata["Name"])
    for f in sorted(dist.files or [], key=str):
        path = str(f)
        low = path.lower()
        if not low.endswith((".md", ".rst")) or ".dist-info/" in low or "license" in low or "licence" in low:
            continue
        try:
            text = Path(dist.locate_file(f)).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if min_chars <= len(text) <= max_chars:
            out.append(DocText(name, path.replace("/", "__"), text, "docfile"))
            if len(out) >= per_package:
                break
    return out


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    args = ast.unparse(node.args)
    return f"({args})"


def api_entries(source: str, module: str) -> Iterator[tuple[str, str, str]]:
    """``(qualified name, signature, docstring)`` of the public, documented functions, classes and
    methods of one module's source."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return

    def walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, str, str]]:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                doc = ast.get_docstring(node)
                qual = f"{prefix}.{node.name}"
                if isinstance(node, ast.ClassDef):
                    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
                    if doc:
                        yield qual, _signature(init) if init else "", doc
                    yield from walk(node.body, qual)
                elif doc:
                    yield qual, _signature(node), doc

    yield from walk(tree.body, module)


def api_pages(dist: metadata.Distribution, *, per_package: int, per_page: int = 6, min_doc_chars: int = 120) -> list[DocText]:
    """API reference pages from the distribution's public modules: each page lists up to
    ``per_page`` documented functions or classes of one module (``name(signature)`` then the docstring)."""
    name = normalise(dist.metadata["Name"])
    pages = []
    for f in sorted(dist.files or [], key=str):
        path = str(f)
        if not path.endswith(".py") or "/_" in f"/{path}" or "test" in path.lower() or ".dist-info/" in path:
            continue
        try:
            source = Path(dist.locate_file(f)).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        module = path[:-3].replace("/", ".").removesuffix(".__init__")
        entries = [(q, s, d) for q, s, d in api_entries(source, module) if len(d) >= min_doc_chars]
        if not entries:
            continue
        body = "\n\n".join(f"{q}{s}\n\n{d}" for q, s, d in entries[:per_page])
        pages.append(DocText(name, f"{module}.txt", f"{module}\n\n{body}\n", "api"))
        if len(pages) >= per_package:
            break
    return pages


def installed_docs(dirs: Iterable[Path], exclude: Collection[str] = (), *, files_per_package: int = 3,
                   api_per_package: int = 3) -> list[DocText]:
    """Every installed distribution's README, a few of its documentation files and API pages."""
    out: list[DocText] = []
    for dist in distributions(dirs, exclude):
        doc = readme(dist)
        if doc:
            out.append(doc)
        out += doc_files(dist, per_package=files_per_package)
        out += api_pages(dist, per_package=api_per_package)
    return out
