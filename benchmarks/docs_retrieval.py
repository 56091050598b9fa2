"""Recall of the answer's chunk on the trust suite's documentation: which index finds it among the top K?

For each answerable question of the suite's ``docs`` kind (one part: ``--split``), the rank of the first
*gold chunk* (a chunk of the question's document that holds a gold answer:
:func:`benchmarks.trust_loss.holds_answer`, the loss table's definition) in the ranking of each index:

* ``dense``: MiniLM (the store's embeddings) over the text that is embedded, cosine similarity, as the
  embedded Chroma store ranks it;
* ``lexical``: the store's lexical index (:class:`~langchain_selfrag.retrieval.lexical.LexicalIndex`:
  Okapi BM25 of SQLite FTS5, porter stemming) over the same text;
* ``fused``: the two by reciprocal rank fusion (:func:`~langchain_selfrag.retrieval.fusion.reciprocal_rank_fusion`).

Each over the chunks ``selfrag index`` makes (``load_file`` and ``split_documents``) at each chunk size
of ``--chunk-sizes``, with the text embedded either as the chunk alone (``chunk``) or headed by its
document's title and section path (``headed``: ``Title > Section > Subsection`` on the first line), and
the mix that ships (the chunk embedded, the headed chunk in the lexical index). Beside them, the store
itself as ``selfrag index`` makes it, searched through ``open_store``: by its embeddings alone
(``store/dense``, as before the lexical index) and as shipped (``store/hybrid``).
Printed: recall at 1, 5 (the chain's default k), 10 and 20 and the mean reciprocal rank, overall and per
question type. Choices are made on ``validation``; ``test`` is only measured::

    python benchmarks/docs_retrieval.py --split validation --json benchmarks/results/docs_retrieval_validation.json
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from langchain_core.documents import Document

from benchmarks.record import Run
from benchmarks.trust_loss import gold_ranks, holds_answer, question_type
from benchmarks.trust_suite import _kind_questions
from langchain_selfrag.retrieval.fusion import reciprocal_rank_fusion
from langchain_selfrag.retrieval import index_path, open_store
from langchain_selfrag.retrieval.lexical import LexicalIndex, headed_text
from langchain_selfrag.retrieval.loading import load_file, split_documents

CUTS = (1, 5, 10, 20)
TEXTS = ("chunk", "headed")
INDEXES = ("dense", "lexical", "fused")
#: Fused rankings of the chunk as embedded (``chunk``) with the lexical index of the headed chunk.
MIXED = "fused/dense-chunk+lexical-headed"
#: The store as ``selfrag index`` makes it and ``open_store`` searches it: embeddings alone, and as shipped.
SHIPPED = ("store/dense", "store/hybrid")


def chunks_of(docs: Mapping[str, str], chunk_size: int, chunk_overlap: int) -> list[Document]:
    """The chunks ``selfrag index`` makes of the documents (each file loaded and split as it loads them)."""
    with tempfile.TemporaryDirectory() as tmp:
        loaded: list[Document] = []
        for name, text in docs.items():
            path = Path(tmp) / name
            path.write_text(text, encoding="utf-8")
            loaded += load_file(path, name)
    return split_documents(loaded, chunk_size=chunk_size, chunk_overlap=chunk_overlap)


def lexical_rankings(chunks: Sequence[Document], form: str, queries: Sequence[str], depth: int) -> list[list[int]]:
    """For each query, the indices of the top ``depth`` chunks by the store's lexical index (BM25), the
    chunks indexed as :func:`~langchain_selfrag.retrieval.lexical.headed_text` (``headed``) or bare (``chunk``)."""
    index = LexicalIndex(":memory:", "bench")
    index.add([str(i) for i in range(len(chunks))],
              [c if form == "headed" else Document(c.page_content) for c in chunks])
    return [[int(d.id) for d in index.search(q, depth)] for q in queries]


def shipped_rankings(docs: Mapping[str, str], queries: Sequence[str], chunk_size: int, chunk_overlap: int,
                     depth: int) -> dict[str, tuple[list[Document], list[list[Document]]]]:
    """What ``selfrag index`` and ``open_store`` give: the store's chunks and, per query, its top ``depth``,
    searched by embeddings alone (``store/dense``) and as shipped, fused with the lexical index (``store/hybrid``)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "docs"
        src.mkdir()
        for name, text in docs.items():
            (src / name).write_text(text, encoding="utf-8")
        index_path(src, Path(tmp) / "store", chunk_size=chunk_size, chunk_overlap=chunk_overlap, progress=False)
        out = {}
        for key, lexical in (("store/dense", False), ("store/hybrid", True)):
            store = open_store(Path(tmp) / "store", lexical=lexical)
            out[key] = [store.similarity_search(q, k=depth) for q in queries]
            if lexical:
                store.lexical.close()
        return out


