"""Command line for the model card of ``selfrag-smollm2-135m`` and its ``versions.json``
(:mod:`cookbook.selfrag_smollm2.card`).

* ``python -m cookbook.selfrag_smollm2.model_card [FOLDER]`` re-renders ``FOLDER/README.md``;
* ``... --add-build NAME [--artefacts DIR]`` first adds (or replaces) build NAME's row, made from
  the artefacts in DIR (default: FOLDER), to ``FOLDER/versions.json``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from .card.render import render
from .card.versions import add_build


def main(argv: Sequence[str] | None = None) -> int:
    from langchain_selfrag.bundled import bundle_dir

    ap = argparse.ArgumentParser(description="Render the model card; optionally add a build's row to versions.json.")
    ap.add_argument("folder", nargs="?", help="model folder (default: the bundled model's)")
    ap.add_argument("--add-build", metavar="NAME", help="add (or replace) this build's row before rendering")
    ap.add_argument("--artefacts", help="folder with that build's eval.json and training files (default: FOLDER)")
    args = ap.parse_args(argv)
    folder = Path(args.folder) if args.folder else bundle_dir()
    if args.artefacts and not args.add_build:
        ap.error("--artefacts needs --add-build")
    if args.add_build:
        dropped = add_build(folder, args.add_build, args.artefacts)
        if dropped:
            print(f"dropped rows not made by version_row: {', '.join(dropped)}")
    (folder / "README.md").write_text(render(folder))
    print(folder / "README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
