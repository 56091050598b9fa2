"""The bundled model built two ways: numpy + gguf (what users get, no torch) against PEFT's merge in torch.

Builds the Q8_0 GGUF with :func:`langchain_selfrag.bundled.build_gguf` (numpy) and with the torch
path the package used before (``build_model``: transformers de-quantises the base GGUF, PEFT's
``merge_and_unload``, then :func:`langchain_selfrag.export.gguf.write_gguf`), times both, and
compares them: tensors byte-identical, the largest difference of de-quantised weights, metadata
keys that differ, and on a few prompts llama.cpp's next-token logits and greedy continuations.

    python benchmarks/bundled_build.py --threads 1 --json benchmarks/results/bundled_build.json

Needs the ``transformers`` extra for the torch side (torch, transformers, peft).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.record import Run  # noqa: E402
from langchain_selfrag import bundled  # noqa: E402
from langchain_selfrag import prompts as P  # noqa: E402

QUESTIONS = ("Who wrote the play Hamlet?", "What is the capital of France?", "How does photosynthesis work?")
EVIDENCE = ("Hamlet", "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601.")


def torch_build(out: Path) -> Path:
    """The bundled GGUF as the package built it before: PEFT's merge in torch, then the GGUF writer."""
    from langchain_selfrag.bundled.smollm2 import smollm2_gguf_path
    from langchain_selfrag.export.gguf import write_gguf

    model, tokenizer = bundled.build_model()
    return write_gguf(model, tokenizer, out, source_gguf=smollm2_gguf_path(), outtype=bundled.OUTTYPE,
                      name=bundled.MODEL_NAME)


def compare_tensors(a: Path, b: Path) -> dict:
    import gguf

    ra, rb = gguf.GGUFReader(str(a)), gguf.GGUFReader(str(b))
    ta, tb = {t.name: t for t in ra.tensors}, {t.name: t for t in rb.tensors}
    if sorted(ta) != sorted(tb):
        raise SystemExit(f"the two builds hold different tensors: {sorted(set(ta) ^ set(tb))}")
    identical, worst = 0, 0.0
    for name, x in ta.items():
        y = tb[name]
        same_type = x.tensor_type == y.tensor_type
        identical += int(same_type and np.array_equal(x.data, y.data))
        dx = gguf.quants.dequantize(x.data, x.tensor_type)
        dy = gguf.quants.dequantize(y.data, y.tensor_type)
        worst = max(worst, float(np.abs(dx - dy).max()))
    fa = {k: f.contents() for k, f in ra.fields.items() if not k.startswith("GGUF.")}
    fb = {k: f.contents() for k, f in rb.fields.items() if not k.startswith("GGUF.")}
    differing = sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))
    return {"tensors": len(ta), "tensors_identical": identical, "max_abs_diff_dequantised": worst,
            "metadata_keys_differing": differing,
            "tokens_equal": fa["tokenizer.ggml.tokens"] == fb["tokenizer.ggml.tokens"]
            and fa["tokenizer.ggml.token_type"] == fb["tokenizer.ggml.token_type"]}


def compare_outputs(a: Path, b: Path, threads: int, new_tokens: int) -> dict:
    """llama.cpp's logits at each prompt's next position, and greedy continuations, of both files."""
    from llama_cpp import Llama

    prompts = [P.format_prompt(P.build_instruction(q)) for q in QUESTIONS]
    prompts.append(P.with_evidence(prompts[0], *EVIDENCE))
    runs = []
    for path in (a, b):
        llm = Llama(model_path=str(path), n_ctx=1024, n_threads=threads, logits_all=True, verbose=False)
        outs = []
        for prompt in prompts:
            llm.reset()
            llm.eval(llm.tokenize(prompt.encode(), add_bos=False, special=True))
            first = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            greedy = []
            for _ in range(new_tokens):
                tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
                greedy.append(tok)
                if tok == llm.token_eos():
                    break
                llm.eval([tok])
            outs.append((first, greedy))
        llm.close()
        runs.append(outs)
    return {"prompts": len(prompts), "new_tokens": new_tokens,
            "greedy_identical": sum(ga == gb for (_, ga), (_, gb) in zip(*runs)),
            "max_abs_logit_diff": max(float(np.abs(fa - fb).max()) for (fa, _), (fb, _) in zip(*runs))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads for the output comparison")
    ap.add_argument("--new-tokens", type=int, default=24, help="greedy tokens per prompt")
    ap.add_argument("--json", help="write the results file here")
    args = ap.parse_args(argv)
    run = Run("bundled_build")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        fresh = bundled.build_gguf(Path(tmp) / "numpy.gguf", progress=False)
        numpy_s = time.perf_counter() - start
        start = time.perf_counter()
        reference = torch_build(Path(tmp) / "torch.gguf")
        torch_s = time.perf_counter() - start
        figures = {"numpy_build_s": round(numpy_s, 1), "torch_build_s": round(torch_s, 1),
                   **compare_tensors(fresh, reference),
                   **compare_outputs(fresh, reference, args.threads, args.new_tokens)}
    print(figures)
    if args.json:
        run.write(args.json, vars(args), figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
