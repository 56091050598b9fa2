"""Generator training data: the paper's Algorithm 3 (:mod:`training.selfrag.algorithm3`) over SQuAD
and instruction files, with the gold labeller or a trained critic as critic and BM25 as retriever.

``python -m training.generator_data --squad squad.json --instructions tasks.jsonl --out generator.jsonl``
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .selfrag.algorithm3 import Algorithm3, SourceExample


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: Algorithm 3 over a SQuAD file and/or instruction JSONL with a gold or trained critic."""
    from .core.jsonl import write_jsonl
    from .selfrag.bm25 import BM25Retriever
    from .selfrag.labels import GoldLabeller, LMCriticLabeller
    from .selfrag.sources import add_source_arguments, load_sources

    ap = argparse.ArgumentParser(prog="python -m training.generator_data", description=main.__doc__)
    add_source_arguments(ap)
    ap.add_argument("--critic", default="gold", help="'gold' or the path of a trained critic model (HF dir or GGUF)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--contrast", type=int, default=0, help="irrelevant-passage copies per retrieval example")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    src = load_sources(ap, args)
    passages = src.passages
    sources = [SourceExample(q.question, q.answers[0], kind="qa", answers=q.answers, id=q.id) for q in src.questions if q.answerable and q.answers]
    sources += [SourceExample(i.instruction, i.output, input=i.input, kind="instruction", id=i.id) for i in src.instructions]
    if not sources:
        ap.error("no answerable question or instruction in the given files")
    if args.critic == "gold":
        critic = GoldLabeller()
    else:
        from langchain_selfrag.lm import load_reflection_lm

        critic = LMCriticLabeller(load_reflection_lm(args.critic))
    retriever = BM25Retriever(passages) if passages else (lambda q, k: [])
    rows = Algorithm3(critic, retriever, k=args.k, contrast=args.contrast, seed=args.seed).run(sources)
    n = write_jsonl(args.out, rows)
    print(f"wrote {n} generator examples to {args.out}")
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
