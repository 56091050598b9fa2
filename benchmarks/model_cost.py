"""What a reflection model costs on this machine's CPU, several models in one run: its GGUF build, the
answer to ``make demo``'s question, its peak memory, and the throughput benchmark.

Each ``--model`` is a bundled model's name (``selfrag-smollm2-135m``, ``selfrag-qwen2.5-coder-0.5b``) or
an adapter folder (a candidate, built the same way). For each one:

* ``build_s``, ``build_peak_rss_mb``, ``gguf_mb``: :func:`langchain_selfrag.bundled.build_gguf` into an empty
  cache folder, as a user's first run does (the base's join from its part packages not included);
* ``demo_s``, ``demo_peak_rss_mb``, ``demo_answer``: ``selfrag ask QUESTION`` in a fresh process over the
  demo corpus (``examples/corpus``, indexed once into a temporary Chroma store), wall time and the
  child's peak resident memory, model load included;
* ``throughput``: ``benchmarks/throughput.py`` on the same corpus (sequential and ``--concurrency``);
* with ``--breakdown``, ``demo_model_s``: the same question asked once more in this process, the model loaded
  first, and the seconds the model computed for it (``model``), with ``ask_s``, the whole answer;
* with ``--read-ahead`` (a model that keeps its passage reads, :mod:`langchain_selfrag.passage_reads`):
  ``read_ahead_s``, ``read_ahead_passages``, ``read_ahead_peak_rss_mb`` and ``prefix_states_mb`` of
  ``selfrag index --read-ahead`` over the demo store, then ``demo_warm_s`` (and ``demo_model_warm_s``) asked
  with every passage read. The asks above always start with no passage read (an empty ``prefix-states``).

``benchmarks/results/model_cost_reader_judge.json`` holds rows of the three-model opt-in (a reader
writing the answers, a relevance judge; ``reader``, ``judge`` and their ``demo_model_s`` roles), retired in
0.1: its code is in git history (b4c0590).

    python benchmarks/model_cost.py --model selfrag-smollm2-135m --model selfrag-qwen2.5-coder-0.5b \\
        --json benchmarks/results/model_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.record import Run  # noqa: E402
from langchain_selfrag.config_flags import add_removed_flags  # noqa: E402

QUESTION = "How does Self-RAG decide whether to retrieve passages?"
CORPUS = ROOT / "examples" / "corpus"


def selfrag_command() -> list[str]:
    return [sys.executable, "-m", "langchain_selfrag.cli"]


def timed_child(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """``(seconds, peak resident MB, stdout)`` of one child process (its own peak, from ``wait4``)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        out.seek(0)
        text = out.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} … failed (exit {os.waitstatus_to_exitcode(status)})")
    return seconds, usage.ru_maxrss / 1024, text


def _build_gguf(out: str, folder: str, outtype: str | None) -> str:
    from langchain_selfrag import bundled

    return str(bundled.build_gguf(Path(out), folder=Path(folder), outtype=outtype, progress=False))


def build(model: str, cache: Path, outtype: str | None = None) -> tuple[Path, float, float]:
    """The model's GGUF built into ``cache`` (``outtype``: the merge's, default the bundled model's own), the
    seconds it took and the build's peak resident MB. Built in a process of its own: a child forked from a
    process that held the merge's arrays would report that process's size as its own peak (Linux keeps
    ``ru_maxrss`` across fork); its peak is the largest of this process's children's so far (the first build
    of a run, before any other child, is its own)."""
    import multiprocessing
    import resource

    from langchain_selfrag import bundled

    folder = bundled.bundle_dir(model) if model in bundled.BUNDLED else Path(model)
    out = bundled.cached_gguf_path(folder, outtype=outtype)
    if out is None:
        raise SystemExit(f"{model}: no adapter or no base GGUF ({bundled.BUNDLED[model].install_hint if model in bundled.BUNDLED else folder})")
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        path = pool.apply(_build_gguf, (str(cache / out.name), str(folder), outtype))
        pool.close()
        pool.join()
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return Path(path), time.perf_counter() - start, peak


