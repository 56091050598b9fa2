"""Which IsRel wording separates a relevance head's labelled pairs best, untrained: a validation probe.

Draws ``N`` of the pairs a relevance head was fitted on (``pairs.jsonl``; seed 0), asks each wording of
the IsRel question about them and prints the AUC of the chat GGUF's own Yes share over all pairs and
against each kind of negative (documentation near misses, SQuAD 2.0's unanswerable questions, other
passages of the same document). Each wording's scores are written to ``OUT`` as it finishes::

    python cookbook/experiments/isrel_wording_auc.py --pairs runs/relhead/q15/pairs.jsonl \\
        --model runs/relhead/q15/model.gguf -n 160 --out cookbook/experiments/isrel_probe/wording_auc_q15.json current this
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

_PASSAGE_FIRST = "Passage ({title}):\n{passage}\n\nQuestion: {question}\n\n"
#: The wordings compared (``current`` is ``ReflectionQuestions.isrel``).
WORDINGS = {
    "this": _PASSAGE_FIRST + "Does the passage state the answer to this question? Answer Yes or No.",
    "xml_this": ("<passage title=\"{title}\">\n{passage}\n</passage>\n\nQuestion: {question}\n\n"
                 "Does the passage state the answer to this question? Answer Yes or No."),
}
NEGATIVES = ("doc_near_miss", "squad_unanswerable_more", "isrel_negative", "doc_same_document")


def main(argv=None) -> int:
    from cookbook.experiments.isrel_probe import YesShare
    from langchain_selfrag.lm.chat_questions import ReflectionQuestions
    from training.relevance_head import auc

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", required=True, help="a relevance head's pairs.jsonl")
    ap.add_argument("--model", required=True, help="the chat GGUF")
    ap.add_argument("-n", type=int, default=160, help="pairs drawn (seed 0)")
    ap.add_argument("--out", required=True)
    ap.add_argument("wordings", nargs="+", choices=["current", *WORDINGS])
    args = ap.parse_args(argv)

    pairs = [json.loads(line) for line in Path(args.pairs).read_text(encoding="utf-8").splitlines() if line.strip()]
    order = list(range(len(pairs)))
    random.Random(0).shuffle(order)
    drawn = [pairs[i] for i in sorted(order[: args.n])]
    asks = {"current": ReflectionQuestions.isrel, **WORDINGS}
    reader = YesShare(Path(args.model))
    labels = np.array([p["label"] for p in drawn])
    variants = np.array([p["variant"] for p in drawn])
    positive = labels == 1
    report: dict = {"n": len(drawn), "positives": int(positive.sum()), "auc": {}, "u": {}}
    for name in args.wordings:
        share = reader.untrained(reader.hidden(asks[name], drawn))
        result = {"all": auc(labels, share)}
        for negative in NEGATIVES:
            mask = positive | (variants == negative)
            if (mask & ~positive).any():
                result[negative] = auc(labels[mask], share[mask])
        report["auc"][name] = {k: round(float(v), 4) for k, v in result.items()}
        report["u"][name] = share.tolist()
        print(name, report["auc"][name], flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report), encoding="utf-8")
    reader.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
