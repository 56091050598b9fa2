"""Throughput of ``SelfRAGChain``: sequential streaming, ``batch`` and concurrent ``astream``.

Indexes a folder (default: the demo corpus, ``examples/corpus/``) into a real persistent Chroma store with
the offline MiniLM embeddings, loads a reflection LM (default: the bundled selfrag-smollm2-135m), and
answers the same questions sequentially (concurrency 1) and at each ``--concurrency`` level with
``batch`` and with ``astream`` tasks. Prints queries per second, p50/p95 latency, time to the first
streamed answer chunk (TTFT), peak resident memory, the QPS ratio against sequential use, and how
many answers equal the sequential ones.

    python benchmarks/throughput.py                      # bundled model over examples/corpus/, concurrency 1, 4, 8
    python benchmarks/throughput.py --queries 16 --concurrency 4,8,16 --model path/to/selfrag.gguf
    python benchmarks/throughput.py --threads 1 --json benchmarks/results/throughput.json

``--json PATH`` writes the figures with the machine, date, command line and versions
(``benchmarks/record.py``); the throughput tables of ``docs/benchmarks.md`` come from
``benchmarks/results/throughput*.json``.

Per-query latency inside ``batch`` is measured with a callback on each top-level chain run, so it
includes the time a query waits for the model.
"""

from __future__ import annotations

import argparse
import asyncio
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

from benchmarks.record import Run  # noqa: E402
from langchain_selfrag.config_flags import add_removed_flags  # noqa: E402

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
    from langchain_selfrag.evaluation.qa.metrics import percentile as pct

    return float(pct(values, q) or 0.0)


class Timings:
    """Latency and time to first answer chunk of each query (thread- and task-safe)."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.ttfts: list[float] = []
        self.answers: dict[int, str] = {}
        self._lock = threading.Lock()

    def add(self, index: int, latency: float, ttft: float | None, answer: str) -> None:
        with self._lock:
            self.latencies.append(latency)
            if ttft is not None:
                self.ttfts.append(ttft)
            self.answers[index] = answer


def stream_one(chain: Any, index: int, question: str, timings: Timings) -> None:
    started = time.perf_counter()
    first, answer = None, ""
    for chunk in chain.stream(question):
        if chunk.get("answer") and first is None:
            first = time.perf_counter() - started
        answer += chunk.get("answer") or ""
    timings.add(index, time.perf_counter() - started, first, answer)


async def astream_one(chain: Any, index: int, question: str, timings: Timings) -> None:
    started = time.perf_counter()
    first, answer = None, ""
    async for chunk in chain.astream(question):
        if chunk.get("answer") and first is None:
            first = time.perf_counter() - started
        answer += chunk.get("answer") or ""
    timings.add(index, time.perf_counter() - started, first, answer)


def measure(name: str, concurrency: int, run: Any, n: int) -> dict[str, Any]:
    timings = Timings()
    with PeakMemory() as memory:
        started = time.perf_counter()
        run(timings)
        wall = time.perf_counter() - started
    if len(timings.latencies) != n:
        raise RuntimeError(f"{name}: recorded {len(timings.latencies)} latencies for {n} queries")
    return {
        "mode": name,
        "concurrency": concurrency,
        "queries": n,
        "wall_s": wall,
        "qps": n / wall,
        "p50_s": percentile(timings.latencies, 50),
        "p95_s": percentile(timings.latencies, 95),
        "ttft_p50_s": percentile(timings.ttfts, 50) if timings.ttfts else None,
        "peak_rss_mb": memory.peak / 2**20,
        "answers": [timings.answers[i] for i in sorted(timings.answers)],
    }


def build_chain(args: argparse.Namespace, store_dir: Path) -> tuple[Any, Any, str]:
    """The chain over a fresh store of ``args.corpus``, the index statistics and the model's name."""
    from langchain_selfrag.bundled import default_model_path
    from langchain_selfrag.chain import SelfRAGChain
    from langchain_selfrag.retrieval import index_path, open_store

    stats = index_path(args.corpus, store_dir, progress=False)
    store = open_store(store_dir)
    model = args.model or default_model_path(progress=False)
    if model is None:
        raise SystemExit("no model: pass --model (the bundled model could not be built here)")
    lm = load_model(model, args.threads)
    name = Path(str(model)).name
    chain = SelfRAGChain.from_retriever(lm, store, k=args.k, mode=args.mode, max_new_tokens=args.max_new_tokens)
    return chain, stats, name