def model_seconds(gguf: Path, store: Path, question: str, k: int | None = None) -> dict[str, float]:
    """Seconds the model computes to answer ``question`` over ``store`` in this process (loading not
    counted), and ``ask_s``, the whole answer (``k`` passages; default the chain's)."""
    from langchain_selfrag import SelfRAGChain, SelfRAGConfig
    from langchain_selfrag.graph.context import default_lm
    from langchain_selfrag.lm.scheduler import unwrap
    from langchain_selfrag.retrieval import open_store

    lm = default_lm(str(gguf))
    inner = unwrap(lm)
    seconds = {"model": 0.0}

    def timed(method: str) -> None:
        call = getattr(inner, method)

        def wrapper(*a: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return call(*a, **kw)
            finally:
                seconds["model"] += time.perf_counter() - start

        setattr(inner, method, wrapper)

    timed("generate")
    timed("candidate_probs")
    start = time.perf_counter()
    SelfRAGChain(lm, open_store(store), SelfRAGConfig(k=k) if k else None).invoke(question)
    ask_s = time.perf_counter() - start
    inner.close()  # default_lm loads a closed model again
    return {**{k: round(v, 2) for k, v in seconds.items()}, "ask_s": round(ask_s, 2)}


def forget_passage_reads(env: dict[str, str]) -> Path:
    """Empty the cache folder's ``prefix-states`` (no passage read yet); the folder."""
    folder = Path(env["SELFRAG_CACHE_DIR"]) / "prefix-states"
    shutil.rmtree(folder, ignore_errors=True)
    return folder


def folder_mb(folder: Path) -> float:
    return round(sum(f.stat().st_size for f in folder.glob("*") if f.is_file()) / 1e6, 1) if folder.is_dir() else 0.0


def measure(model: str, built: tuple[Path, float], store: Path, args, env: dict[str, str]) -> dict:
    gguf, build_s, build_rss = built
    k = ["--k", str(args.k)] if args.k else []
    ask = [*selfrag_command(), "ask", args.question, "--store", str(store), "--model", str(gguf), *k, "--json"]
    forget_passage_reads(env)
    seconds, rss, text = timed_child(ask, env)
    answer = json.loads(text)
    row = {"model": model, "gguf": gguf.name,
           "build_s": round(build_s, 1), "build_peak_rss_mb": round(build_rss),
           "gguf_mb": round(gguf.stat().st_size / 1e6, 1),
           "demo_s": round(seconds, 2), "demo_peak_rss_mb": round(rss), "demo_answer": answer.get("answer"),
           "demo_abstained": answer.get("abstained"), "demo_citations": answer.get("citations")}
    if args.breakdown:
        forget_passage_reads(env)
        row["demo_model_s"] = model_seconds(gguf, store, args.question, args.k)
    if args.read_ahead:
        states = forget_passage_reads(env)
        _, rss, text = timed_child([*selfrag_command(), "index", args.corpus, "--store", str(store), "--read-ahead",
                                    "--model", str(gguf), "--quiet"], env)
        said = re.search(r"read (\d+) passage\(s\) ahead in (\d+) s", text)
        if said is None:
            raise SystemExit(f"selfrag index --read-ahead said no reading: {text[-300:]!r}")
        row.update(read_ahead_passages=int(said[1]), read_ahead_s=int(said[2]), read_ahead_peak_rss_mb=round(rss),
                   prefix_states_mb=folder_mb(states))
        seconds, rss, text = timed_child(ask, env)
        warm = json.loads(text)
        row.update(demo_warm_s=round(seconds, 2), demo_warm_peak_rss_mb=round(rss), demo_warm_answer=warm.get("answer"),
                   demo_warm_citations=warm.get("citations"))
        if args.breakdown:
            row["demo_model_warm_s"] = model_seconds(gguf, store, args.question, args.k)
    if args.throughput_queries:
        forget_passage_reads(env)  # its asks read passages as they come
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp) / "t.json"
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--model", str(gguf),
                            "--queries", str(args.throughput_queries), "--concurrency", args.concurrency,
                            "--json", str(result)], check=True, env=env, stdout=subprocess.DEVNULL)
            row["throughput"] = json.loads(result.read_text())["figures"]
    print(json.dumps({k: v for k, v in row.items() if k != "throughput"}), flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="a bundled model's name or an adapter folder (repeat)")
    add_removed_flags(ap)
    ap.add_argument("--outtype", help="the GGUF merge's type (default the bundled model's own; keep: the base's own "
                    "tensors, for a chatml-questions adapter)")
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--k", type=int, help="passages per retrieval for the question (default the chain's, 5)")
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--throughput-queries", type=int, default=8, help="0: skip the throughput benchmark")
    ap.add_argument("--concurrency", default="4")
    ap.add_argument("--breakdown", action="store_true",
                    help="also ask the question in this process and time each model (demo_model_s)")
    ap.add_argument("--read-ahead", action="store_true",
                    help="also read the demo store's passages ahead (selfrag index --read-ahead) and ask again")
    ap.add_argument("--json", help="write the results file here (benchmarks/record.py)")
    args = ap.parse_args(argv)
    run = Run("model_cost")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SELFRAG_CACHE_DIR": str(Path(tmp) / "cache")}
        store = Path(tmp) / "store"
        subprocess.run([*selfrag_command(), "index", args.corpus, "--store", str(store)], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.environ["SELFRAG_CACHE_DIR"] = env["SELFRAG_CACHE_DIR"]
        rows = []
        for model in args.model:
            built = build(model, Path(tmp) / "cache", args.outtype)
            rows.append(measure(model, built, store, args, env))
    if args.json:
        run.write(args.json, vars(args), {"models": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
