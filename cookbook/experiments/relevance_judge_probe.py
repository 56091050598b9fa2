"""Which chat model judges relevance? A probe on the trust suite's validation part (issue 55).

For each question of the chosen kinds (off-topic questions left out: v4 already abstains on them), the
store's 5 passages for it (noise-only runs: the 5 holding no gold answer, as the suite retrieves them)
are judged by :class:`~langchain_selfrag.lm.judge.RelevanceJudge` on the model given; the report is, per
kind and part, the AUC of each question's best ``[Relevant]`` (its ``Yes`` share) of answerable questions
against that part's, as the suite's ``relevance_separation`` computes it from a run's IsRel. Records go
to a JSONL file (resumable); ``--report`` only reads them::

    python -m cookbook.experiments.relevance_judge_probe --model qwen2.5-coder-1.5b-instruct \\
        --kinds docs,squad --out cookbook/experiments/relevance_judge/qwen2.5-coder-1.5b-instruct.jsonl

The files in ``relevance_judge/`` are its records for the 0.5B (docs: answerable, near misses and 8
noise-only runs, then stopped) and the 1.5B (docs; SQuAD's answerable questions only, then stopped for
the full trust-suite run; SQuAD's unanswerable ones added later with ``--parts unanswerable``). They were
written by its first version, which built the same prompt bytes by hand and called the model's
``candidate_probs`` directly. ``qwen2.5-coder-1.5b-instruct-strict.jsonl`` is the 1.5B asked a stricter
question (``--ask``: check each name, number and detail of the question against the passage) on SQuAD's
answerable and unanswerable questions: AUC 0.81 over its 40 answerable, 0.87 over the 30 the default
question was asked (against its 0.84): no clear gain on 20 unanswerable questions.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import trust_suite as TS
from langchain_selfrag.lm.chat import ReaderTurn


def judge_records(model: str, kinds: list[str], out: Path, data: Path | None, n_squad: int,
                  ask: str | None = None, parts: set[str] | None = None) -> None:
    from langchain_selfrag.graph.context import model_path
    from langchain_selfrag.lm import JudgePrompt, RelevanceJudge, load_reflection_lm
    from langchain_selfrag.retrieval import open_store

    judge = RelevanceJudge(load_reflection_lm(model_path(model)), JudgePrompt(ask=ask) if ask else None)
    done = {(r["kind"], r["part"], r["question"]) for r in TS.read_records(out)}
    with out.open("a", encoding="utf-8") as fh:
        for kind in kinds:
            docs, questions = TS.suite_questions(kind, "validation", data, n_squad, 0, None, ())
            todo = [q for q in questions if q["part"] != "off_topic" and (parts is None or q["part"] in parts)
                    and (kind, q["part"], q["question"]) not in done]
            if not todo:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                store = open_store(TS.index_folder(docs, Path(tmp)))
                start = time.time()
                for q in todo:
                    if q["part"] == "noise_only":
                        passages = TS.NoiseOnlyRetriever(store=store, answers=q["answers"], k=5).invoke(q["question"])
                    else:
                        passages = store.similarity_search(q["question"], k=5)
                    turns = [ReaderTurn(q["question"], "", TS.source_of(d), d.page_content) for d in passages]
                    relevant = [p["[Relevant]"] for p in judge.isrel(turns)]
                    fh.write(json.dumps({"kind": kind, "part": q["part"], "question": q["question"],
                                         "answers": q.get("answers"), "source": q.get("source"), "states": relevant,
                                         "sources": [TS.source_of(d) for d in passages]}) + "\n")
                    fh.flush()
                print(f"{kind}: {len(todo)} questions, {(time.time() - start) / len(todo):.1f} s each", file=sys.stderr)


def report(out: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Per kind and part, the best-``[Relevant]`` AUC of answerable questions against that part's."""
    from training.core.metrics import roc_auc

    records = TS.read_records(out)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for kind in sorted({r["kind"] for r in records}):
        best = {}
        for r in records:
            if r["kind"] == kind and r["states"]:
                best.setdefault(r["part"], []).append(max(r["states"]))
        pos = best.pop("answerable", [])
        table[kind] = {part: {"n": len(neg), "auc": roc_auc(pos + neg, [True] * len(pos) + [False] * len(neg))}
                       for part, neg in best.items() if pos and neg}
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the JSONL records (resumable)")
    ap.add_argument("--model", help="the judge: a chat model's GGUF file or a base's name")
    ap.add_argument("--kinds", default="docs,squad")
    ap.add_argument("--data", type=Path, default=None, help="folder with squad2_dev_half.json (not needed here)")
    ap.add_argument("--n-squad", type=int, default=40)
    ap.add_argument("--ask", help="the judge's question (JudgePrompt.ask, with {title}, {passage}, {question}); "
                                  "default: JudgePrompt's")
    ap.add_argument("--parts", help="comma-separated parts to judge (default: all but off_topic)")
    ap.add_argument("--report", action="store_true", help="only report the records of --out")
    args = ap.parse_args(argv)
    if not args.report:
        if not args.model:
            ap.error("--model is needed unless --report")
        judge_records(args.model, [k for k in args.kinds.split(",") if k], args.out, args.data, args.n_squad,
                      args.ask, set(args.parts.split(",")) if args.parts else None)
    for kind, parts in report(args.out).items():
        print(f"{kind:6s} " + "  ".join(f"{p} {v['auc']:.2f} (n {v['n']})" for p, v in parts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
