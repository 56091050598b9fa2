"""Should the relevance judge also judge IsSup? A probe on recorded trust-suite runs (issue 55).

The judged pair (v4 critic, Qwen2.5-Coder-0.5B reader, Qwen2.5-Coder-1.5B judge) takes IsSup from v4,
which calls nearly every answer fully supported (0.99 for "The capital of Australia is Canberra."
written from a passage about xmltodict). Here the judge is asked, for each candidate of a recorded run,
whether the reader's answer is supported by the passage it was written from (``--ask``; its ``Yes``
share is the candidate's IsSup). The run's passages are retrieved again as the suite retrieved them
(each checked against the source the run recorded), so no question is asked of the chain again.

:func:`replay` then chooses bars on the validation run and applies them to the test run, the suite's
rule: a candidate's score is the chain's ``p(y) + IsRel + IsSup + 0.5 IsUse`` (``scoring.segment_score``;
``p(y)`` recovered from the recorded score), the answer is the best candidate, and the chain abstains by
its own rule (``graph.nodes.abstain.evidence_reason``: the best IsRel below the IsRel bar, or the answer's
IsSup below the IsSup bar). ``critic`` is the run as it was (v4's IsSup, IsRel bar only: it reproduces
the run's own counts); ``judge`` is the judge's IsSup, both bars fitted::

    python -m cookbook.experiments.support_judge_probe --run runs/trust/rcj-val-ds --kinds squad \\
        --parts answerable,unanswerable --out cookbook/experiments/support_judge/rcj-val-ds.jsonl
    python -m cookbook.experiments.support_judge_probe --replay \\
        --validation runs/trust/rcj-val-ds cookbook/experiments/support_judge/rcj-val-ds.jsonl \\
        --test runs/trust/rcj-test-squad40 cookbook/experiments/support_judge/rcj-test-squad40.jsonl \\
        --test runs/trust/rcj-test-docs cookbook/experiments/support_judge/rcj-test-docs.jsonl

The records in ``support_judge/`` hold two questions for SQuAD (``nli``, the default ``--ask``, and
``qa``, which also shows the question) and ``nli`` for docs; the run folders are not in the repository
(``runs/`` is the trust suite's output), so ``--replay`` needs them rerun first (the commands are in
``cookbook/EXPERIMENTS.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import trust_suite as TS
from langchain_selfrag.graph.nodes.abstain import evidence_reason
from langchain_selfrag.scoring import segment_score

ASKS = {
    "nli": "Passage ({title}):\n{passage}\n\nStatement: {answer}\n\nIs the statement supported by the passage? "
           "Answer Yes or No.",
    "qa": "Passage ({title}):\n{passage}\n\nQuestion: {question}\nAnswer: {answer}\n\n"
          "Does the passage state this answer to the question? Answer Yes or No.",
}
IS_REL_BARS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
IS_SUP_BARS = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)


def support_prompt(ask: str, title: str, passage: str, question: str, answer: str) -> str:
    """The judge's prompt (the judge's chat layout and system turn) asking whether ``answer`` is supported
    by the passage."""
    from langchain_selfrag.lm.chat import chat_safe
    from langchain_selfrag.lm.judge import JudgePrompt

    layout = JudgePrompt()
    user = ask.format(title=chat_safe(title), passage=chat_safe(passage), question=chat_safe(question),
                      answer=chat_safe(answer))
    return layout.chat(layout.system, user, "")


def judge_records(run: Path, kinds: Sequence[str], parts: set[str], out: Path, model: str, asks: Sequence[str],
                  data: Path | None) -> None:
    """Append one record per question of ``run`` (of these kinds and parts): each candidate's ``Yes`` share
    for each ask, or None for a candidate without a passage."""
    from langchain_selfrag import tokens as T
    from langchain_selfrag.graph.context import model_path
    from langchain_selfrag.lm import load_reflection_lm
    from langchain_selfrag.lm.judge import isrel_from_answer
    from langchain_selfrag.retrieval import open_store

    info = json.loads((run / "run.json").read_text())
    done = {(r["kind"], r["part"], r["question"]) for r in TS.read_records(out)}
    runs = [r for r in TS.read_records(run / "records.jsonl") if r["kind"] in kinds and r["part"] in parts
            and (r["kind"], r["part"], r["question"]) not in done]
    lm = load_reflection_lm(model_path(model))
    with out.open("a", encoding="utf-8") as fh:
        for kind in kinds:
            todo = [r for r in runs if r["kind"] == kind]
            if not todo:
                continue
            docs, questions = TS.suite_questions(kind, info["split"], data, info["n_squad"], info["seed"],
                                                 info.get("n_squad_unanswerable"),
                                                 tuple(info.get("squad_holdout_articles") or ()))
            asked = {(q["part"], q["question"]): q for q in questions}
            with tempfile.TemporaryDirectory() as tmp:
                store = open_store(TS.index_folder(docs, Path(tmp)))
                start = time.time()
                for r in todo:
                    q = asked[(r["part"], r["question"])]
                    if r["part"] == "noise_only":
                        passages = TS.NoiseOnlyRetriever(store=store, answers=q["answers"], k=5).invoke(r["question"])
                    else:
                        passages = store.similarity_search(r["question"], k=5)
                    support = []
                    for t in r["trace"]:
                        i = t.get("passage")
                        if not isinstance(i, int) or i >= len(passages):
                            support.append(None)
                            continue
                        doc = passages[i]
                        if TS.source_of(doc) != t["source"]:
                            raise SystemExit(f"{r['question']!r}: passage {i} is {TS.source_of(doc)} now, "
                                             f"{t['source']} in the run")
                        prompts = [support_prompt(ASKS[a], Path(TS.source_of(doc)).stem, doc.page_content,
                                                  r["question"], t.get("answer") or "") for a in asks]
                        probs = lm.candidate_probs(prompts, ["Yes", "No"])
                        support.append({a: isrel_from_answer(p["Yes"], p["No"])[T.RELEVANT] for a, p in zip(asks, probs)})
                    fh.write(json.dumps({"kind": kind, "part": r["part"], "question": r["question"],
                                         "support": support}) + "\n")
                    fh.flush()
                print(f"{kind}: {len(todo)} questions, {(time.time() - start) / len(todo):.1f} s each", file=sys.stderr)


def candidates(run_records: Iterable[Mapping[str, Any]], support_records: Iterable[Mapping[str, Any]],
               ask: str) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """``(kind, part, candidates)`` of each probed question: per candidate with a passage its IsRel, v4's
    IsSup (``critic``), the judge's (``judge``), IsUse, ``p(y)`` and whether its answer is right; questions
    the judge was not asked ``ask`` about are left out."""
    by_key = {(r["kind"], r["part"], r["question"]): r for r in run_records}
    rows = []
    for s in support_records:
        if any(sup is not None and ask not in sup for sup in s["support"]):
            continue
        r = by_key[(s["kind"], s["part"], s["question"])]
        cands = []
        for t, sup in zip(r["trace"], s["support"]):
            if sup is None or t.get("isrel") is None:
                continue
            seq = t["score"] - segment_score(0.0, t["isrel"], t["issup"], t["isuse"])
            cands.append({"isrel": t["isrel"], "critic": t["issup"], "judge": sup[ask], "isuse": t["isuse"],
                          "seq": seq, "right": TS.answer_right(r, *TS.candidate_given(t))})
        rows.append((s["kind"], s["part"], cands))
    return rows


def score(cand: Mapping[str, Any], source: str) -> float:
    """The chain's segment score of a candidate with IsSup from ``source``."""
    return segment_score(cand["seq"], cand["isrel"], cand[source], cand["isuse"])


