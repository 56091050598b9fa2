"""Invented tool documents with decision rules: IsRel pairs for "How does X decide whether to Y?".

Each document describes one invented tool (a search service, a help-desk bot, a cache, ...) in the
register of technical documentation: a sentence about the questions it answers and the passages or
documents it reads, two or three rules of the form "X retries a query only when the index returns no
passage", a mode sentence and a log sentence. A question asks how the tool decides one action:

- ``rule_stated`` (``[Relevant]``): the document holding that action's rule;
- ``rule_unstated`` (``[Irrelevant]``): the same document with that rule left out (its other rules,
  which decide other actions, stay), the near miss of a reader that answers from any rule it sees.

Two things the base judges badly are in every pair (cookbook/EXPERIMENTS.md, "Why the base misreads
the demo corpus"): the question's form, which it judges strictly even when a rule answers it, and
passages that talk about questions, answers and passages themselves. Names are syllable strings that
avoid every word of the project's invented corpora (:mod:`cookbook.data.gap_corpus`), and no sentence
of this project's own documentation is used::

    python -m cookbook.data.decision_rules --out runs/qwen/data/rules.jsonl --documents 120
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from langchain_selfrag.evaluation.bio.data import data_words
from training.core.jsonl import write_jsonl
from training.selfrag.qa_data import Passage

from .gap_corpus import _Names, invented_corpus_texts
from .varied_data import irrelevant_row, relevant_row


@dataclass(frozen=True)
class Action:
    """One thing a tool decides to do: the verb (base, third person), its object and its conditions."""

    base: str
    third: str
    obj: str
    conditions: tuple[str, ...]


#: Actions of tools that answer questions from documents ({n}: a score, {k}: a count).
ACTIONS = (
    Action("retrieve", "retrieves", "passages", ("the router's score for the question exceeds {n}",
                                                  "the question names something the model has not seen")),
    Action("answer", "answers", "a question", ("at least one retrieved passage is judged relevant above {n}",
                                               "the question matches a page of the manual")),
    Action("cite", "cites", "a document", ("the answer quotes at least {k} words of it",
                                           "the document's passage scored above {n}")),
    Action("rerank", "reranks", "the results", ("more than {k} documents match the query",
                                               "the first result scores below {n}")),
    Action("cache", "caches", "an answer", ("the same question was asked {k} times within an hour",
                                            "the answer's support score is above {n}")),
    Action("escalate", "escalates", "a question", ("no passage scores above {n}",
                                                   "the user asks the same question {k} times")),
    Action("rewrite", "rewrites", "the query", ("fewer than {k} passages are returned",
                                               "the query is shorter than {k} words")),
    Action("split", "splits", "a document", ("it holds more than {k} hundred tokens",
                                            "it has more than {k} headings")),
    Action("flag", "flags", "a reply", ("its support score falls below {n}",
                                        "it cites no passage")),
    Action("summarise", "summarises", "a thread", ("it holds more than {k} messages",
                                                  "the question asks for an overview")),
    Action("retry", "retries", "a request", ("the index returns no passage",
                                             "the server answers within {k} seconds")),
    Action("translate", "translates", "an answer", ("the question was not written in English",
                                                    "the user's profile sets a language")),
)
KINDS = ("search service", "help-desk bot", "question-answering library", "documentation assistant",
         "retrieval plugin", "support chatbot")
#: How a rule is stated ({e}: the tool, {v}: the verb, third person, {o}: the object, {c}: the condition).
RULES = (
    "{e} {v} {o} only when {c}.",
    "{e} {v} {o} if {c}, and not otherwise.",
    "By default {e} {v} {o} only if {c}.",
    "In automatic mode, {e} {v} {o} only when {c}, and never otherwise.",
)
#: How the question is asked ({e}: the tool, {b}: the verb's base form, {o}: the object).
QUESTIONS = (
    "How does {e} decide whether to {b} {o}?",
    "When does {e} {b} {o}?",
    "Under what condition does {e} {b} {o}?",
    "How does {e} decide when to {b} {o}?",
)
OPENINGS = (
    "{e} is a {kind} that answers questions about a team's documents.",
    "{e} is a {kind}: it reads the passages of indexed documents and answers questions from them.",
    "{e}, a {kind}, matches each question against the passages of its index and writes a short answer.",
)
TAILS = (
    "Every answer cites the passage it came from.",
    "Replies are written in the language of the question.",
    "{e} keeps a log of each query and its answer for {k} days.",
    "Mode strict {v} {o} for every question and mode off never does.",
    "Questions longer than {k} hundred characters are cut before they reach the model.",
)


def _fill(template: str, rng: random.Random, **fields: str) -> str:
    return template.format(n=f"0.{rng.randint(2, 8)}", k=str(rng.randint(2, 9)), **fields)


def rule_document(rng: random.Random, names: _Names, rules: int = 3) -> tuple[str, str, list[tuple[Action, str]], list[str]]:
    """An invented tool's name, its document's title, its rules (action, sentence) and other sentences."""
    tool = names.word(3)
    actions = rng.sample(ACTIONS, rules + 1)
    stated = [(a, _fill(rng.choice(RULES), rng, e=tool, v=a.third, o=a.obj, c=_fill(rng.choice(a.conditions), rng)))
              for a in actions[:rules]]
    spare = actions[rules]  # the mode sentence names an action no rule decides
    other = [_fill(rng.choice(OPENINGS), rng, e=tool, kind=rng.choice(KINDS))]
    other += [_fill(t, rng, e=tool, v=spare.third, o=spare.obj) for t in rng.sample(TAILS, 2)]
    return tool, f"{tool} {rng.choice(('manual', 'guide', 'reference', 'overview'))}", stated, other


def _text(opening: str, sentences: Sequence[str], rng: random.Random) -> str:
    body = list(sentences)
    rng.shuffle(body)
    return " ".join([opening, *body])


def rule_rows(n_documents: int, *, seed: int = 0, avoid: Sequence[str] = ()) -> list[dict]:
    """A ``rule_stated`` and a ``rule_unstated`` row per document, each on one of its actions."""
    rng = random.Random(seed)
    names = _Names(rng, data_words(avoid))
    rows = []
    for i in range(n_documents):
        tool, title, stated, other = rule_document(rng, names)
        action, sentence = rng.choice(stated)
        question = _fill(rng.choice(QUESTIONS), rng, e=tool, b=action.base, o=action.obj)
        rest = [s for a, s in stated if a is not action] + other[1:]
        full = Passage(f"rules/{i}", title, _text(other[0], [sentence, *rest], rng), article=f"rules:{tool}")
        without = Passage(f"rules/{i}-", title, _text(other[0], rest, rng), article=f"rules:{tool}")
        rows.append(relevant_row(question, sentence, full, "rule_stated"))
        rows.append(irrelevant_row(question, without, sentence, "rule_unstated"))
    for i, row in enumerate(rows):
        row["id"] = f"{row['variant']}/{i}"
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cookbook.data.decision_rules", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSONL file to write (a .json summary is written beside it)")
    ap.add_argument("--documents", type=int, default=120, help="invented documents, two rows each (default 120)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.documents < 1:
        ap.error("--documents must be at least 1")
    rows = rule_rows(args.documents, seed=args.seed, avoid=invented_corpus_texts())
    out = Path(args.out)
    write_jsonl(out, rows)
    summary = {"examples": len(rows), "variants": dict(Counter(r["variant"] for r in rows)), "seed": args.seed}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
