"""Invented documents with questions about details they state and details they lack (seeded).

Each document describes one invented place or person in a few sentences, each sentence stating
one detail (who designed it, when it opened, how long it is, ...). An answerable question asks a
stated detail; a *gap* question asks a detail of the same kind of answer that the document does
not state ("Who repaired X?" of a document that names only X's designer), the near miss a
retrieval-augmented model answers by copying the name it has. The names are syllable strings that
leave out every word of the project's own invented corpora (``avoid``), so no validation or test
document is reproduced.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from langchain_selfrag.evaluation.bio.data import data_words

#: Syllables of invented names (capitalised when joined).
SYLLABLES = ("ar", "bel", "cor", "dun", "el", "fen", "gar", "hal", "is", "jor", "kel", "lor", "mar", "nes",
             "or", "pel", "quin", "ros", "sal", "tor", "ul", "ven", "wes", "yar", "zor", "ban", "cal", "dre",
             "fal", "gil", "hob", "lan", "mor", "nim", "pra", "ril", "sten", "thal", "vor", "wyn")
ROLES = ("engineer", "architect", "mason", "merchant", "carpenter", "surveyor", "painter", "teacher")
PLACE_KINDS = ("Bridge", "Mill", "Museum", "Tower", "Theatre", "Abbey", "Canal", "Harbour", "Market", "Hall",
               "Library", "Chapel", "Garden", "Lighthouse", "Station")
DISASTERS = ("flood", "fire", "storm", "war")
MATERIALS = ("granite", "red brick", "oak", "limestone", "iron", "slate")
PROFESSIONS = ("painter", "composer", "botanist", "sailor", "poet", "clockmaker", "surgeon", "weaver")


@dataclass(frozen=True)
class Detail:
    """One kind of fact: its answer type, the sentence stating it and the question asking it."""

    key: str
    kind: str  # what the answer is: person, year, number, place, thing
    sentence: str
    question: str
    rephrasings: tuple[str, ...] = ()  # other ways to ask it (used by ``varied`` corpora)

    def ask(self, rng: random.Random | None, **fill: str) -> str:
        """The question filled in; with ``rng``, one of its phrasings drawn at random."""
        template = rng.choice((self.question, *self.rephrasings)) if rng is not None else self.question
        return template.format(**fill)


#: Details of a place ({e}: its name, {x}: the answer, {r}: a role, {d}: a disaster).
PLACE_DETAILS = (
    Detail("designer", "person", "It was designed by the {r} {x}.", "Who designed {e}?"),
    Detail("founder", "person", "It was founded by the {r} {x}.", "Who founded {e}?"),
    Detail("repairer", "person", "The {r} {x} repaired it after the {d}.", "Who repaired {e} after the {d}?"),
    Detail("keeper", "person", "Its keeper today is {x}.", "Who is the keeper of {e} today?"),
    Detail("painter", "person", "Its walls were painted by {x}.", "Who painted the walls of {e}?"),
    Detail("opened", "year", "It opened in {x}.", "When did {e} open?"),
    Detail("rebuilt", "year", "It was rebuilt in {x} after a {d}.", "When was {e} rebuilt?"),
    Detail("closed", "year", "It closed to the public in {x}.", "When did {e} close to the public?"),
    Detail("town", "place", "{e} stands in the town of {x}.", "In which town is {e}?"),
    Detail("river", "place", "It lies beside the river {x}.", "Beside which river does {e} lie?"),
    Detail("length", "number", "It is {x} long.", "How long is {e}?"),
    Detail("height", "number", "It is {x} tall.", "How tall is {e}?"),
    Detail("visitors", "number", "About {x} people visit it each year.", "How many people visit {e} each year?"),
    Detail("cost", "number", "It cost {x} to build.", "How much did {e} cost to build?"),
    Detail("material", "thing", "It is built of {x}.", "What is {e} built of?"),
)
#: More details of a place, with rephrased questions: a ``varied`` corpus asks in more ways than one
#: template per detail, so that a gap is told by what the document states, not by the question's form.
MORE_PLACE_DETAILS = (
    Detail("tree", "thing", "An old {x} tree grows beside it.", "Which tree grows beside {e}?",
           ("What kind of tree grows beside {e}?",)),
    Detail("goods", "thing", "It sells {x}.", "What does {e} sell?", ("What can you buy at {e}?",)),
    Detail("rooms", "number", "It has {x} rooms.", "How many rooms does {e} have?",
           ("What is the number of rooms in {e}?",)),
    Detail("staff", "number", "It employs {x} people.", "How many people work at {e}?",
           ("How many staff does {e} employ?",)),
    Detail("owner", "person", "It belongs to {x}.", "Who owns {e}?", ("Who does {e} belong to?",)),
    Detail("gate", "thing", "Its gate is painted {x}.", "What colour is the gate of {e}?",
           ("Which colour is {e}'s gate painted?",)),
)
#: Rephrased questions of the base details (``varied`` corpora).
REPHRASINGS = {
    "designer": ("Who was the designer of {e}?", "Which {r} designed {e}?"),
    "founder": ("Who was the founder of {e}?",),
    "opened": ("In which year did {e} open?", "What year was {e} opened?"),
    "town": ("Which town is {e} in?",),
    "length": ("What is the length of {e}?",),
    "height": ("What is the height of {e}?",),
    "visitors": ("How many visitors does {e} get a year?",),
    "material": ("What was used to build {e}?",),
    "born": ("In which year was {e} born?",),
    "birthplace": ("Where did {e} grow up?",),
    "teacher": ("Who was {e}'s teacher?",),
    "profession": ("What was {e}'s job?",),
    "works": ("How many works did {e} produce?",),
}

#: Details of a person ({e}: the name, {x}: the answer).
PERSON_DETAILS = (
    Detail("born", "year", "{e} was born in {x}.", "When was {e} born?"),
    Detail("died", "year", "{e} died in {x}.", "When did {e} die?"),
    Detail("birthplace", "place", "{e} grew up in the town of {x}.", "In which town did {e} grow up?"),
    Detail("school", "place", "{e} studied at the {x}.", "Which academy did {e} attend?"),
    Detail("teacher", "person", "{e} was taught by {x}.", "Who taught {e}?"),
    Detail("spouse", "person", "{e} married {x}.", "Whom did {e} marry?"),
    Detail("profession", "thing", "{e} worked as a {x}.", "What did {e} work as?"),
    Detail("prize", "thing", "{e} won the {x}.", "Which prize did {e} win?"),
    Detail("works", "number", "{e} made {x} works in all.", "How many works did {e} make?"),
)
#: More details of a person, with rephrased questions (``varied`` corpora).
MORE_PERSON_DETAILS = (
    Detail("instrument", "thing", "{e} played the {x}.", "Which instrument did {e} play?",
           ("What instrument did {e} play?",)),
    Detail("children", "number", "{e} had {x} children.", "How many children did {e} have?",
           ("How many children were born to {e}?",)),
    Detail("friend", "person", "{e} wrote often to {x}.", "To whom did {e} often write?",
           ("Who did {e} write to often?",)),
)


@dataclass(frozen=True)
class GapDocument:
    """An invented document, its answerable questions (question, answer) and its gap questions."""

    source: str
    title: str
    text: str
    answerable: list[tuple[str, str]] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)


class _Names:
    """Seeded invented names, never a word of ``avoid`` and never twice."""

    def __init__(self, rng: random.Random, avoid: set[str]) -> None:
        self.rng, self.avoid, self.used = rng, set(avoid), set()

    def word(self, syllables: int) -> str:
        for tries in range(1, 10_000):  # a syllable more every 100 tries, when the short names run out
            word = "".join(self.rng.choice(SYLLABLES) for _ in range(syllables + tries // 100))
            if word not in self.avoid and word not in self.used and len(word) > 3:
                self.used.add(word)
                return word.capitalize()
        raise RuntimeError("no invented name left")

    def person(self) -> str:
        return f"{self.word(2)} {self.word(3)}"


#: Numbers of each numeric detail: (low, high, unit after the number).
NUMBERS = {"length": (20, 4000, " metres"), "height": (6, 140, " metres"), "visitors": (200, 90000, ""),
           "cost": (400, 90000, " pounds"), "works": (3, 400, ""), "rooms": (3, 300, ""), "staff": (2, 900, ""),
           "children": (1, 12, "")}
#: Answers of the details that are drawn from a list.
THINGS = {"profession": PROFESSIONS, "material": MATERIALS, "tree": ("oak", "ash", "yew", "elm", "birch", "alder"),
          "goods": ("cheese", "rope", "candles", "wool", "honey", "lace"),
          "gate": ("green", "blue", "red", "black", "white", "yellow"),
          "instrument": ("cello", "harp", "organ", "flute", "violin", "oboe")}


def _value(detail: Detail, names: _Names, rng: random.Random) -> str:
    if detail.key == "school":
        return f"{names.word(2)} Academy"
    if detail.key == "prize":
        return f"{names.word(2)} Prize"
    if detail.key in THINGS:
        return rng.choice(THINGS[detail.key])
    if detail.kind == "number":
        low, high, unit = NUMBERS[detail.key]
        return f"{rng.randint(low, high):,}{unit}"
    if detail.kind == "year":
        return str(rng.randint(1650, 1990))
    return names.person() if detail.kind == "person" else names.word(2)


def _varied(base: Sequence[Detail], more: Sequence[Detail]) -> tuple[Detail, ...]:
    return (*(replace(d, rephrasings=REPHRASINGS.get(d.key, ())) for d in base), *more)


#: (person?, varied?) -> the details a document draws from.
DETAILS = {(False, False): PLACE_DETAILS, (True, False): PERSON_DETAILS,
           (False, True): _varied(PLACE_DETAILS, MORE_PLACE_DETAILS),
           (True, True): _varied(PERSON_DETAILS, MORE_PERSON_DETAILS)}


def gap_document(rng: random.Random, names: _Names, stated: int = 4, varied: bool = False) -> GapDocument:
    """One document stating ``stated`` details, with a question on each and gap questions on the
    unstated details whose answer is of a kind the document states (the tempting near misses).
    ``varied``: more kinds of detail, each question in one of several phrasings."""
    person = rng.random() < 0.3
    details = list(DETAILS[person, varied])
    ask = rng if varied else None
    entity = names.person() if person else f"the {names.word(2)} {rng.choice(PLACE_KINDS)}"
    chosen = rng.sample(details, stated)
    role, disaster = rng.choice(ROLES), rng.choice(DISASTERS)
    sentences, answerable = [], []
    for detail in chosen:
        value = _value(detail, names, rng)
        fill = {"e": entity, "x": value, "r": role, "d": disaster}
        sentences.append(_capital(detail.sentence.format(**fill)))
        answerable.append((detail.ask(ask, **fill), value))
    kinds = {d.kind for d in chosen}
    gaps = [_capital(d.ask(ask, e=entity, x="", r=role, d=disaster)) for d in details
            if d not in chosen and d.kind in kinds]
    sentences = _name_first(sentences, entity, rng.choice(("She", "He")) if person else None)
    title = _capital(entity.removeprefix("the "))
    return GapDocument(re.sub(r"\W+", "_", title.lower()) + ".md", title, " ".join(sentences),
                       [(_capital(q), a) for q, a in answerable], gaps)


def _name_first(sentences: list[str], entity: str, pronoun: str | None) -> list[str]:
    """The entity named in the first sentence ("It opened" -> "The X Bridge opened"); for a person,
    later sentences use ``pronoun`` instead of the name."""
    first = re.sub(r"^Its\b", f"{_capital(entity)}'s", sentences[0])
    first = re.sub(r"^It\b", _capital(entity), first)
    if entity.lower() not in first.lower():  # "The mason X repaired it" -> "... repaired the Y Mill"
        first = re.sub(r"\bit\b", entity, first, count=1)
    rest = [re.sub(rf"^{re.escape(_capital(entity))}\b", pronoun, s) if pronoun else s for s in sentences[1:]]
    return [first, *rest]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def gap_corpus(n: int, seed: int = 0, avoid: Sequence[str] = (), varied: bool = False) -> list[GapDocument]:
    """``n`` seeded documents whose invented names use no word of the ``avoid`` texts (``varied``:
    see :func:`gap_document`)."""
    rng = random.Random(seed)
    names = _Names(rng, data_words(avoid))
    return [gap_document(rng, names, varied=varied) for _ in range(n)]


def invented_corpus_texts() -> list[str]:
    """Every text of the project's invented corpora (validation and test), which training must not echo
    (the ``avoid`` of :func:`gap_corpus`)."""
    from cookbook.selfrag_smollm2.realworld import CORPORA

    return [path.read_text(encoding="utf-8") for path in CORPORA.values()]
