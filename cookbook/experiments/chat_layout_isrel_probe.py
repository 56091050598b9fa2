"""Where in a chat layout can a frozen base's IsRel be read? A probe for the chat-layout build.

A frozen base with fitted reflection-token rows reads IsRel from its final hidden state at the first
position of the assistant's turn. This probe compares two user turns on the same labelled pairs:

* ``answer``: the answer request of the chat layout (``INSTRUCTION_FIRST_WITH_PASSAGE``),
  where a one-model build must read IsRel before writing its answer;
* ``judge``: the IsRel question (``ReflectionQuestions.isrel``), where the untrained ``Yes`` share is
  read (``RelevanceJudge``).

For each, a logistic head on the final hidden state (the untrained ``Yes``-minus-``No`` log-odds as one
free column) is fitted and scored by grouped 5-fold cross-validation (``training.relevance_head``).

    python -m cookbook.experiments.chat_layout_isrel_probe --model qwen2.5-coder-1.5b-instruct \\
        --train-file runs/qwen/data/all.jsonl --out runs/probe/chat-isrel --limit 300
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    from langchain_selfrag.graph.context import model_path
    from langchain_selfrag.jsonl import iter_jsonl
    from langchain_selfrag.lm.chat import chatml, fill
    from langchain_selfrag.lm.chat_questions import INSTRUCTION_FIRST_WITH_PASSAGE, ReflectionQuestions
    from langchain_selfrag.lm.llamacpp.hidden import LlamaCppHiddenStates
    from training.relevance_head import answer_direction, auc, contrast_scores, extract, fit_head, judge_pairs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--train-file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--layouts", default="answer,judge")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)

    questions = ReflectionQuestions()
    asks = {"answer": INSTRUCTION_FIRST_WITH_PASSAGE, "judge": questions.isrel}
    path = Path(model_path(args.model))
    pairs = judge_pairs((r for _, r in iter_jsonl(args.train_file)), seed=0)[: args.limit]
    labels = np.array([p["label"] for p in pairs])
    states = LlamaCppHiddenStates(path, n_threads=args.threads)
    yes, no = (states.tokenize(w, add_bos=False)[0] for w in ("Yes", "No"))
    direction = answer_direction(path, yes, no)
    report = {"model": args.model, "pairs": len(pairs), "relevant": int(labels.sum()), "layouts": {}}
    for layout in args.layouts.split(","):
        started = time.monotonic()
        ask = asks[layout]
        h = extract(states, lambda turn, ask=ask: chatml(questions.system, fill(ask, turn)), pairs,
                    Path(args.out) / Path(args.model).name.removesuffix(".gguf") / layout)
        seconds = time.monotonic() - started
        _, _, fit = fit_head(h, labels, [p["question"] for p in pairs], direction)
        held = fit.pop("held_out_scores")
        untrained = h.astype(np.float64) @ direction
        report["layouts"][layout] = {
            "yes_minus_no_auc": round(auc(labels, untrained), 4), "head_cv_auc": round(auc(labels, held), 4),
            "l2": fit["l2"], "contrasts": contrast_scores([p["variant"] for p in pairs], labels,
                                                          {"yes_minus_no": untrained, "head": held}),
            "extract_seconds": round(seconds, 1)}
        print(json.dumps({layout: report["layouts"][layout]}), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"{Path(args.model).name.removesuffix('.gguf')}.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
