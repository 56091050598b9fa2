"""Real-world questions against invented corpora, through the README's own path.

Each invented corpus (the abstention validation corpus and the test corpus) is indexed with
``selfrag index`` into the embedded Chroma store (MiniLM embeddings) and opened with
``open_store``, as a new user would. Asked against it through ``SelfRAGChain``:

* real-world questions no invented corpus can answer: seeded samples of PopQA, HotpotQA and the
  answerable SelfAware questions (open-domain QA sets; their answers are in the world, not in the
  documents), with the defaults and with ``rho=0.5`` (``restraint``: restraint on top of the defaults);
* the corpus's own answerable questions, with the defaults and with ``SelfRAGConfig.paper()``, so
  that "answerable accuracy unchanged" is measured, not assumed.

A dense retriever always returns ``k`` passages, so every abstention here is the model's IsRel /
IsSup judgement, never an empty search. Writes ``realworld_eval.json`` for the model card::

    python -m cookbook.selfrag_smollm2.realworld --data ../shared/data
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_selfrag import SelfRAGChain, bundled
from langchain_selfrag.cli import main as selfrag_main
from langchain_selfrag.config import SelfRAGConfig
from langchain_selfrag.evaluation.qa.metrics import normalize_answer
from langchain_selfrag.jsonl import iter_jsonl
from langchain_selfrag.lm import load_reflection_lm
from langchain_selfrag.retrieval import open_store

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORPORA = {"validation": HERE / "data" / "abstention_validation_corpus.json",
           "test": ROOT / "tests" / "data" / "invented_corpus.json"}
#: Configurations the real-world questions are asked with (label -> SelfRAGConfig settings).
CONFIGS = {"defaults": {}, "restraint": {"rho": 0.5}}


def real_world_questions(data: Path, n: int, seed: int) -> list[dict[str, str]]:
    """``n`` PopQA, ``n // 2`` HotpotQA and ``n // 2`` answerable SelfAware questions, seeded."""
    def sample(rows: list[Any]) -> list[Any]:
        rows = list(rows)
        random.Random(seed).shuffle(rows)
        return rows

    popqa = [r for _, r in iter_jsonl(data / "popqa.jsonl")]
    hotpot = [r for _, r in iter_jsonl(data / "hotpotqa_dev_200.jsonl")]
    selfaware = [e for e in json.loads((data / "selfaware.json").read_text())["example"] if e["answerable"]]
    return ([{"source": "popqa", "question": r["question"]} for r in sample(popqa)[:n]]
            + [{"source": "hotpotqa", "question": r["question"]} for r in sample(hotpot)[: n // 2]]
            + [{"source": "selfaware", "question": e["question"]} for e in sample(selfaware)[: n // 2]])


def index_corpus(corpus: Mapping[str, Any], folder: Path) -> Path:
    """The corpus's documents written as files and indexed by ``selfrag index``; the store path."""
    docs = folder / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for d in corpus["documents"]:
        (docs / d["source"]).write_text(d["text"] + "\n", encoding="utf-8")
    store = folder / "store"
    if selfrag_main(["index", str(docs), "--store", str(store), "--quiet"]) != 0:
        raise SystemExit(f"selfrag index failed for {docs}")
    return store


def best_isrel(out: Mapping[str, Any]) -> float | None:
    """The highest IsRel of the run's candidates (None when nothing was graded)."""
    values = [t["isrel"] for t in out.get("trace") or [] if t.get("isrel") is not None]
    return max(values) if values else None


def right(question: Mapping[str, Any], out: Mapping[str, Any]) -> bool:
    """Answered, a gold answer in the answer, and the right document cited."""
    cited = [str((d.metadata or {}).get("source", "")) for d in out.get("citations") or []]
    return (not out.get("abstained")
            and any(normalize_answer(a) in normalize_answer(out.get("answer") or "") for a in question["answers"])
            and any(c.endswith(question["source"]) for c in cited))


def summary(runs: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
    n = len(runs)
    hits = sum(bool(r[key]) for r in runs)
    return {"n": n, key: hits, "rate": hits / n if n else None}


def run(args: argparse.Namespace) -> dict[str, Any]:
    lm = load_reflection_lm(args.model or str(bundled.default_model_path()), n_threads=args.threads)
    questions = real_world_questions(Path(args.data), args.n, args.seed)
    result: dict[str, Any] = {"schema": "selfrag-smollm2-realworld/1", "seed": args.seed,
                              "questions": {s: sum(q["source"] == s for q in questions)
                                            for s in ("popqa", "hotpotqa", "selfaware")},
                              "retriever": "selfrag index -> embedded Chroma (MiniLM), open_store, k from the config",
                              "corpora": {}}
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in CORPORA.items():
            corpus = json.loads(path.read_text())
            store = open_store(index_corpus(corpus, Path(tmp) / name))
            entry: dict[str, Any] = {"file": str(path.relative_to(ROOT)), "documents": len(corpus["documents"])}
            for label, settings in CONFIGS.items():
                chain = SelfRAGChain(lm, store, SelfRAGConfig(**settings))
                runs = []
                for q in questions:
                    out = chain.invoke(q["question"])
                    runs.append({**q, "abstained": bool(out["abstained"]), "answer": out["answer"],
                                 "best_isrel": best_isrel(out), "reason": out.get("abstain_reason")})
                answered = [r for r in runs if not r["abstained"]]
                graded = [r["best_isrel"] for r in runs if r["best_isrel"] is not None]
                entry[label] = {**summary(runs, "abstained"), "settings": settings, "answered": answered,
                                "highest_isrel": max(graded) if graded else None}
                print(f"{name} {label}: abstained {entry[label]['abstained']}/{len(runs)} "
                      f"({time.time() - start:.0f}s)", file=sys.stderr, flush=True)
            for label, config in (("defaults", SelfRAGConfig()), ("paper", SelfRAGConfig.paper())):
                chain = SelfRAGChain(lm, store, config)
                runs = [{"question": q["question"], "right": right(q, out), "abstained": bool(out["abstained"])}
                        for q in corpus["answerable"] for out in [chain.invoke(q["question"])]]
                entry[f"answerable_{label}"] = summary(runs, "right")
            result["corpora"][name] = entry
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data", help="folder with popqa.jsonl, hotpotqa_dev_200.jsonl, selfaware.json")
    ap.add_argument("--n", type=int, default=40, help="PopQA questions (HotpotQA and SelfAware: n/2 each)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", help="model file (default: the bundled model)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(bundled.bundle_dir() / "realworld_eval.json"))
    args = ap.parse_args(argv)
    missing = [f for f in ("popqa.jsonl", "hotpotqa_dev_200.jsonl", "selfaware.json") if not (Path(args.data) / f).is_file()]
    if missing:
        print(f"error: {', '.join(missing)} not found in {args.data}", file=sys.stderr)
        return 2
    result = run(args)
    Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(json.dumps({name: {k: {kk: v[kk] for kk in ("n", "abstained", "right", "rate") if kk in v}
                             for k, v in entry.items() if isinstance(v, dict)}
                      for name, entry in result["corpora"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
