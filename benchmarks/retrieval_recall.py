"""Gold-passage recall of the evaluation retrievers on SQuAD: BM25, MiniLM (Chroma) and the two fused.

For every answerable question of the bundled model's training articles (where the retriever was
chosen) and of its held-out articles, whether a gold passage is among the top 1 and top 5 of:
``bm25`` (``training.selfrag.bm25``), ``dense`` (the Chroma + MiniLM store of
``training/selfrag/retrievers.py``, kept in the model cache) and ``hybrid`` (both through
:class:`langchain_selfrag.retrieval.fusion.FusionRetriever`, the evaluation's ``--retrieval hybrid``). All three are the
LangChain retrievers the evaluation uses, called as the chain calls them.

    python benchmarks/retrieval_recall.py [--data ../shared/data] [--split PATH] [--json PATH]

``--json PATH`` writes the hit counts with the machine, date, command line and versions
(``benchmarks/record.py``); the recall figures of ``docs/retrieval.md`` come from
``benchmarks/results/retrieval_recall.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # training/ is run from a checkout
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.record import Run  # noqa: E402
from langchain_selfrag import bundled
from langchain_selfrag.retrieval import with_k
from langchain_selfrag.retrieval.fusion import FusionRetriever
from training.selfrag.bm25 import BM25Retriever
from training.selfrag.qa_data import load_squad
from training.selfrag.retrievers import BM25DocumentRetriever, dense_store

DEPTH = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--split", default=str(bundled.bundle_dir() / "split.json"))
    parser.add_argument("--json", help="also write the hit counts, machine, date and versions to this JSON file")
    args = parser.parse_args()
    run = Run("retrieval_recall")
    squad = Path(args.data) / "squad2_dev_half.json"
    if not squad.is_file():
        raise SystemExit(f"needs {squad} (../shared/data)")
    split = json.loads(Path(args.split).read_text())
    corpus = load_squad(squad, max_passage_chars=split["max_passage_chars"])
    lexical = BM25DocumentRetriever(bm25=BM25Retriever(corpus.passages))
    dense = dense_store(corpus.passages, bundled.cache_dir() / "retrieval_recall").as_retriever()
    retrievers = {"bm25": lexical, "dense": dense, "hybrid": FusionRetriever(sources=[lexical, dense])}
    print(f"{len(corpus.passages)} passages; recall = a gold passage among the top k")
    figures: dict = {"passages": len(corpus.passages), "depth": DEPTH}
    for part in ("train_articles", "heldout_articles"):
        questions = [q for q in corpus.subset(split[part]).questions if q.answerable and q.gold]
        hits = {name: [0, 0] for name in retrievers}
        for q in tqdm(questions, desc=part, unit="q"):
            for name, retriever in retrievers.items():
                ids = [d.metadata["id"] for d in with_k(retriever, DEPTH).invoke(q.question)]
                hits[name][0] += ids[:1] != [] and ids[0] in q.gold
                hits[name][1] += any(i in q.gold for i in ids)
        for name, (at1, at5) in hits.items():
            print(f"{part} {name}: recall@1 {at1 / len(questions):.3f}  recall@5 {at5 / len(questions):.3f}  "
                  f"(n={len(questions)})")
        print(f"{part} hybrid_minus_bm25_recall@5: {(hits['hybrid'][1] - hits['bm25'][1]) / len(questions):+.3f}")
        figures[part] = {"questions": len(questions),
                         "hits": {name: {"top1": at1, "top5": at5} for name, (at1, at5) in hits.items()}}
    if args.json:
        run.write(args.json, vars(args), figures)


if __name__ == "__main__":
    main()
