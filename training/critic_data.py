"""Critic training data for the four aspects, labelled by gold rules or by a teacher chat model.

Cases are drawn from QA data with known passages and answers (SQuAD v2 JSON, Self-RAG JSONL with
``ctxs``) and from instruction data (no-retrieval tasks); :mod:`training.selfrag.critic_cases` says
which.

``--labeller gold`` applies :class:`~training.selfrag.labels.GoldLabeller`; ``--teacher MODULE:CLASS`` asks
any LangChain chat model (for example ``langchain_openai:ChatOpenAI`` with
``--teacher-kwargs '{"model": "Qwen2.5-72B-Instruct", "base_url": "http://localhost:8000/v1"}'``
for a vLLM server); cases it does not answer parseably are dropped and counted.

``python -m training.critic_data --squad squad.json --instructions tasks.jsonl --out critic.jsonl``
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Sequence

from .selfrag.critic_cases import build_cases, label_cases
from .selfrag.labels import GoldLabeller


def main(argv: Sequence[str] | None = None) -> int:
    from .core.jsonl import write_jsonl
    from .selfrag.bm25 import BM25Retriever
    from .selfrag.sources import add_source_arguments, load_sources
    from .selfrag.teacher import TeacherLabeller, load_chat_model

    ap = argparse.ArgumentParser(prog="python -m training.critic_data", description=__doc__.split("\n\n")[0])
    add_source_arguments(ap)
    ap.add_argument("--per-aspect", type=int, default=300)
    ap.add_argument("--teacher", help="LangChain chat model class as module:Class (default: gold labels)")
    ap.add_argument("--teacher-kwargs", default="{}", help="JSON keyword arguments for the teacher class")
    ap.add_argument("--max-concurrency", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    src = load_sources(ap, args)
    passages, questions, instructions = src.passages, src.questions, src.instructions
    retriever = BM25Retriever(passages) if passages else (lambda q, k: [])
    by_id = {p.id: p for p in passages}
    cases = build_cases(questions, instructions, retriever, by_id, random.Random(args.seed), args.per_aspect)
    if args.teacher:
        try:
            labeller = TeacherLabeller(load_chat_model(args.teacher, json.loads(args.teacher_kwargs)),
                                       max_concurrency=args.max_concurrency)
        except (ValueError, json.JSONDecodeError) as exc:
            ap.error(str(exc))
    else:
        labeller = GoldLabeller()
    rows, dropped = label_cases(cases, labeller)
    random.Random(args.seed).shuffle(rows)
    n = write_jsonl(args.out, rows)
    counts = Counter(r["aspect"] for r in rows)
    print(f"wrote {n} critic examples to {args.out}: {dict(counts)}; unlabelled (dropped): {dict(dropped)}", file=sys.stderr)
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