def dense_rankings(texts: Sequence[str], queries: Sequence[str], depth: int, embeddings: Any) -> list[list[int]]:
    """For each query, the indices of the top ``depth`` texts by cosine similarity of their embeddings."""
    docs = np.asarray(embeddings.embed_documents(list(texts)), dtype=np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    out = []
    for q in queries:
        v = np.asarray(embeddings.embed_query(q), dtype=np.float32)
        scores = docs @ (v / np.linalg.norm(v))
        out.append([int(i) for i in np.argsort(-scores, kind="stable")[:depth]])
    return out


def fused_rankings(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]], depth: int) -> list[list[int]]:
    """RRF of two rankings per query (the package's fusion, over stand-in documents whose id is the index)."""
    def docs(r: Sequence[int]) -> list[Document]:
        return [Document("", id=str(i)) for i in r]
    return [[int(d.id) for d in reciprocal_rank_fusion([docs(x), docs(y)], key=lambda d: d.id)][:depth]
            for x, y in zip(a, b)]


def first_gold_rank(hits: Sequence[Document], q: Mapping[str, Any]) -> int | None:
    """1-based rank of the first gold chunk among ``hits`` (the loss table's :func:`gold_ranks`), None when none is."""
    ranks = gold_ranks([(str(d.metadata.get("source")), d.page_content) for d in hits], q)
    return ranks[0] if ranks else None


def recall(ranks: Sequence[int | None]) -> dict[str, float]:
    """Recall at each cut and the mean reciprocal rank (0 for a question whose gold chunk is not found)."""
    n = max(len(ranks), 1)
    out = {f"r@{c}": sum(r is not None and r <= c for r in ranks) / n for c in CUTS}
    out["mrr"] = sum(1 / r for r in ranks if r is not None) / n
    return out


def measure(docs: Mapping[str, str], questions: Sequence[Mapping[str, Any]], chunk_size: int, chunk_overlap: int,
            embeddings: Any) -> dict[str, Any]:
    """Ranks of the gold chunk per index and embedded text, at one chunk size."""
    chunks = chunks_of(docs, chunk_size, chunk_overlap)
    texts = [q["question"] for q in questions]
    depth = max(CUTS)
    out: dict[str, Any] = {"chunks": len(chunks),
                           "with_gold_chunk": sum(any(holds_answer(str(c.metadata.get("source")), c.page_content, q)
                                                      for c in chunks) for q in questions)}
    types = sorted({question_type(q) for q in questions})

    def scored(hits: Sequence[Sequence[Document]]) -> dict[str, Any]:
        ranks = [first_gold_rank(h[:depth], q) for h, q in zip(hits, questions)]
        return {"all": recall(ranks), "ranks": ranks,
                **{t: recall([r for r, q in zip(ranks, questions) if question_type(q) == t]) for t in types}}

    found: dict[str, list[list[int]]] = {}
    for form in TEXTS:
        embedded = [headed_text(c) if form == "headed" else c.page_content for c in chunks]
        found[f"dense/{form}"] = dense_rankings(embedded, texts, depth * 3, embeddings)
        found[f"lexical/{form}"] = lexical_rankings(chunks, form, texts, depth * 3)
        found[f"fused/{form}"] = fused_rankings(found[f"dense/{form}"], found[f"lexical/{form}"], depth)
    found[MIXED] = fused_rankings(found["dense/chunk"], found["lexical/headed"], depth)
    out.update({key: scored([[chunks[i] for i in r] for r in ranking]) for key, ranking in found.items()})
    out.update({key: scored(hits) for key, hits in shipped_rankings(docs, texts, chunk_size, chunk_overlap, depth).items()})
    return out


def format_rows(size: int, figures: Mapping[str, Any]) -> list[str]:
    lines = []
    for key in [f"{i}/{f}" for f in TEXTS for i in INDEXES] + [MIXED, *SHIPPED]:
        a = figures[key]["all"]
        cells = " ".join(f"{a[f'r@{c}']:6.3f}" for c in CUTS)
        types = " ".join(f"{t[:4]} {figures[key][t]['r@5']:.2f}" for t in sorted(figures[key]) if t not in ("all", "ranks"))
        lines.append(f"{size:5d} {key:32s} {cells} {a['mrr']:6.3f}   r@5 by type: {types}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=("validation", "test"), default="validation")
    ap.add_argument("--chunk-sizes", default="400,800,1200", help="comma-separated chunk sizes (selfrag index's is 800)")
    ap.add_argument("--overlap", type=float, default=0.125, help="chunk overlap as a share of the chunk size (800: 100)")
    ap.add_argument("--json", help="also write the figures with machine and settings here (benchmarks/record.py)")
    args = ap.parse_args(argv)
    from langchain_selfrag.retrieval.embeddings import default_embeddings

    run = Run("docs_retrieval")
    docs, questions = _kind_questions("docs", args.split, None, 0, 0)
    questions = [q for q in questions if q["part"] == "answerable"]
    embeddings = default_embeddings()
    figures: dict[str, Any] = {"split": args.split, "questions": len(questions), "documents": len(docs), "sizes": {}}
    print(f"docs/{args.split}: {len(questions)} answerable questions over {len(docs)} documents")
    print(f"{'size':>5} {'index/text':32s} " + " ".join(f"{'r@' + str(c):>6}" for c in CUTS) + f" {'mrr':>6}")
    for size in (int(s) for s in args.chunk_sizes.split(",") if s):
        measured = measure(docs, questions, size, int(size * args.overlap), embeddings)
        figures["sizes"][str(size)] = measured
        print(f"{size:5d} chunks {measured['chunks']}, questions with a gold chunk {measured['with_gold_chunk']}")
        print("\n".join(format_rows(size, measured)), flush=True)
    if args.json:
        run.write(args.json, vars(args), figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