def load_model(name: str, threads: int | None) -> Any:
    """The reflection LM (or chat model) at a path or a known name (``model_path``), on ``threads`` threads."""
    from langchain_selfrag.graph.context import model_path
    from langchain_selfrag.lm import load_reflection_lm

    return load_reflection_lm(model_path(name), **({"n_threads": threads} if threads else {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF file or HF model dir (default: the bundled selfrag-smollm2-135m)")
    add_removed_flags(parser)
    parser.add_argument("--corpus", default=str(ROOT / "examples" / "corpus"),
                        help="folder or file to index (default: examples/corpus/)")
    parser.add_argument("--queries", type=int, default=8, help="questions per mode (default 8)")
    parser.add_argument("--concurrency", default="4,8", help="concurrency levels besides 1 (default 4,8)")
    parser.add_argument("--k", type=int, default=5, help="passages per retrieval (default 5)")
    parser.add_argument("--mode", default="always", choices=("adaptive", "always", "never"))
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens per segment (default 32)")
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: the backend's)")
    parser.add_argument("--json", help="also write the figures, machine, date and versions to this JSON file")
    args = parser.parse_args(argv)
    run = Run("throughput")
    try:
        levels = [int(c) for c in str(args.concurrency).split(",") if c.strip()]
    except ValueError:
        parser.error("--concurrency takes comma-separated integers, e.g. 4,8")
    if args.queries < 1 or any(c < 1 for c in levels):
        parser.error("--queries and every --concurrency level must be at least 1")

    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.queries)]
    with tempfile.TemporaryDirectory(prefix="selfrag-bench-") as tmp:
        t0 = time.perf_counter()
        chain, stats, model_name = build_chain(args, Path(tmp) / "store")
        setup_s = time.perf_counter() - t0
        chain.invoke(questions[0])  # warm-up: first-call allocations, embedding model

        def sequential(timings: Timings) -> None:
            for i, q in enumerate(questions):
                stream_one(chain, i, q, timings)

        def batch(c: int):
            def run(timings: Timings) -> None:
                recorder = LatencyRecorder()
                outs = chain.batch(questions, config={"callbacks": [recorder], "max_concurrency": c})
                for i, (lat, out) in enumerate(zip(recorder.latencies, outs, strict=True)):
                    timings.add(i, lat, None, out["answer"])
            return run

        def gather(c: int):
            def run(timings: Timings) -> None:
                async def go() -> None:
                    gate = asyncio.Semaphore(c)

                    async def one(i: int, q: str) -> None:
                        async with gate:
                            await astream_one(chain, i, q, timings)

                    await asyncio.gather(*(one(i, q) for i, q in enumerate(questions)))

                asyncio.run(go())
            return run

        rows = [measure("sequential stream", 1, sequential, len(questions))]
        for c in levels:
            rows.append(measure(f"batch (max_concurrency={c})", c, batch(c), len(questions)))
            rows.append(measure(f"async astream (concurrency={c})", c, gather(c), len(questions)))

    base = rows[0]
    print(
        f"SelfRAGChain throughput: {len(questions)} queries per mode, mode={args.mode}, k={args.k}, "
        f"max_new_tokens={args.max_new_tokens}, {os.cpu_count()} CPU(s)"
    )
    print(f"store: {stats['chunks']} chunks from {stats['files']} files; setup (index + model load) {setup_s:.1f} s\n")
    print(f"{'mode':<34} {'QPS':>7} {'p50 s':>7} {'p95 s':>7} {'TTFT p50':>9} {'wall s':>7} {'RSS MB':>7} "
          f"{'QPS x seq':>9} {'same answers':>12}")
    for row in rows:
        same = sum(a == b for a, b in zip(row["answers"], base["answers"]))
        row["qps_ratio_vs_sequential"] = row["qps"] / base["qps"]
        row["p95_ratio_vs_sequential"] = row["p95_s"] / base["p95_s"] if base["p95_s"] else None
        row["answers_same_as_sequential"] = same
        ttft = f"{row['ttft_p50_s']:.2f}" if row["ttft_p50_s"] is not None else "-"
        print(
            f"{row['mode']:<34} {row['qps']:>7.3f} {row['p50_s']:>7.2f} {row['p95_s']:>7.2f} {ttft:>9} "
            f"{row['wall_s']:>7.1f} {row['peak_rss_mb']:>7.0f} {row['qps_ratio_vs_sequential']:>9.2f} "
            f"{same:>5}/{len(questions):<6}"
        )
    for c in levels:
        best = max((r for r in rows if r["concurrency"] == c), key=lambda r: r["qps"])
        print(f"qps_ratio_concurrency_{c}: {best['qps_ratio_vs_sequential']:.2f}")
    if args.json:
        run.write(args.json, vars(args),
                  {"model": model_name, "index": stats.as_dict(), "setup_s": setup_s, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
