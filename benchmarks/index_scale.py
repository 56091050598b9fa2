"""What a corpus costs to index and to query, from 1k to 100k chunks: time, memory, disk, latency.

Builds corpora of about 1k, 10k and 100k chunks of 800 characters: **real** ones (the long
descriptions of the installed packages' metadata, the documentation files shipped inside them,
and the SQuAD and HotpotQA passages of ../shared/data, as .md/.rst/.txt/.html/.jsonl files) and
**synthetic** ones (markdown files of sentences drawn from the real corpus's words). Each size is
indexed by ``index_path`` in a fresh process into a fresh embedded Chroma store, which reports
chunks/s, peak resident memory and where the time went (reading and parsing files, chunking,
embedding, writing the store and its records); then another fresh process measures the store's
size on disk and the latency of a retrieval (query embedding + search, k=5, over 20 questions)
and of the whole chain (the bundled model, mode always, k=5, over 3 questions).

Embedding is ~90% of the work and costs the same per chunk at any corpus size. Sizes above
``--embed-up-to`` chunks (default 10,000) replay vectors instead of computing them, since the
embedding of 100k chunks would take hours on a small shared machine: each chunk gets a vector of
the largest embedded run of the same corpus, picked by a hash of its text, plus a little noise (so
the HNSW index sees real MiniLM geometry, not random points). Everything else (parsing, chunking,
records, Chroma's writes and index, memory, disk, query latency) is measured at that size, and
the report gives the indexing time as measured plus chunks x the per-chunk embedding time of the
embedded runs (``time_projected_s``); ``--embed-up-to 0`` embeds everything.

    nice -n 10 python benchmarks/index_scale.py --json benchmarks/results/index_scale.json --plot benchmarks/results/index_scale.png
"""

from __future__ import annotations

import argparse
import email
import hashlib
import itertools
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.record import Run  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
QUESTIONS = ["How do I install the package?", "What license is the library released under?",
             "Which function parses a date string?", "Who built the bridge over the river?",
             "How are requests retried after a timeout?", "What is the capital of Normandy?",
             "When was the university founded?", "How do I configure logging?",
             "What does the command line tool print?", "Which year did the war end?",
             "How is a sorted list kept in order?", "What is the default port of the server?",
             "How do I read a JSON file?", "Who wrote the first version?", "What is a tensor?",
             "How are passwords hashed?", "Which team won the championship?", "What does the cache store?",
             "How do I run the tests?", "What is the maximum size of a message?"]
SKIP_NAMES = re.compile(r"(LICEN[CS]E|COPYING|NOTICE|AUTHORS|RECORD|entry_points|top_level|requires)", re.I)


# -- corpora -----------------------------------------------------------------------------------------
def site_packages() -> Path:
    import langchain_core

    return Path(langchain_core.__file__).resolve().parents[1]


