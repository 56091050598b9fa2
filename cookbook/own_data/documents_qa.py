"""A folder of your documents -> Self-RAG QA JSONL (``{id, question, answers, ctxs}``) to train on.

The documents are read and chunked exactly as ``selfrag index`` reads them (markdown, reStructuredText,
HTML, PDF, Word, plain text, JSONL of ``{text, title}``; 800-character chunks). Questions are your own
(``--questions``: JSONL rows ``{question, answers}``, the format ``selfrag calibrate --questions``
takes; ``source`` and ``kind`` are read too) or generated from the documents' stated facts by the
generator ``selfrag calibrate`` uses (:func:`langchain_selfrag.calibrate.questions.questions_from_documents`).
Each question's ``ctxs`` are the ``--k`` chunks BM25 ranks first over all chunks, with the chunk that
states the answer put in when BM25 missed it, so each row holds its evidence and its hard negatives.
``training.generator_data --selfrag-qa`` and ``training.critic_data --selfrag-qa`` read the file.

    python -m cookbook.own_data.documents_qa cookbook/own_data/sample/docs --out runs/mine/qa.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from langchain_selfrag.calibrate.questions import load_questions, questions_from_documents
from langchain_selfrag.retrieval.loading import iter_files, load_file, split_documents
from training.core.jsonl import read_jsonl, write_jsonl
from training.core.text import contains_answer
from training.selfrag.bm25 import BM25Retriever
from training.selfrag.qa_data import Passage


def chunk_folder(folder: Path) -> list[Passage]:
    """Every supported file under ``folder``, loaded and chunked as ``selfrag index`` does."""
    passages = []
    for path in iter_files(folder):
        source = str(path.relative_to(folder)) if folder.is_dir() else path.name
        for c in split_documents(load_file(path, source=source)):
            if c.page_content.strip():
                passages.append(Passage(f"{source}#{c.metadata['chunk']}", str(c.metadata.get("title") or path.stem),
                                        c.page_content, article=source))
    return passages


def qa_rows(passages: Sequence[Passage], questions, k: int = 5) -> list[dict]:
    """One Self-RAG QA row per answerable question whose answer some chunk states."""
    retriever = BM25Retriever(passages)
    rows = []
    for n, q in enumerate(questions):
        if q.kind != "answerable":
            continue
        ctxs = retriever(q.question, k)
        stating = [p for p in passages
                   if (q.source is None or p.article == q.source) and contains_answer(p.text, q.answers)]
        if not stating:
            continue
        if not any(contains_answer(p.text, q.answers) for p in ctxs):
            ctxs = [*ctxs[: k - 1], stating[0]]
        rows.append({"id": f"q{n}", "question": q.question, "answers": list(q.answers),
                     "ctxs": [{"title": p.title, "text": p.text} for p in ctxs]})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cookbook.own_data.documents_qa", description=__doc__.split("\n\n")[0])
    ap.add_argument("documents", type=Path, help="a folder (or one file) of documents")
    ap.add_argument("--out", type=Path, required=True, help="Self-RAG QA JSONL to write")
    ap.add_argument("--questions", type=Path, help="your questions: JSONL {question, answers} (default: generated)")
    ap.add_argument("--n", type=int, default=400, help="generated answerable questions at most")
    ap.add_argument("--k", type=int, default=5, help="passages per question (the answer's chunk among them)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    passages = chunk_folder(args.documents)
    if not passages:
        ap.error(f"no readable text under {args.documents}")
    if args.questions:
        try:
            questions = load_questions(read_jsonl(args.questions))
        except ValueError as exc:
            ap.error(f"{args.questions}: {exc}")
    else:
        by_source: dict[str, list[str]] = {}
        titles: dict[str, str] = {}
        for p in passages:
            by_source.setdefault(p.article, []).append(p.text)
            titles.setdefault(p.article, p.title)
        questions = questions_from_documents(by_source, random.Random(args.seed), titles=titles, answerable=args.n,
                                             near_miss=0, off_topic=0)
    rows = qa_rows(passages, questions, args.k)
    if not rows:
        ap.error("no question has its answer stated in the documents: give --questions")
    n = write_jsonl(args.out, rows)
    summary = {"documents": len({p.article for p in passages}), "chunks": len(passages), "questions": n}
    print(json.dumps(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
