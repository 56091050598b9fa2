"""The QA corpora and instruction files that the data-building commands read (shared options)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from .qa_data import InstructionItem, Passage, QAItem, load_instructions, load_selfrag_qa, load_squad


@dataclass
class Sources:
    """Passages (the retrieval corpus), QA items and instruction tasks named on the command line."""

    passages: list[Passage] = field(default_factory=list)
    questions: list[QAItem] = field(default_factory=list)
    instructions: list[InstructionItem] = field(default_factory=list)


def add_source_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--squad", help="SQuAD v1/v2 JSON (its paragraphs form the corpus)")
    ap.add_argument("--articles", help="comma-separated article titles of --squad to use (default all)")
    ap.add_argument("--selfrag-qa", help="Self-RAG JSONL with question/answers/ctxs (ctxs form the corpus)")
    ap.add_argument("--instructions", action="append", default=[], help="instruction JSONL (repeatable)")


def load_sources(ap: argparse.ArgumentParser, args: argparse.Namespace) -> Sources:
    """Load what ``args`` names; an argparse error when it names nothing."""
    out = Sources()
    if args.squad:
        corpus = load_squad(args.squad)
        if args.articles:
            corpus = corpus.subset(args.articles.split(","))
        out.passages += corpus.passages
        out.questions += corpus.questions
    if args.selfrag_qa:
        for q in load_selfrag_qa(args.selfrag_qa):
            out.passages += q.ctxs
            out.questions.append(q)
    out.instructions = [i for path in args.instructions for i in load_instructions(path)]
    if not out.questions and not out.instructions:
        ap.error("give at least one of --squad, --selfrag-qa, --instructions")
    return out
