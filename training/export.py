"""Export a trained Self-RAG model: a merged Hugging Face directory and a GGUF file.

The GGUF is written by :mod:`langchain_selfrag.gguf_export` (Llama-architecture models: Llama,
SmolLM2, Mistral-style configs without sliding windows; reflection tokens as CONTROL tokens), the
same writer the bundled-model build uses. This module adds merging a trained adapter, packing it
for shipping and comparing the two backends. Every recipe exports through it.

``python -m training.export --adapter runs/generator/adapter --hf-out out/hf --gguf-out out/model.gguf --verify``
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from langchain_selfrag import tokens as T
from langchain_selfrag.gguf_export import OUTTYPES, ExportError, export_gguf, write_gguf  # noqa: F401


def export_merged(adapter_dir: str | os.PathLike, out_dir: str | os.PathLike, *, base_model: str | None = None) -> Path:
    """Base + reflection tokens + adapter, merged and saved as a plain HF directory."""
    from .sft import META_FILE, load_trained

    model, tokenizer, meta = load_trained(adapter_dir, base_model=base_model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    (out / META_FILE).write_text(json.dumps(meta, indent=1))
    return out


def pack_adapter(adapter_dir: str | os.PathLike, out_dir: str | os.PathLike, *, base_name: str | None = None) -> Path:
    """Copy a trained adapter into a small shippable folder: fp16 LoRA + token rows, config, metadata.

    The reflection-token rows stay fp32 (they are few and start far from any trained row).
    ``base_name`` replaces the machine-specific base-model path in the metadata.
    """
    import torch
    from safetensors.torch import load_file, save_file

    src, out = Path(adapter_dir), Path(out_dir)
    if not (src / "adapter_model.safetensors").is_file():
        raise ExportError(f"{src} has no adapter_model.safetensors")
    out.mkdir(parents=True, exist_ok=True)
    weights = load_file(str(src / "adapter_model.safetensors"))
    packed = {k: (v if "trainable_tokens" in k else v.to(torch.float16)).contiguous() for k, v in weights.items()}
    save_file(packed, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text((src / "adapter_config.json").read_text())
    meta = json.loads((src / "selfrag_training.json").read_text())
    if base_name:
        meta["base_model"] = base_name
    (out / "selfrag_training.json").write_text(json.dumps(meta, indent=1))
    return out


def compare_backends(hf_dir: str | os.PathLike, gguf_path: str | os.PathLike, prompts: Sequence[str]) -> dict[str, float]:
    """Largest absolute difference of reflection-group probabilities, transformers vs llama.cpp.

    Compares the Retrieve group at each prompt's next position and the IsRel group after
    evidence appended to each prompt, both as normalised scores and raw probabilities.
    """
    from langchain_selfrag import scoring
    from langchain_selfrag.lm import load_reflection_lm
    from langchain_selfrag.prompts import with_evidence

    hf = load_reflection_lm(hf_dir, backend="transformers", device="cpu")
    cpp = load_reflection_lm(gguf_path, backend="llamacpp", n_ctx=2048, n_threads=1)
    if not cpp.has_reflection_vocab:
        raise ExportError("llama.cpp does not see the reflection tokens as single tokens in the exported GGUF")
    for p in prompts:
        if hf.tokenize(p, add_bos=True) != cpp.tokenize(p, add_bos=True):
            raise ExportError(f"tokenizations differ between backends for prompt {p[:60]!r}")
    retrieve = list(T.GROUPS[T.Kind.RETRIEVE])
    isrel = list(T.GROUPS[T.Kind.ISREL])
    ev_prompts = [with_evidence(p, "Evidence", "Some evidence text for the comparison.") for p in prompts]
    diffs = {"retrieve_prob": 0.0, "isrel_prob": 0.0, "retrieve_score": 0.0, "isrel_score": 0.0}
    for a, b in zip(hf.candidate_probs(prompts, retrieve), cpp.candidate_probs(prompts, retrieve)):
        diffs["retrieve_prob"] = max(diffs["retrieve_prob"], max(abs(a[k] - b[k]) for k in retrieve))
        diffs["retrieve_score"] = max(diffs["retrieve_score"], abs(scoring.retrieve_probability(a) - scoring.retrieve_probability(b)))
    for a, b in zip(hf.candidate_probs(ev_prompts, isrel), cpp.candidate_probs(ev_prompts, isrel)):
        diffs["isrel_prob"] = max(diffs["isrel_prob"], max(abs(a[k] - b[k]) for k in isrel))
        diffs["isrel_score"] = max(diffs["isrel_score"], abs(scoring.isrel_score(a) - scoring.isrel_score(b)))
    if hasattr(cpp, "close"):
        cpp.close()
    return {k: float(v) if math.isfinite(v) else float("nan") for k, v in diffs.items()}


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
