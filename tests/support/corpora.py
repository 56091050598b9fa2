"""Invented corpora for end-to-end tests: facts no model or search index can know.

Every fact below is made up (places, people, inventions), so a correct answer can only come from
the indexed files. Each gold answer occurs in exactly one document (checked by
``tests/integration_tests/test_bundled_end_to_end.py``), and the answer strings are short.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

#: File name -> text of the acceptance corpus (markdown and plain text, as a user's docs folder).
DOCUMENTS: dict[str, str] = {
    "zorblatt_bridge.md": (
        "# The Zorblatt Bridge\n\n"
        "The Zorblatt Bridge is a stone arch bridge in the market town of Quillmere. "
        "It crosses the River Fennow in seven low arches.\n\n"
        "The bridge was designed by the engineer Ottoline Varga, who had built canal locks before "
        "she won the commission. Work began after the great flood destroyed the old ferry landing.\n\n"
        "The Zorblatt Bridge opened to traffic in 1873. On opening day the mayor crossed it "
        "riding a painted ox, a custom the town repeats every spring.\n"
    ),
    "brindlecap.txt": (
        "Brindlecap is a small island kingdom in the Sorrow Sea, far from any mainland harbour.\n\n"
        "The capital of Brindlecap is Tessaloo, a walled port on the island's northern cape. "
        "The royal court has met there for four centuries.\n\n"
        "Farmers on Brindlecap grow moonpears, a pale fruit that ripens only in the cold months. "
        "Dried moonpears are the island's main export.\n\n"
        "Brindlecap pays with its own currency, the grelt, a square coin with a hole in the middle.\n"
    ),
    "velliphone.md": (
        "# The velliphone\n\n"
        "The velliphone is a bowed string instrument invented by the instrument maker Anselm Krook "
        "in his workshop at Dunmarrow.\n\n"
        "A velliphone has 19 strings: seven are bowed and the others ring in sympathy.\n\n"
        "The body of the velliphone is carved from glimmerash, a light wood that Krook chose "
        "because it does not crack in damp concert halls.\n"
    ),
    "marrowick_observatory.txt": (
        "The Marrowick Observatory stands on the summit of Mount Pellam, which rises 3,208 metres "
        "above the sea.\n\n"
        "The observatory was founded by the astronomer Hedda Sorn, who paid for the first telescope "
        "with the prize money of a chess tournament.\n\n"
        "Astronomers at Marrowick discovered the comet Ulvane, a faint green comet that returns "
        "every forty-one years.\n"
    ),
    "snorrel_stew.md": (
        "# Snorrel stew\n\n"
        "Snorrel stew is the traditional dish of the Kelvarra valley. Its main ingredient is "
        "tarrow root, simmered for a whole day with salt and river herbs.\n\n"
        "The stew is served at the Lantern Thaw, the valley festival that marks the end of winter.\n\n"
        "The first snorrel cookbook was written by the chef Brannoc Idris, who ran the inn at the "
        "head of the valley.\n"
    ),
}


@dataclass(frozen=True)
class Question:
    """A question about the corpus: its gold answer and the file holding it (None if unanswerable)."""

    question: str
    answer: str | None = None
    source: str | None = None


#: Answerable questions: the gold answer occurs (normalised) in ``source`` and in no other file.
ANSWERABLE: tuple[Question, ...] = (
    Question("Who designed the Zorblatt Bridge?", "Ottoline Varga", "zorblatt_bridge.md"),
    Question("In what year did the Zorblatt Bridge open?", "1873", "zorblatt_bridge.md"),
    Question("Which river does the Zorblatt Bridge cross?", "Fennow", "zorblatt_bridge.md"),
    Question("What is the capital of Brindlecap?", "Tessaloo", "brindlecap.txt"),
    Question("What fruit do farmers on Brindlecap grow?", "moonpears", "brindlecap.txt"),
    Question("What is the currency of Brindlecap called?", "grelt", "brindlecap.txt"),
    Question("Who invented the velliphone?", "Anselm Krook", "velliphone.md"),
    Question("How many strings does a velliphone have?", "19", "velliphone.md"),
    Question("What wood is the body of the velliphone carved from?", "glimmerash", "velliphone.md"),
    Question("How tall is Mount Pellam?", "3,208", "marrowick_observatory.txt"),
    Question("Who founded the Marrowick Observatory?", "Hedda Sorn", "marrowick_observatory.txt"),
    Question("Which comet was discovered at the Marrowick Observatory?", "Ulvane", "marrowick_observatory.txt"),
    Question("What is the main ingredient of snorrel stew?", "tarrow root", "snorrel_stew.md"),
    Question("At which festival is snorrel stew served?", "Lantern Thaw", "snorrel_stew.md"),
    Question("Who wrote the first snorrel cookbook?", "Brannoc Idris", "snorrel_stew.md"),
)

#: Questions about the corpus's own subjects whose answers no document gives.
UNANSWERABLE: tuple[Question, ...] = (
    Question("How many people live in Tessaloo?"),
    Question("Who painted the ceiling of the Marrowick Observatory?"),
    Question("What is the lowest note a velliphone can play?"),
)


def write_corpus(root: Path) -> Path:
    """Write :data:`DOCUMENTS` into the new folder ``root`` and return it."""
    root.mkdir(parents=True)
    for name, text in DOCUMENTS.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def invented_corpus(root: Path) -> Path:
    """Three tiny files (txt, md, a two-line jsonl: 4 chunks) for the store and Chroma server tests.

    Facts no model or search index can know, so every hit comes from this folder.
    """
    root.mkdir()
    (root / "travik.txt").write_text("Mount Travik is 4123 metres tall. Ilsa Brenner first climbed it in 1911.\n")
    (root / "zorblat.md").write_text("# Zorblat\n\nEvery March the town of Quenby holds the Zorblat festival, "
                                     "where people race wooden geese down the river.\n")
    (root / "kessar.jsonl").write_text(
        json.dumps({"title": "Kessar", "text": "Coins of the Kessari empire were struck from tin and cobalt."}) + "\n"
        + json.dumps({"title": "Kessar", "text": "The Kessari capital, Ombrel, stood on three hills."}) + "\n")
    return root
