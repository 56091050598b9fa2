"""How a frozen chat GGUF and fitted relevance heads judge the passages of one question: a probe.

For the passages a store retrieves for ``--question`` (and any ``--passage`` given as text), prints the
untrained Yes share of the IsRel question (the chat model's own ``Yes`` minus ``No`` direction on its
final hidden state) and each ``--head``'s probability, under each ``--ask`` wording (default: the IsRel
question of ``ReflectionQuestions``). Used to find why the question model abstains on ``make demo``'s
question (cookbook/EXPERIMENTS.md, 2026-11-29)::

    python cookbook/experiments/isrel_probe.py --model qwen2.5-coder-1.5b-instruct --store .selfrag/store \\
        --question "What is the retrieval threshold delta?" --head runs/relhead/q15/relevance_head.json \\
        --passage "The retrieval threshold delta is 0.2 by default."
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> int:
    from langchain_selfrag.chatml import chatml
    from langchain_selfrag.graph.context import model_path
    from langchain_selfrag.lm.chat import ReaderTurn, fill
    from langchain_selfrag.lm.chat_questions import ReflectionQuestions
    from langchain_selfrag.lm.llamacpp.hidden import LlamaCppHiddenStates
    from langchain_selfrag.lm.relevance_head import RelevanceHead
    from langchain_selfrag.retrieval.store import open_store
    from training.relevance_head import answer_direction

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a known base's name or a chat GGUF path")
    ap.add_argument("--question", required=True)
    ap.add_argument("--store", help="a Chroma store to retrieve the question's passages from")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--passage", action="append", default=[], help="a passage given as text (repeat)")
    ap.add_argument("--title", help="the title of the --passage texts (default none)")
    ap.add_argument("--head", action="append", default=[], help="a relevance_head.json of this model (repeat)")
    ap.add_argument("--ask", action="append", help="an IsRel wording with {title}, {passage}, {question} (repeat)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    questions = ReflectionQuestions()
    passages = [(d.metadata.get("source", "?"), d.metadata.get("title"), d.page_content)
                for d in (open_store(args.store).similarity_search(args.question, k=args.k) if args.store else [])]
    passages += [("given", args.title, text) for text in args.passage]
    if not passages:
        ap.error("give --store or --passage")
    path = Path(model_path(args.model))
    states = LlamaCppHiddenStates(path, n_threads=args.threads)
    yes, no = (states.tokenize(w, add_bos=False)[0] for w in ("Yes", "No"))
    direction = answer_direction(path, yes, no)
    heads = {Path(h).parent.name or h: RelevanceHead.load(Path(h)) for h in args.head}
    for ask in args.ask or [questions.isrel]:
        prompts = [chatml(questions.system, fill(ask, ReaderTurn(args.question, "", title, text)))
                   for _, title, text in passages]
        h = states.last_hidden(prompts).astype(np.float64)
        print(f"-- {ask.splitlines()[-1]}")
        for (source, _, text), row in zip(passages, h):
            scores = {"untrained": 1 / (1 + np.exp(-(row @ direction)))}
            scores.update({name: 1 / (1 + np.exp(-(row @ head.weights.astype(np.float64) + head.bias)))
                           for name, head in heads.items()})
            shown = "  ".join(f"{name} {value:.3f}" for name, value in scores.items())
            print(f"{source:24} {shown}  | {text[:60]!r}")
    states.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
