"""Print a pip constraints file pinning every dependency of pyproject.toml to its declared floor.

``python .ci/min_versions.py [--skip-extra NAME ...] > floors.txt`` then
``pip install -c floors.txt -e .[test]`` installs the oldest versions the project claims to
support (cf. langchain's ``get_min_versions.py``). A skipped extra is one the floors run does not
install (its pins would constrain packages it never asks for).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

FLOOR = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(?:>=|==)\s*([0-9][^,;\s]*)")


def floors(pyproject: Path, skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """``{name: floor}`` over the dependencies and the optional extras not in ``skip``."""
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project.get("dependencies", []))
    for name, extra in project.get("optional-dependencies", {}).items():
        if name not in skip:
            specs.extend(extra)
    out: dict[str, str] = {}
    for spec in specs:
        match = FLOOR.match(spec)
        if not match or match.group(1).replace("_", "-") == project["name"]:
            continue
        name = match.group(1).lower().replace("_", "-")
        if name in out and out[name] != match.group(3):
            # the same package with two floors in two extras: the higher one holds for both
            out[name] = max(out[name], match.group(3), key=lambda v: tuple(int(p) for p in re.findall(r"\d+", v)))
        else:
            out[name] = match.group(3)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pyproject", nargs="?", type=Path, default=Path(__file__).resolve().parents[1] / "pyproject.toml")
    parser.add_argument("--skip-extra", action="append", default=[], help="an extra the floors run does not install")
    args = parser.parse_args(argv[1:])
    for name, version in sorted(floors(args.pyproject, frozenset(args.skip_extra)).items()):
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
