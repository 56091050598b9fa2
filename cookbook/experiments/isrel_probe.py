"""How a frozen chat GGUF and fitted relevance heads judge passages: a probe.

Prints, for each (question, passage) case, the untrained Yes share of the IsRel question (the chat
model's own ``Yes`` minus ``No`` direction on its final hidden state) and each ``--head``'s probability,
under each ``--ask`` wording (default: the IsRel question of ``ReflectionQuestions``). Cases come from:

- ``--store`` with ``--question``: the passages the store retrieves for it (and any ``--passage`` text);
- ``--store`` with ``--labelled``: every question of ``benchmarks/trust/project_docs/questions.json``
  (``make demo``'s and the throughput benchmark's), each retrieved chunk marked ``gold`` when it holds
  one of the question's answer sentences;
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
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LABELLED = ROOT / "benchmarks" / "trust" / "project_docs" / "questions.json"


def _flat(text: str) -> str:
    return " ".join(text.split())


def store_cases(store, question: str, k: int, golds: list[str] = (), kind: str = "") -> list[dict]:
    """The chunks ``store`` retrieves for ``question``; ``gold`` when one holds an answer sentence."""
    return [{"name": doc.metadata.get("source", "?"), "question": question, "title": doc.metadata.get("title"),
             "passage": doc.page_content, "kind": kind,
             "gold": any(_flat(s) in _flat(doc.page_content) for s in golds)}
            for doc in store.similarity_search(question, k=k)]


class YesShare:
    """A chat GGUF's final hidden states and its own untrained Yes share of an IsRel wording (``Yes`` minus
    ``No`` on the last hidden state), for (question, title, passage) pairs as the relevance head's training reads them."""

    def __init__(self, path: Path, threads: int = 2) -> None:
        from langchain_selfrag.lm.llamacpp.hidden import LlamaCppHiddenStates
        from training.relevance_head import answer_direction

        self.states = LlamaCppHiddenStates(path, n_threads=threads)
        yes, no = (self.states.tokenize(w, add_bos=False)[0] for w in ("Yes", "No"))
        self.direction = answer_direction(path, yes, no)

    def hidden(self, ask: str, pairs: list[dict]) -> np.ndarray:
        """The final hidden state of each pair's IsRel question in wording ``ask``."""
        from langchain_selfrag.lm.judge import JudgePrompt
        from training.relevance_head import pair_prompts

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
    args = ap.parse_args(argv)

    store = open_store(args.store) if args.store else None
    cases: list[dict] = []
    if args.labelled:
        if store is None:
            ap.error("--labelled needs --store")
        for row in json.loads(LABELLED.read_text(encoding="utf-8"))["questions"]:
            golds = [a["sentence"] for a in row.get("answers", [])]
            cases += store_cases(store, row["question"], args.k, golds, row["kind"])
    if args.question:
        cases += store_cases(store, args.question, args.k) if store else []
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
        h = reader.hidden(ask, pairs)
        columns = {"untrained": reader.untrained(h), **{name: head.relevant(h) for name, head in heads.items()}}
        print(f"-- {ask.splitlines()[-1]}")
        for i, case in enumerate(cases):
            scores = {name: float(values[i]) for name, values in columns.items()}
            results.append({"ask": ask, **case, "scores": scores})
            mark = "gold " if case.get("gold") else ""
            shown = "  ".join(f"{name} {value:.3f}" for name, value in scores.items())
            print(f"{case['name'][:24]:24} {shown}  | {mark}{case['question'][:40]!r} {case['passage'][:40]!r}")
    reader.close()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"model": str(path), "cases": results}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
