"""How a frozen chat GGUF and fitted relevance heads judge passages: a probe.

Prints, for each (question, passage) case, the untrained Yes share of the IsRel question (the chat
model's own ``Yes`` minus ``No`` direction on its final hidden state) and each ``--head``'s probability,
under each ``--ask`` wording (default: the IsRel question of ``ReflectionQuestions``). Cases come from:

- ``--store`` with ``--question``: the passages the store retrieves for it (and any ``--passage`` text);
- ``--store`` with ``--labelled``: every question of ``benchmarks/trust/project_docs/questions.json``
  (``make demo``'s and the throughput benchmark's), each retrieved chunk marked ``gold`` when it holds
  one of the question's answer sentences, and a summary per scoring (is the best-judged passage gold,
  and above ``--bar``); ``--windows N`` judges sentence windows of the chunks instead;
- ``--cases FILE``: a JSON list of ``{"name", "question", "passage", "title"}``.

Passages are neutralised as the chain neutralises them. ``--json`` writes every score. Used to find
why the question model abstains on ``make demo``'s question (cookbook/EXPERIMENTS.md, 2026-11-29)::

    python cookbook/experiments/isrel_probe.py --model runs/relhead/q15/model.gguf --store .selfrag/store \\
        --labelled --head runs/relhead/q15/relevance_head.json --json cookbook/experiments/isrel_probe/demo_q15.json
    python cookbook/experiments/isrel_probe.py --model runs/relhead/q15/model.gguf \\
        --cases cookbook/experiments/isrel_probe/cases.json --head runs/relhead/q15/relevance_head.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LABELLED = ROOT / "benchmarks" / "trust" / "project_docs" / "questions.json"


def _flat(text: str) -> str:
    return " ".join(text.split())


def windows(text: str, limit: int) -> list[str]:
    """``text`` cut at sentence ends into windows of at most ``limit`` characters (a longer sentence alone)."""
    out: list[str] = []
    for sentence in (s for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()):
        if out and len(out[-1]) + 1 + len(sentence) <= limit:
            out[-1] += " " + sentence
        else:
            out.append(sentence)
    return out


def store_cases(store, question: str, k: int, golds: list[str] = (), kind: str = "", window: int = 0) -> list[dict]:
    """The chunks ``store`` retrieves for ``question`` (each cut into sentence windows of at most ``window``
    characters when given, each window once); ``gold`` when one holds an answer sentence."""
    cases, seen = [], set()
    for doc in store.similarity_search(question, k=k):
        for text in windows(doc.page_content, window) if window else [doc.page_content]:
            if text not in seen:
                seen.add(text)
                cases.append({"name": doc.metadata.get("source", "?"), "question": question,
                              "title": doc.metadata.get("title"), "passage": text, "kind": kind,
                              "gold": any(_flat(s) in _flat(text) for s in golds)})
    return cases


def labelled_summary(cases: list[dict], scores: np.ndarray, bar: float) -> str:
    """For ``--labelled``: the answerable questions whose best-judged passage is a gold one (and is at
    least ``bar``), and the near misses whose best passage is below ``bar``."""
    by_question: dict[str, list[int]] = {}
    for i, case in enumerate(cases):
        by_question.setdefault(case["question"], []).append(i)
    top = top_bar = answerable = near = near_below = 0
    for rows in by_question.values():
        best = max(rows, key=lambda i: scores[i])
        if cases[best]["kind"] == "answerable":
            answerable += 1
            top += bool(cases[best]["gold"])
            top_bar += bool(cases[best]["gold"]) and scores[best] >= bar
        else:
            near += 1
            near_below += scores[best] < bar
    return (f"gold passage judged best {top}/{answerable}, and at >= {bar}: {top_bar}/{answerable}; "
            f"near misses below {bar}: {near_below}/{near}")


class YesShare:
    """A chat GGUF's final hidden states and its own untrained Yes share of an IsRel wording (``Yes`` minus
    ``No`` on the last hidden state), for (question, title, passage) pairs as the relevance head's training reads them."""

    def __init__(self, path: Path, threads: int = 2) -> None:
        from langchain_selfrag.lm.llamacpp.hidden import LlamaCppHiddenStates
        from training.relevance_head import answer_direction

        self.states = LlamaCppHiddenStates(path, n_threads=threads)
        yes, no = (self.states.tokenize(w, add_bos=False)[0] for w in ("Yes", "No"))
        self.direction = answer_direction(path, yes, no)

    def hidden(self, ask: str, pairs: list[dict], cache: Path | None = None) -> np.ndarray:
        """The final hidden state of each pair's IsRel question in wording ``ask`` (kept under ``cache``,
        by prompt, when given: a later probe of other heads reads them instead of running the model)."""
        from langchain_selfrag.lm.judge import JudgePrompt
        from training.relevance_head import extract, pair_prompts

        if cache is not None:
            return extract(self.states, JudgePrompt(ask=ask), pairs, cache).astype(np.float64)
        return self.states.last_hidden(pair_prompts(JudgePrompt(ask=ask), pairs)).astype(np.float64)

    def untrained(self, hidden: np.ndarray) -> np.ndarray:
        return 0.5 * (1.0 + np.tanh(0.5 * (hidden @ self.direction)))

    def close(self) -> None:
        self.states.close()


