"""Does the chain answer questions about the demo corpus (``examples/corpus/``) with a sentence that explains and cites?

What ``make demo`` asks, for every question of ``benchmarks/trust/project_docs/questions.json`` (make
demo's question and the throughput benchmark's twelve). The corpus is indexed into a fresh store as
``selfrag index`` does and each question goes through ``SelfRAGChain`` with the model's defaults (its
calibration's bars), as ``selfrag ask`` does. An answerable question counts as **explained** when the
answer is not an abstention, cites a document that states the answer, and reads as that document's
sentence (token F1 with it >= ``--min-f1``, 0.5 by default: a span such as "drop" does not explain "What
happens with hard constraints?"). A near miss counts when the chain abstains.

    python benchmarks/project_docs.py                              # the bundled model
    python benchmarks/project_docs.py --model runs/x1/x1.gguf --json benchmarks/results/project_docs_x1.json
    python benchmarks/project_docs.py --paper          # what the model answers with no abstention bars
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.record import Run  # noqa: E402
from langchain_selfrag.config import ANSWER_FORMS  # noqa: E402
from langchain_selfrag.evaluation.qa.metrics import EXPLAINED_F1, explanation_f1  # noqa: E402

QUESTIONS = ROOT / "benchmarks" / "trust" / "project_docs" / "questions.json"
#: The folder the questions are about: what ``make demo`` indexes.
CORPUS = ROOT / "examples" / "corpus"


def load_questions(path: Path = QUESTIONS, corpus: Path = CORPUS) -> list[dict[str, Any]]:
    """The labelled questions; every answer sentence must be in its file (whitespace aside)."""
    rows = json.loads(path.read_text(encoding="utf-8"))["questions"]
    for row in rows:
        if row.get("kind") not in ("answerable", "near_miss"):
            raise ValueError(f"{path}: {row.get('question')!r} has kind {row.get('kind')!r}")
        for ans in row.get("answers", []):
            text = " ".join((corpus / ans["source"]).read_text(encoding="utf-8").split())
            if " ".join(ans["sentence"].split()) not in text:
                raise ValueError(f"{path}: the answer of {row['question']!r} is not in {ans['source']}")
        if row["kind"] == "answerable" and not row.get("answers"):
            raise ValueError(f"{path}: answerable {row['question']!r} lists no answer")
    return rows


def judge(row: Mapping[str, Any], abstained: bool, answer: str, cited: Sequence[str],
          min_f1: float = EXPLAINED_F1) -> dict[str, Any]:
    """One question's outcome: ``handled`` (explained / abstained as wanted) and why. Each gold sentence
    is an answer of its own (the best F1 with any one of a cited document's)."""
    if row["kind"] == "near_miss":
        return {"handled": abstained, "f1": None, "cites_source": None}
    golds = [a for a in row["answers"] if a["source"] in cited]
    f1 = explanation_f1(answer, [a["sentence"] for a in golds], together=False)
    return {"handled": (not abstained) and bool(golds) and f1 >= min_f1, "f1": round(f1, 3), "cites_source": bool(golds)}


def summarise(outcomes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts per kind, and how the answerable questions that were not explained went wrong."""
    ans = [o for o in outcomes if o["kind"] == "answerable"]
    near = [o for o in outcomes if o["kind"] == "near_miss"]
    return {
        "answerable": {"n": len(ans), "explained": sum(o["handled"] for o in ans),
                       "abstained": sum(o["abstained"] for o in ans),
                       "answered_without_the_source": sum(not o["abstained"] and not o["cites_source"] for o in ans),
                       "cited_but_not_its_sentence": sum(not o["abstained"] and o["cites_source"] and not o["handled"]
                                                         for o in ans)},
        "near_miss": {"n": len(near), "abstained": sum(o["handled"] for o in near)},
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="GGUF file or HF model dir (default: the bundled selfrag-smollm2-135m)")
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="the folder the questions are about")
    ap.add_argument("--questions", type=Path, default=QUESTIONS)
    ap.add_argument("--min-f1", type=float, default=EXPLAINED_F1,
                    help="token F1 with the source's sentence that explains")
    ap.add_argument("--paper", action="store_true",
                    help="SelfRAGConfig.paper() (never abstain on evidence): what the model answers without its bars")
    ap.add_argument("--answer-form", choices=ANSWER_FORMS,
                    help="SelfRAGConfig.answer_form (default: the model's own, or generated with --paper)")
    ap.add_argument("--threads", type=int, help="llama.cpp threads (default: the backend's)")
    ap.add_argument("--json", help="also write the outcomes, machine, date and versions to this JSON file")
    args = ap.parse_args(argv)
    try:
        rows = load_questions(args.questions, args.corpus)
    except (OSError, ValueError, KeyError) as exc:
        ap.error(f"cannot read the questions: {exc}")
    run = Run("project_docs")
    from benchmarks.trust_suite import suite_config
    from langchain_selfrag.bundled import default_model_path
    from langchain_selfrag.chain import SelfRAGChain
    from langchain_selfrag.lm import load_reflection_lm
    from langchain_selfrag.retrieval import index_path, open_store

    model = args.model or default_model_path(progress=False)
    if model is None:
        raise SystemExit("no model: pass --model (the bundled model could not be built here)")
    lm = load_reflection_lm(str(model), **({"n_threads": args.threads} if args.threads else {}))
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="selfrag-docs-") as tmp:
        index_path(args.corpus, Path(tmp) / "store", progress=False)
        chain = SelfRAGChain(lm, open_store(Path(tmp) / "store"), suite_config(args))
        bars = {"abstain_isrel": chain.config.abstain_isrel, "abstain_issup": chain.config.abstain_issup,
                "answer_form": chain.config.answer_form}
        for row in rows:
            out = chain.invoke(row["question"])
            cited = [str(d.metadata.get("source")) for d in out["citations"]]
            verdict = judge(row, bool(out["abstained"]), out["answer"], cited, args.min_f1)
            outcomes.append({"question": row["question"], "kind": row["kind"], "abstained": bool(out["abstained"]),
                             "answer": out["answer"], "cited": cited, **verdict})
            mark = "ok " if verdict["handled"] else "-- "
            print(f"{mark}{row['kind']:<10} {row['question']}\n     -> {'(abstained)' if out['abstained'] else out['answer']!r}"
                  f" {cited}")
    summary = summarise(outcomes)
    a, n = summary["answerable"], summary["near_miss"]
    print(f"\n{Path(str(model)).name} at IsRel {bars['abstain_isrel']:g} / IsSup {bars['abstain_issup']:g}, "
          f"{bars['answer_form']} answers: "
          f"explained {a['explained']}/{a['n']} answerable questions (abstained {a['abstained']}, answered without "
          f"citing the source {a['answered_without_the_source']}, cited it but not its sentence "
          f"{a['cited_but_not_its_sentence']}); abstained on {n['abstained']}/{n['n']} near misses")
    if args.json:
        run.write(args.json, vars(args), {"model": Path(str(model)).name, "bars": bars, **summary, "outcomes": outcomes})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
