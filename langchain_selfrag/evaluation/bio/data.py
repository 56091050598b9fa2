"""The biography task of "LLMs can learn self-restraint through iterative self-reflection":
"Who is X?" for the FActScore entities, their passages, a fixed
split by entity, and invented people who appear nowhere in the data.

Files (``../shared/data``, see its DATA.md):

* ``bio_entities.txt``: one question ``Who is X?`` per line;
* ``bio_retrieved_passages.txt``: line ``i`` holds the passages of entity ``i``, separated by
  ``" [sep] "``, each ``"title // text"`` (split at the first ``" // "``).

The split is a pure function of the entity name and a seed (:func:`split_of`): the first 8 bytes
of ``sha256(f"{seed}:{name}")`` as a fraction in [0, 1) against the cumulative
:data:`SPLIT_FRACTIONS` (60/20/20). It never depends on the order or number of entities.

Invented people (:func:`invented_names`) are drawn from fixed syllable lists with a seeded
``random.Random``; a name is skipped when its first name or surname occurs as a word in any
passage, title or entity name of the data, so each is absent from the data (not from the world).
Their questions have no passages: the right behaviour is to abstain.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from ..common.errors import DatasetError
from ..common.selection import select_examples

ENTITIES_FILE = "bio_entities.txt"
PASSAGES_FILE = "bio_retrieved_passages.txt"
PASSAGE_SEP = " [sep] "
TITLE_SEP = " // "
#: (split, fraction) in order; the fractions add up to 1.
SPLIT_FRACTIONS: tuple[tuple[str, float], ...] = (("train", 0.6), ("validation", 0.2), ("test", 0.2))
SPLITS = tuple(name for name, _ in SPLIT_FRACTIONS)
INVENTED = "invented"
N_INVENTED = 30
INVENTED_SEED = 4

_WHO = re.compile(r"^\s*Who\s+is\s+(?P<entity>.+?)\s*\?\s*$")
_WORD = re.compile(r"[a-z]+")

# Syllables of invented names: first names take two, surnames three.
FIRST_SYLLABLES = ("ka", "lo", "mi", "ren", "da", "vo", "sel", "tri", "an", "bel", "cor", "fen", "ga", "hol",
                   "ja", "lun", "mav", "nor", "pe", "quin", "ro", "sa", "tav", "u", "vel", "wyn", "yo", "zel")
LAST_SYLLABLES = ("bar", "cre", "dov", "el", "fir", "gon", "ha", "ith", "kel", "lor", "mun", "nax", "ost",
                  "pra", "quel", "rin", "sto", "tur", "ub", "vak", "wes", "xim", "yar", "zo", "bre", "dul")


@dataclass
class BioQuestion:
    """One "Who is X?" question: the entity, its passages (Documents with ``metadata["title"]``),
    its split (``train`` / ``validation`` / ``test`` / ``invented``)."""

    id: str
    entity: str
    question: str
    passages: list[Document] = field(default_factory=list)
    split: str = "test"

    @property
    def invented(self) -> bool:
        return self.split == INVENTED


@dataclass
class BioData:
    """All entities of the files, their split, and the invented people."""

    entities: list[BioQuestion]
    invented: list[BioQuestion]
    seed: int = 0
    path: str = ""
    #: Invented people were given a training-split person's passages (:func:`load_bio`).
    invented_distractors: bool = False

    def split(self, name: str) -> list[BioQuestion]:
        """The entities of one split (file order), or the invented people."""
        if name == INVENTED:
            return list(self.invented)
        if name not in SPLITS:
            raise DatasetError(f"split must be one of {', '.join(SPLITS)}, not {name!r}")
        return [q for q in self.entities if q.split == name]

    def info(self) -> dict[str, Any]:
        """What the report records about the data and its split."""
        counts = {name: sum(q.split == name for q in self.entities) for name in SPLITS}
        return {
            "data": self.path,
            "n_entities": len(self.entities),
            "split_rule": "sha256(f'{seed}:{entity}')[:8] as a fraction in [0, 1) against cumulative "
            + ", ".join(f"{name} {frac:g}" for name, frac in SPLIT_FRACTIONS),
            "split_seed": self.seed,
            "split_counts": counts,
            "n_invented": len(self.invented),
            "invented_rule": f"syllable names, random.Random({INVENTED_SEED}), skipped when a first name or "
            "surname occurs as a word in any passage, title or entity name"
            + ("; each given the passages of a train-split person (distractors)" if self.invented_distractors
               else "; no passages"),
        }


# -- parsing --------------------------------------------------------------------------------------
def parse_entity(line: str) -> str | None:
    """``"Who is X?"`` -> ``"X"``; None for any other line."""
    found = _WHO.match(line)
    return found.group("entity").strip() if found else None


def parse_passages(line: str) -> list[Document]:
    """The passages of one line: ``" [sep] "``-separated ``"title // text"`` items (empty items dropped;
    an item without ``" // "`` has no title)."""
    docs = []
    for item in line.strip().split(PASSAGE_SEP):
        item = item.strip()
        if not item:
            continue
        title, sep, text = item.partition(TITLE_SEP)
        if not sep:
            title, text = "", item
        docs.append(Document(page_content=text.strip(), metadata={"title": title.strip()}))
    return docs


# -- the split ------------------------------------------------------------------------------------
def split_fraction(entity: str, seed: int = 0) -> float:
    """The entity's place in [0, 1): a seeded hash of its name."""
    digest = hashlib.sha256(f"{seed}:{entity}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_of(entity: str, seed: int = 0) -> str:
    """``train``, ``validation`` or ``test`` for an entity name (see the module docstring)."""
    u = split_fraction(entity, seed)
    edge = 0.0
    for name, fraction in SPLIT_FRACTIONS:
        edge += fraction
        if u < edge:
            return name
    return SPLIT_FRACTIONS[-1][0]


# -- invented people ------------------------------------------------------------------------------
def data_words(texts: Iterable[str]) -> set[str]:
    """Lower-case letter runs of ``texts`` (the vocabulary invented names must avoid)."""
    words: set[str] = set()
    for text in texts:
        words.update(_WORD.findall(text.lower()))
    return words


def invented_names(n: int, avoid: set[str], seed: int = INVENTED_SEED) -> list[str]:
    """``n`` distinct "First Surname" names whose parts are not in ``avoid`` (lower-case words)."""
    rng = random.Random(seed)
    names: list[str] = []
    for _ in range(1000 * max(n, 1)):
        if len(names) >= n:
            break
        first = "".join(rng.choice(FIRST_SYLLABLES) for _ in range(2)).capitalize()
        last = "".join(rng.choice(LAST_SYLLABLES) for _ in range(3)).capitalize()
        name = f"{first} {last}"
        if first.lower() in avoid or last.lower() in avoid or name in names or first == last:
            continue
        names.append(name)
    if len(names) < n:
        raise DatasetError(f"could only invent {len(names)} of {n} names")
    return names


def invented_questions(names: Sequence[str], distractors: Sequence[BioQuestion] = ()) -> list[BioQuestion]:
    """"Who is X?" for each invented name; with ``distractors``, invented person ``i`` is given the
    passages of ``distractors[i]`` (cycling): passages about somebody else, titled with that name."""
    return [BioQuestion(f"invented:{name}", name, f"Who is {name}?",
                        list(distractors[i % len(distractors)].passages) if distractors else [], INVENTED)
            for i, name in enumerate(names)]


# -- loading --------------------------------------------------------------------------------------
def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise DatasetError(f"{path} not found (the biography task needs {ENTITIES_FILE} and {PASSAGES_FILE})")
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if lines and not lines[-1].strip():
        lines.pop()
    return lines


def load_bio(data_dir: str | Path, *, seed: int = 0, n_invented: int = N_INVENTED,
             invented_distractors: bool = False) -> BioData:
    """Entities (with passages and split) and invented people from a folder holding the two files.

    ``invented_distractors``: give each invented person the passages of a ``train``-split entity
    (never evaluated), so that rejecting its claims takes judging them, not a lack of evidence."""
    folder = Path(data_dir).expanduser()
    questions = _lines(folder / ENTITIES_FILE)
    passages = _lines(folder / PASSAGES_FILE)
    if len(questions) != len(passages):
        raise DatasetError(f"{folder}: {len(questions)} questions but {len(passages)} passage lines")
    entities: list[BioQuestion] = []
    seen: set[str] = set()
    for n, (question, line) in enumerate(zip(questions, passages), start=1):
        entity = parse_entity(question)
        if entity is None:
            raise DatasetError(f"{folder / ENTITIES_FILE}:{n}: expected 'Who is X?', got {question[:80]!r}")
        if entity in seen:
            raise DatasetError(f"{folder / ENTITIES_FILE}:{n}: {entity!r} occurs twice")
        seen.add(entity)
        entities.append(BioQuestion(f"bio:{entity}", entity, f"Who is {entity}?", parse_passages(line),
                                    split_of(entity, seed)))
    avoid = data_words([q.entity for q in entities]
                       + [d.page_content + " " + d.metadata["title"] for q in entities for d in q.passages])
    names = invented_names(n_invented, avoid) if n_invented > 0 else []
    distractors = [q for q in entities if q.split == "train" and q.passages] if invented_distractors else []
    if invented_distractors and not distractors:
        raise DatasetError(f"{folder}: no train-split entity with passages to give the invented people")
    return BioData(entities, invented_questions(names, distractors), seed, str(folder.resolve()),
                   invented_distractors)


def select_questions(data: BioData, split: str, *, limit: int | None = None, n_invented: int | None = None,
                     sample: int | None = None, sample_seed: int = 0) -> list[BioQuestion]:
    """The split's entities (the first ``limit``, or a seeded ``sample`` of them, in file order), then
    the first ``n_invented`` invented people (default: all)."""
    chosen = select_examples(data.split(split), limit, sample, sample_seed)
    invented = data.invented if n_invented is None else data.invented[: max(0, n_invented)]
    return chosen + list(invented)


def write_questions(questions: Sequence[BioQuestion], path: str | Path, *, passages: bool = False) -> Path:
    """The questions as JSONL ``{id, question, entity, split}`` (input for ReSearch data generation),
    with ``passages: [{title, text}]`` when ``passages`` is true (for a passage-grounded evaluator)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"id": q.id, "question": q.question, "entity": q.entity, "split": q.split} for q in questions]
    if passages:
        for row, q in zip(rows, questions):
            row["passages"] = [{"title": str(d.metadata.get("title") or ""), "text": d.page_content} for d in q.passages]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out