def main(argv=None) -> int:
    from langchain_selfrag.graph.context import model_path
    from langchain_selfrag.lm.chat_questions import ReflectionQuestions
    from langchain_selfrag.lm.relevance_head import RelevanceHead
    from langchain_selfrag.retrieval.store import open_store
    from langchain_selfrag.tokens import neutralise

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a known base's name or a chat GGUF path")
    ap.add_argument("--store", help="a Chroma store to retrieve passages from")
    ap.add_argument("--question", help="a question whose retrieved passages are judged")
    ap.add_argument("--labelled", action="store_true", help="the project_docs questions, gold chunks marked")
    ap.add_argument("--cases", help="a JSON list of {name, question, passage, title}")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--passage", action="append", default=[], help="a passage for --question, as text (repeat)")
    ap.add_argument("--title", help="the title of the --passage texts (default none)")
    ap.add_argument("--head", action="append", default=[], help="a relevance_head.json of this model (repeat)")
    ap.add_argument("--ask", action="append", help="an IsRel wording with {title}, {passage}, {question} (repeat)")
    ap.add_argument("--json", help="write every score here")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--windows", type=int, default=0, help="cut retrieved chunks into sentence windows of at most N characters")
    ap.add_argument("--bar", type=float, default=0.75, help="the IsRel bar of --labelled's summary (default 0.75)")
    ap.add_argument("--cache", type=Path, help="a folder keeping the hidden states by prompt (read, then added to)")
    args = ap.parse_args(argv)

    store = open_store(args.store) if args.store else None
    cases: list[dict] = []
    if args.labelled:
        if store is None:
            ap.error("--labelled needs --store")
        for row in json.loads(LABELLED.read_text(encoding="utf-8"))["questions"]:
            golds = [a["sentence"] for a in row.get("answers", [])]
            cases += store_cases(store, row["question"], args.k, golds, row["kind"], args.windows)
    if args.question:
        cases += store_cases(store, args.question, args.k, window=args.windows) if store else []
        cases += [{"name": "given", "question": args.question, "title": args.title, "passage": text}
                  for text in args.passage]
    if args.cases:
        cases += json.loads(Path(args.cases).read_text(encoding="utf-8"))
    if not cases:
        ap.error("give --question, --labelled or --cases")

    path = Path(model_path(args.model))
    reader = YesShare(path, args.threads)
    heads = {Path(h).parent.name or h: RelevanceHead.load(Path(h)) for h in args.head}
    pairs = [{**case, "title": case.get("title"), "passage": neutralise(case["passage"])} for case in cases]  # as the chain neutralises them
    results = []
    for ask in args.ask or [ReflectionQuestions.isrel]:
        h = reader.hidden(ask, pairs, args.cache)
        columns = {"untrained": reader.untrained(h), **{name: head.relevant(h) for name, head in heads.items()}}
        print(f"-- {ask.splitlines()[-1]}")
        for i, case in enumerate(cases):
            scores = {name: float(values[i]) for name, values in columns.items()}
            results.append({"ask": ask, **case, "scores": scores})
            mark = "gold " if case.get("gold") else ""
            shown = "  ".join(f"{name} {value:.3f}" for name, value in scores.items())
            print(f"{case['name'][:24]:24} {shown}  | {mark}{case['question'][:40]!r} {case['passage'][:40]!r}")
        if args.labelled and not args.question and not args.cases:
            for name, values in columns.items():
                print(f"{name}: {labelled_summary(cases, values, args.bar)}")
    reader.close()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"model": str(path), "cases": results}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
