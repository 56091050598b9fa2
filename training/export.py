"""Export a trained Self-RAG model: a merged Hugging Face directory and a GGUF file.

The GGUF is written by :mod:`langchain_selfrag.export.gguf`; merging, packing and the backend
comparison are :mod:`training.core.export`.

``python -m training.export --adapter runs/generator/adapter --hf-out out/hf --gguf-out out/model.gguf --verify``
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from langchain_selfrag.export import ExportError
from langchain_selfrag.export.gguf import OUTTYPES, export_gguf

from .core.export import compare_backends, export_merged


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.export", description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--adapter", help="training output adapter/ directory (merged with its base first)")
    src.add_argument("--model-dir", help="an already merged HF model directory")
    ap.add_argument("--base-model", help="override the base model recorded at training time")
    ap.add_argument("--hf-out", help="where to write the merged HF directory (needed with --adapter)")
    ap.add_argument("--gguf-out", help="where to write the GGUF file")
    ap.add_argument("--source-gguf", help="GGUF whose tokenizer metadata to copy (default: the base, if a GGUF)")
    ap.add_argument("--outtype", default="q8_0", choices=OUTTYPES)
    ap.add_argument("--verify", action="store_true", help="compare reflection probabilities of both backends")
    args = ap.parse_args(argv)
    try:
        if args.adapter:
            if not args.hf_out:
                ap.error("--adapter needs --hf-out")
            model_dir = export_merged(args.adapter, args.hf_out, base_model=args.base_model)
            print(f"merged model: {model_dir}")
        else:
            model_dir = Path(args.model_dir)
        if args.gguf_out:
            path = export_gguf(model_dir, args.gguf_out, source_gguf=args.source_gguf, outtype=args.outtype)
            print(f"GGUF: {path} ({path.stat().st_size / 1e6:.1f} MB)")
            if args.verify:
                from langchain_selfrag.prompts import format_prompt

                prompts = [format_prompt(q) for q in ("Who wrote Hamlet?", "Write a short poem about rain.", "What is the capital of Poland?")]
                print(json.dumps(compare_backends(model_dir, path, prompts), indent=1))
    except ExportError as exc:
        ap.exit(2, f"error: {exc}\n")
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