def write_real_corpus(folder: Path) -> None:
    """Every real document this machine has, one file each (order fixed)."""
    folder.mkdir(parents=True)
    packages = site_packages()
    for meta in sorted(packages.glob("*.dist-info/METADATA")):
        msg = email.message_from_string(meta.read_text(encoding="utf-8", errors="replace"))
        body = msg.get_payload()
        if not isinstance(body, str) or len(body) < 1000:
            continue
        kind = (msg.get("Description-Content-Type") or "").lower()
        suffix = ".md" if "markdown" in kind else ".txt" if "plain" in kind else ".rst"
        (folder / "metadata").mkdir(exist_ok=True)
        (folder / "metadata" / f"{meta.parent.name.removesuffix('.dist-info')}{suffix}").write_text(body)
    for path in sorted(packages.rglob("*")):
        if path.suffix.lower() in (".md", ".rst", ".txt", ".html") and path.is_file() and "dist-info" not in str(path) \
                and not SKIP_NAMES.search(path.name) and path.stat().st_size > 1000:
            target = folder / "shipped" / path.relative_to(packages)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    if (SHARED / "squad2_dev_half.json").is_file():  # one file per article
        (folder / "squad").mkdir()
        for n, article in enumerate(json.loads((SHARED / "squad2_dev_half.json").read_text())["data"]):
            rows = [{"title": article["title"].replace("_", " "), "text": p["context"]} for p in article["paragraphs"]]
            (folder / "squad" / f"{n:03d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if (SHARED / "hotpotqa_dev_200.jsonl").is_file():  # one file per question's passages
        (folder / "hotpotqa").mkdir()
        for n, line in enumerate((SHARED / "hotpotqa_dev_200.jsonl").read_text().splitlines()):
            rows = [{"title": c.get("title") or "", "text": c["text"]} for c in json.loads(line).get("ctxs", [])
                    if c.get("text")]
            (folder / "hotpotqa" / f"{n:03d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def chunk_counts(folder: Path) -> list[tuple[Path, int]]:
    """Each readable file of ``folder`` with the number of chunks ``selfrag index`` makes of it."""
    from langchain_selfrag.errors import NoDocumentsError
    from langchain_selfrag.retrieval import load_file, scan_folder, split_documents

    out = []
    for path in scan_folder(folder)[0]:
        try:
            out.append((path, len(split_documents(load_file(path, path.name)))))
        except NoDocumentsError:
            continue
    return out


def take(counts: list[tuple[Path, int]], target: int, folder: Path, source: Path) -> int:
    """Copy files of ``counts`` (spread evenly over them) into ``folder`` until ``target`` chunks."""
    total = sum(n for _, n in counts)
    step = max(1.0, total / target) if total > target else 1.0
    chosen, got, position = [], 0, 0.0
    while got < target and int(position) < len(counts):
        path, n = counts[int(position)]
        if n:
            chosen.append(path)
            got += n
        position += step if got < target else 0
        if step > 1.0 and int(position) >= len(counts):
            step, position = 1.0, 0.0  # spread pass done: fill up in order
            counts = [(p, n) for p, n in counts if p not in set(chosen)]
    for path in chosen:
        target_path = folder / path.relative_to(source)
        target_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target_path)
    return got


def write_synthetic_corpus(folder: Path, chunks: int, vocabulary: dict[str, int], seed: int = 0) -> None:
    """Markdown files of 20 chunks' worth each: a title, sections, paragraphs of words drawn as often
    as the real corpus uses them (so a chunk has about as many tokens as a real one)."""
    rng = random.Random(seed)
    pool = list(vocabulary)
    cumulative = list(itertools.accumulate(vocabulary.values()))  # what choices(weights=) computes on every call

    def draw(k: int) -> list[str]:
        return rng.choices(pool, cum_weights=cumulative, k=k)

    folder.mkdir(parents=True)
    per_file = 20
    for n in range((chunks + per_file - 1) // per_file):
        parts = [f"# {' '.join(draw(3)).title()}\n"]
        size = 0
        while size < per_file * 700:
            if rng.random() < 0.2:
                parts.append(f"\n## {' '.join(draw(2)).title()}\n")
            sentences = [" ".join(draw(rng.randint(8, 20))).capitalize() + "."
                         for _ in range(rng.randint(3, 6))]
            parts.append("\n" + " ".join(sentences) + "\n")
            size += len(parts[-1])
        sub = folder / f"part{n // 500:03d}"
        sub.mkdir(exist_ok=True)
        (sub / f"doc{n:05d}.md").write_text("".join(parts))


# -- the measuring child processes ---------------------------------------------------------------------
class TimedEmbeddings:
    """The default embeddings, timed; with ``replay`` a corpus's stored vectors stand in for documents."""

    def __init__(self, replay: np.ndarray | None, keep: list[np.ndarray] | None) -> None:
        from langchain_selfrag.retrieval import default_embeddings

        self.inner = default_embeddings()
        self.replay, self.keep, self.seconds, self.count = replay, keep, 0.0, 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        start = time.perf_counter()
        if self.replay is None:
            vectors = np.asarray(self.inner.embed_documents(texts), dtype=np.float32)
            if self.keep is not None:
                self.keep.append(vectors)
        else:
            rows = []
            for text in texts:
                digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
                noise = np.random.default_rng(digest).standard_normal(self.replay.shape[1]).astype(np.float32)
                row = self.replay[digest % len(self.replay)] + 0.05 * noise
                rows.append(row / np.linalg.norm(row))
            vectors = np.stack(rows)
        self.seconds += time.perf_counter() - start
        self.count += len(texts)
        return vectors.tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def child_index(corpus: Path, store: Path, replay: Path | None, keep: Path | None) -> dict[str, Any]:
    from langchain_core.embeddings import Embeddings

    import langchain_selfrag.retrieval.indexing as indexing

    timers = {"load": 0.0, "split": 0.0}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                timers[name] += time.perf_counter() - start
        return wrapper

    indexing.load_file = timed("load", indexing.load_file)
    indexing.split_documents = timed("split", indexing.split_documents)
    kept: list[np.ndarray] | None = [] if keep else None
    emb = TimedEmbeddings(np.load(replay) if replay else None, kept)
    Embeddings.register(TimedEmbeddings)
    start = time.perf_counter()
    report = indexing.index_path(corpus, store, embeddings=emb, progress=False)  # type: ignore[arg-type]
    total = time.perf_counter() - start
    if keep and kept:
        np.save(keep, np.concatenate(kept))
    return {"files": report.files, "chunks": report.chunks, "stored": report.total, "skipped": len(report.skipped),
            "index_s": round(total, 2), "load_s": round(timers["load"], 2), "split_s": round(timers["split"], 2),
            "embed_s": round(emb.seconds, 2), "embedded": emb.count, "replayed": replay is not None,
            "store_s": round(total - timers["load"] - timers["split"] - emb.seconds, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def child_query(store: Path, chain_questions: int) -> dict[str, Any]:
    from langchain_selfrag.retrieval import default_embeddings, open_store

    vs = open_store(store)
    emb = default_embeddings()
    vs.similarity_search(QUESTIONS[0], k=5)
    retrieval, search = [], []
    for question in QUESTIONS:
        start = time.perf_counter()
        vector = emb.embed_query(question)
        middle = time.perf_counter()
        vs.similarity_search_by_vector(vector, k=5)
        search.append(time.perf_counter() - middle)
        retrieval.append(time.perf_counter() - start)
    out = {"retrieval_ms_median": round(1000 * statistics.median(retrieval), 2),
           "retrieval_ms_p95": round(1000 * sorted(retrieval)[int(0.95 * (len(retrieval) - 1))], 2),
           "search_ms_median": round(1000 * statistics.median(search), 2)}
    if chain_questions:
        from langchain_selfrag.bundled import default_model_path
        from langchain_selfrag.chain import SelfRAGChain
        from langchain_selfrag.lm import load_reflection_lm

        model = default_model_path(progress=False)
        threads = int(os.environ.get("SELFRAG_THREADS", "0") or 0)
        lm = load_reflection_lm(model, **({"n_threads": threads} if threads else {}))
        chain = SelfRAGChain.from_retriever(lm, vs, k=5, mode="always")
        chain.invoke(QUESTIONS[0])
        times = []
        for question in QUESTIONS[1 : 1 + chain_questions]:
            start = time.perf_counter()
            chain.invoke(question)
            times.append(time.perf_counter() - start)
        out["chain_s_median"] = round(statistics.median(times), 2)
        out["model"] = Path(str(model)).name
    return out


def in_child(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"child {args[:2]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def disk_mb(folder: Path) -> float:
    return round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20, 1)


# -- plot and main ----------------------------------------------------------------------------------------
def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("time_projected_s", "indexing time (s)"), ("peak_rss_mb", "peak memory while indexing (MB)"),
              ("disk_mb", "store on disk (MB)"), ("retrieval_ms_median", "retrieval latency, median (ms)")]
    fig, axes = plt.subplots(1, 4, figsize=(17, 4))
    for ax, (key, label) in zip(axes, panels, strict=True):
        for corpus, marker in (("real", "o"), ("synthetic", "s")):
            part = [r for r in rows if r["corpus"] == corpus]
            if not part:
                continue
            xs, ys = [r["chunks"] for r in part], [r[key] for r in part]
            ax.plot(xs, ys, marker=marker, label=corpus)
            for r in part:
                if r["replayed"]:
                    ax.annotate("replayed vectors", (r["chunks"], r[key]), fontsize=7, xytext=(-60, 8),
                                textcoords="offset points")
        ax.set_xscale("log")
        if key == "retrieval_ms_median":
            ax.set_ylim(bottom=0)  # flat is the point: show it against zero
        else:
            ax.set_yscale("log")
        ax.set_xlabel("chunks in the store")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("selfrag index: cost against corpus size (800-character chunks, MiniLM in ONNX Runtime, Chroma)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child-index":
        replay = Path(argv[3]) if argv[3] != "-" else None
        keep = Path(argv[4]) if argv[4] != "-" else None
        print(json.dumps(child_index(Path(argv[1]), Path(argv[2]), replay, keep)))
        return 0
    if argv and argv[0] == "--child-query":
        print(json.dumps(child_query(Path(argv[1]), int(argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--corpora", nargs="+", default=["real", "synthetic"], choices=["real", "synthetic"])
    parser.add_argument("--embed-up-to", type=int, default=10000,
                        help="embed for real up to this many chunks; replay vectors above (0: embed everything)")
    parser.add_argument("--chain-questions", type=int, default=3, help="questions through the whole chain (0: none)")
    parser.add_argument("--workdir", help="keep corpora and stores here (default: a temporary folder)")
    parser.add_argument("--json", help="write the results file here")
    parser.add_argument("--plot", help="write the plot (PNG) here")
    parser.add_argument("--replot", metavar="JSON", help="only draw --plot from a results file this script wrote")
    args = parser.parse_args(argv)
    if args.replot:
        plot(json.loads(Path(args.replot).read_text())["figures"]["runs"], Path(args.plot))
        return 0
    run = Run("index_scale")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="index-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    real_all = work / "real-all"
    if not real_all.exists():
        write_real_corpus(real_all)
    counts = chunk_counts(real_all)
    real_total = sum(n for _, n in counts)
    print(f"real corpus: {len(counts)} files, {real_total} chunks")
    vocabulary: dict[str, int] = {}
    for path, _ in counts:
        if path.suffix in (".md", ".rst", ".txt", ".jsonl"):
            for word in re.findall(r"[A-Za-z]{1,14}", path.read_text(errors="replace")):
                vocabulary[word.lower()] = vocabulary.get(word.lower(), 0) + 1
    rows: list[dict[str, Any]] = []
    for corpus in args.corpora:
        vectors: Path | None = None
        embed_rate: float | None = None
        for size in sorted(args.sizes):
            folder = work / f"{corpus}-{size}"
            if corpus == "real" and size > real_total:
                print(f"real corpus: {real_total} chunks on this machine, fewer than {size}: skipped")
                continue
            if not folder.exists():
                if corpus == "real":
                    folder.mkdir()
                    take(counts, size, folder, real_all)
                else:
                    write_synthetic_corpus(folder, size, vocabulary)
            store = work / f"{corpus}-{size}-store"
            shutil.rmtree(store, ignore_errors=True)
            replay = args.embed_up_to and size > args.embed_up_to
            if replay and vectors is None:
                raise SystemExit(f"{corpus} {size}: no embedded run to replay vectors from (raise --embed-up-to)")
            keep = work / f"{corpus}-{size}-vectors.npy"
            print(f"{corpus} {size}: indexing{' (replayed vectors)' if replay else ''} ...", flush=True)
            row: dict[str, Any] = {"corpus": corpus, "target": size,
                                   **in_child("--child-index", str(folder), str(store),
                                              str(vectors) if replay else "-", "-" if replay else str(keep))}
            if not replay:
                vectors = keep
                embed_rate = row["embed_s"] / max(row["embedded"], 1)
            row["embed_s_per_chunk"] = round(embed_rate, 5) if embed_rate else None
            row["time_projected_s"] = round(row["index_s"] - row["embed_s"] + row["chunks"] * embed_rate, 1) \
                if replay and embed_rate else row["index_s"]
            row["chunks_per_s"] = round(row["chunks"] / row["time_projected_s"], 1)
            row["disk_mb"] = disk_mb(store)
            row.update(in_child("--child-query", str(store), str(args.chain_questions)))
            print(json.dumps(row), flush=True)
            rows.append(row)
    figures: dict[str, Any] = {"real_corpus_chunks": real_total, "runs": rows}
    for corpus in args.corpora:
        part = {r["target"]: r for r in rows if r["corpus"] == corpus}
        if part:
            small, large = part[min(part)], part[max(part)]
            figures[f"{corpus}_retrieval_ratio_largest_vs_smallest"] = round(
                large["retrieval_ms_median"] / small["retrieval_ms_median"], 2)
    settings = {"sizes": args.sizes, "corpora": args.corpora, "embed_up_to": args.embed_up_to,
                "chain_questions": args.chain_questions, "threads": os.environ.get("SELFRAG_THREADS"),
                "shared_data": SHARED.is_dir()}
    if args.json:
        run.write(args.json, settings, figures)
    if args.plot:
        plot(rows, Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