def handled(rows: Sequence[tuple[str, str, list[dict[str, Any]]]], isrel: float, issup: float,
            source: str) -> dict[str, list[bool]]:
    """Per ``kind/part``, whether each question is handled right at these bars with IsSup from ``source``
    (``critic``: the run's own, whose bar it had at 0; ``judge``: the judge's)."""
    out: dict[str, list[bool]] = {}
    for kind, part, cands in rows:
        if not cands:
            ok = part != "answerable"
        else:
            trace = [{"passage": i, "isrel": c["isrel"], "issup": c[source]} for i, c in enumerate(cands)]
            best = max(range(len(cands)), key=lambda i: score(cands[i], source))
            abstains = evidence_reason(trace, [trace[best]], isrel, issup) is not None
            chosen = cands[best]
            ok = (not abstains and chosen["right"]) if part == "answerable" else abstains
        out.setdefault(f"{kind}/{part}", []).append(ok)
    return out


def mean_share(parts: Mapping[str, list[bool]]) -> float:
    return sum(sum(v) / len(v) for v in parts.values()) / len(parts)


def replay(validation: Sequence[tuple[str, str, list]], test: Sequence[tuple[str, str, list]]) -> list[dict[str, Any]]:
    """For each fitting set (both kinds, each alone) and IsSup source, the bars with the highest mean share
    on ``validation`` (ties to lower bars) and what they give on ``test``."""
    out, seen = [], set()
    for kinds in (("docs", "squad"), ("squad",), ("docs",)):
        val = [row for row in validation if row[0] in kinds]
        tst = [row for row in test if row[0] in kinds]
        present = frozenset(row[0] for row in val + tst)
        if not val or not tst or present in seen:
            continue
        seen.add(present)
        kinds = tuple(sorted(present))
        for source, sup_bars in (("critic", (0.0,)), ("judge", IS_SUP_BARS)):
            grid = [(r, s) for r in IS_REL_BARS for s in sup_bars]
            best = max(grid, key=lambda g: (round(mean_share(handled(val, *g, source)), 9), -g[0], -g[1]))
            got = handled(tst, *best, source)
            out.append({"fitted_on": list(kinds), "issup": source, "bars": best,
                        "validation": round(mean_share(handled(val, *best, source)), 3),
                        "test": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(got.items())},
                        "test_mean": round(mean_share(got), 3)})
    return out


