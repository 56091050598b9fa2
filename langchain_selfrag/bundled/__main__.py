"""``python -m langchain_selfrag.bundled``: build (or find) the bundled Self-RAG GGUF and print its path."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..export.gguf import OUTTYPES
from ..export.merge import KEEP
from . import BUNDLED, DEFAULT_MODEL, OUTTYPE, BundleError, build_gguf, bundle_dir, cached_gguf_path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m langchain_selfrag.bundled", description="Build the bundled Self-RAG GGUF.")
    ap.add_argument("--force", action="store_true", help="rebuild even if the cached file exists")
    ap.add_argument("--out", help="write here instead of the cache folder")
    ap.add_argument("--outtype", choices=OUTTYPES + (KEEP,),
                    help=f"quantisation (default: the model's own, {OUTTYPE} unless its card says otherwise; keep: "
                         "the base's tensors as they are, the changed ones q8_0)")
    ap.add_argument("--model", default=DEFAULT_MODEL, choices=list(BUNDLED), help="which bundled model (default: %(default)s)")
    args = ap.parse_args(argv)
    folder = bundle_dir(args.model)
    try:
        target = Path(args.out) if args.out else cached_gguf_path(folder, outtype=args.outtype)
        if target is None:
            print(f"{args.model} unavailable: no shipped adapter or no base GGUF ({BUNDLED[args.model].install_hint})",
                  file=sys.stderr)
            return 1
        if target.is_file() and not args.force:
            print(target)
            return 0
        print(build_gguf(target, folder=folder, outtype=args.outtype))
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
