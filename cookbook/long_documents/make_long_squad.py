"""Write a SQuAD-v2 JSON of long invented documents, for ``selfrag eval`` on long contexts.

Each document is the chronicle of a made-up town, assembled with a seeded RNG from templated
sentences (invented names, numbers and dates): about 7,000 SmolLM2 tokens by default, far more
than one evidence prompt holds, and it is a single SQuAD ``context``, so ``selfrag eval`` has to
chunk it. Five facts per town are planted at random places; each fact's answer occurs exactly once
in its document, so every question has one unambiguous answer with a correct ``answer_start``.

    python -m cookbook.long_documents.make_long_squad --out /tmp/long_squad.json --docs 6 --seed 0
    selfrag eval /tmp/long_squad.json --out /tmp/eval-long
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Characters per SmolLM2 token in these chronicles (measured 3.1-3.2: invented names split into many tokens).
CHARS_PER_TOKEN = 3.2
SYLLABLES = ("bar", "del", "fen", "gor", "hal", "ith", "jor", "kel", "lun", "mar", "nor", "ost", "pel", "quin",
             "ros", "sar", "tam", "ul", "vor", "wen", "yst", "zan", "ae", "bri", "cal", "dun", "ev", "fir")
TRADES = ("weaver", "cooper", "tanner", "carpenter", "potter", "smith", "baker", "miller", "mason", "dyer")
GOODS = ("wool", "salt", "barley", "flax", "timber", "honey", "cheese", "tallow", "oats", "hemp")
BUILDINGS = ("chapel", "granary", "mill", "tannery", "school house", "inn", "bakehouse", "toll house")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEATHER = ("poor", "fair", "plentiful", "late", "early", "wet", "meagre", "generous")
QUARTERS = ("east", "west", "upper", "lower", "old", "market")


def invented_word(rng: random.Random, low: int = 2, high: int = 3) -> str:
    """A capitalised made-up word of ``low``..``high`` syllables."""
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(low, high))).capitalize()


def invented_person(rng: random.Random) -> str:
    return f"{invented_word(rng, 2, 2)} {invented_word(rng, 2, 3)}"


def year(rng: random.Random) -> str:
    return str(rng.randint(1420, 1890))


# -- facts: (question, sentence) templates; the answer is drawn by the RNG ------------------------
@dataclass(frozen=True)
class FactTemplate:
    """A question and the sentence that answers it; ``{town}`` and ``{answer}`` are filled in."""

    question: str
    sentence: str
    answer: Callable[[random.Random], str]


FACTS: tuple[FactTemplate, ...] = (
    FactTemplate("Who founded the glassworks of {town}?",
                 "The glassworks of {town} was founded by {answer}, who had learned the craft far to the south.",
                 invented_person),
    FactTemplate("In what year was the bell tower of {town} completed?",
                 "The bell tower of {town} was completed in {answer}, after the old wooden one had burned.",
                 year),
    FactTemplate("Which river flows through {town}?",
                 "The river that flows through {town} is the {answer}, which freezes in hard winters.",
                 lambda rng: invented_word(rng, 2, 3)),
    FactTemplate("How many arches does the stone bridge of {town} have?",
                 "The stone bridge of {town} rests on {answer} arches of grey granite.",
                 lambda rng: str(rng.randint(13, 97))),
    FactTemplate("Who was the first mayor of {town}?",
                 "The first mayor of {town} was {answer}, elected by a show of hands in the square.",
                 invented_person),
)


@dataclass(frozen=True)
class Fact:
    question: str
    sentence: str
    answer: str


def draw_facts(rng: random.Random, town: str) -> list[Fact]:
    """One fact per template, redrawn until no answer occurs in another fact or twice in its own."""
    while True:
        facts = []
        for template in FACTS:
            answer = template.answer(rng)
            facts.append(Fact(template.question.format(town=town),
                              template.sentence.format(town=town, answer=answer), answer))
        if all(sum(f.sentence.count(g.answer) for f in facts) == 1 for g in facts):
            return facts


# -- filler: chronicle sentences that never touch a fact's subject ---------------------------------
FILLER: tuple[str, ...] = (
    "In {year} the harvest around {town} was {weather}, and {person} counted {n} carts of {goods} at the market.",
    "During the winter of {year}, {person} repaired the roof of the {building} in the {quarter} quarter.",
    "The council of {town} met {n} times in {year} to argue about the price of {goods}.",
    "{person}, a {trade} from {place}, settled in {town} in {year} and took on {n} apprentices.",
    "A storm in the spring of {year} damaged {n} houses in the {quarter} quarter of {town}.",
    "The chronicle records that {person} married {person2} in {month} {year}.",
    "In {month} {year} merchants from {place} brought {n} bales of {goods} to {town}.",
    "The {building} of {town} was whitewashed in {year} at the expense of {person}.",
    "That year {person} was fined {n} pennies for selling short measures of {goods}.",
    "In {year} the {trade}s of {town} chose {person} to speak for them before the council.",
    "A fever in the summer of {year} kept the {building} closed for {n} days.",
    "{person} left {town} for {place} in {month} {year} and was not heard of again.",
)


def filler_sentence(rng: random.Random, town: str) -> str:
    return rng.choice(FILLER).format(
        town=town, year=year(rng), n=rng.randint(2, 400), person=invented_person(rng),
        person2=invented_person(rng), place=invented_word(rng), trade=rng.choice(TRADES),
        goods=rng.choice(GOODS), building=rng.choice(BUILDINGS), month=rng.choice(MONTHS),
        weather=rng.choice(WEATHER), quarter=rng.choice(QUARTERS))


def filler(rng: random.Random, town: str, n_chars: int, avoid: list[str]) -> list[str]:
    """Filler sentences totalling about ``n_chars`` characters, none containing a string of ``avoid``."""
    sentences: list[str] = []
    total = 0
    while total < n_chars:
        sentence = filler_sentence(rng, town)
        if any(a in sentence for a in avoid):
            continue
        sentences.append(sentence)
        total += len(sentence) + 1
    return sentences


def paragraphs(rng: random.Random, sentences: list[str]) -> str:
    """Join sentences into paragraphs of 4 to 9 sentences."""
    out, start = [], 0
    while start < len(sentences):
        size = rng.randint(4, 9)
        out.append(" ".join(sentences[start:start + size]))
        start += size
    return "\n\n".join(out)


def make_document(rng: random.Random, tokens: int) -> tuple[str, str, list[Fact]]:
    """(town, chronicle text, facts) with each fact sentence at a random place of the filler."""
    town = invented_word(rng, 2, 3)
    facts = draw_facts(rng, town)
    sentences = filler(rng, town, int(tokens * CHARS_PER_TOKEN), [f.answer for f in facts])
    for fact in facts:
        sentences.insert(rng.randint(0, len(sentences)), fact.sentence)
    return town, f"The Chronicle of {town}\n\n{paragraphs(rng, sentences)}\n", facts


def squad_article(town: str, context: str, facts: list[Fact], doc: int) -> dict[str, Any]:
    """One SQuAD article: the whole chronicle as a single paragraph (context) with its questions."""
    qas = []
    for q, fact in enumerate(facts):
        if context.count(fact.answer) != 1:
            raise AssertionError(f"{town}: answer {fact.answer!r} occurs {context.count(fact.answer)} times")
        qas.append({"id": f"long-{doc}-{q}", "question": fact.question, "is_impossible": False,
                    "answers": [{"text": fact.answer, "answer_start": context.index(fact.answer)}]})
    return {"title": town, "paragraphs": [{"context": context, "qas": qas}]}


def make_long_squad(docs: int = 6, seed: int = 0, tokens: int = 7000) -> dict[str, Any]:
    """The SQuAD-v2 object: ``docs`` chronicles of about ``tokens`` tokens each, 5 questions each."""
    rng = random.Random(seed)
    articles = []
    towns: set[str] = set()
    while len(articles) < docs:
        town, context, facts = make_document(rng, tokens)
        if town in towns:  # two chronicles of one town would make its questions ambiguous
            continue
        towns.add(town)
        articles.append(squad_article(town, context, facts, len(articles)))
    return {"version": "v2.0", "data": articles}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a SQuAD-v2 JSON of long invented documents.")
    parser.add_argument("--out", required=True, help="output JSON file")
    parser.add_argument("--docs", type=int, default=6, help="number of documents (default 6)")
    parser.add_argument("--seed", type=int, default=0, help="RNG seed (default 0)")
    parser.add_argument("--tokens", type=int, default=7000, help="approximate tokens per document (default 7000)")
    args = parser.parse_args(argv)
    if args.docs < 1 or args.tokens < 100:
        parser.error("--docs must be at least 1 and --tokens at least 100")
    data = make_long_squad(args.docs, args.seed, args.tokens)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    chars = [len(a["paragraphs"][0]["context"]) for a in data["data"]]
    n_questions = sum(len(a["paragraphs"][0]["qas"]) for a in data["data"])
    print(f"wrote {out}: {len(chars)} documents ({min(chars)}-{max(chars)} characters), {n_questions} questions",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