def aucs(rows: Sequence[tuple[str, str, list]]) -> dict[str, float]:
    """Per kind, the AUC of answerable questions against the rest for the best IsRel and the chosen answer's
    IsRel x IsSup (judge's, each question's best candidate by the judge's score)."""
    from training.core.metrics import roc_auc

    out = {}
    for kind in sorted({k for k, _, _ in rows}):
        got = [(part == "answerable", cands) for k, part, cands in rows if k == kind and cands]
        labels = [a for a, _ in got]
        best = [max(c["isrel"] for c in cands) for _, cands in got]
        chosen = [max(cands, key=lambda c: score(c, "judge")) for _, cands in got]
        out[f"{kind} best IsRel"] = round(roc_auc(best, labels), 3)
        out[f"{kind} chosen IsRel x judge IsSup"] = round(roc_auc([c["isrel"] * c["judge"] for c in chosen], labels), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, help="a trust-suite run folder (records.jsonl, run.json) to judge")
    ap.add_argument("--out", type=Path, help="the JSONL records (resumable)")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct", help="the judge: a GGUF file or a base's name")
    ap.add_argument("--kinds", default="docs,squad")
    ap.add_argument("--parts", default="answerable,near_miss,unanswerable,noise_only")
    ap.add_argument("--asks", default="nli", help=f"comma-separated, of {', '.join(ASKS)}")
    ap.add_argument("--data", type=Path, default=TS.ROOT.parent / "shared" / "data")
    ap.add_argument("--replay", action="store_true", help="only replay: --validation and --test pairs")
    ap.add_argument("--validation", nargs=2, action="append", metavar=("RUN", "RECORDS"), default=[])
    ap.add_argument("--test", nargs=2, action="append", metavar=("RUN", "RECORDS"), default=[])
    ap.add_argument("--ask", default="nli", help="with --replay: the ask whose shares are the judge's IsSup")
    args = ap.parse_args(argv)
    if not args.replay:
        if not (args.run and args.out):
            ap.error("--run and --out are needed unless --replay")
        judge_records(args.run, [k for k in args.kinds.split(",") if k], set(args.parts.split(",")), args.out,
                      args.model, [a for a in args.asks.split(",") if a], args.data)
        return 0

    def rows(pairs):
        return [row for run, recs in pairs for row in candidates(TS.read_records(Path(run) / "records.jsonl"),
                                                                  TS.read_records(Path(recs)), args.ask)]

    val, test = rows(args.validation), rows(args.test)
    print(json.dumps({"validation_aucs": aucs(val), "test_aucs": aucs(test), "replay": replay(val, test)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
