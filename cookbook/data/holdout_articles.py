"""Hold SQuAD articles out of a training file, so that they can validate the model trained on the rest::

    python -m cookbook.data.holdout_articles --data ../shared/data --train-file runs/g/all.jsonl \\
        --out runs/g7/all.jsonl --articles Packet_switching,1973_oil_crisis,Immune_system

A row is dropped when it touches a held-out article in any way: its id is one of the article's question
ids, its question is one of the article's questions, or a ``<paragraph>`` it shows starts with the
article's title. The trust suite's validation part can then ask those articles' questions
(``trust_suite --squad-holdout-articles``), which, unlike the train-split articles it ships with, have
unanswerable questions throughout.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from training.core.jsonl import read_jsonl, write_jsonl

_PARAGRAPH_TITLE = re.compile(r"<paragraph>([^\n]*)\n")


@dataclass
class ArticleIndex:
    """Where a SQuAD row may come from: question ids, question texts and passage titles, by article."""

    by_id: dict[str, str] = field(default_factory=dict)
    by_question: dict[str, str] = field(default_factory=dict)
    by_passage_title: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_squad(cls, squad: dict) -> ArticleIndex:
        index = cls()
        for article in squad["data"]:
            title = article["title"]
            index.by_passage_title[title.replace("_", " ")] = title
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    index.by_id[qa["id"]] = title
                    index.by_question[qa["question"].strip()] = title
        return index

    def articles_of(self, row: dict) -> set[str]:
        """The articles a training row touches (empty for rows of other sources)."""
        found = set()
        row_id = str(row.get("id", ""))
        for key in (row_id, row_id.split("/")[-1]):
            if key in self.by_id:
                found.add(self.by_id[key])
        question = str(row.get("instruction", "")).strip()
        if question in self.by_question:
            found.add(self.by_question[question])
        shown = f"{row.get('input', '')}{row.get('output', '')}"
        found.update(self.by_passage_title[t] for t in _PARAGRAPH_TITLE.findall(shown)
                     if t in self.by_passage_title)
        return found


def hold_out(rows: Iterable[dict], articles: set[str], index: ArticleIndex) -> tuple[list[dict], Counter]:
    """The rows that touch none of ``articles``, and how many were dropped per article."""
    kept, dropped = [], Counter()
    for row in rows:
        touched = index.articles_of(row) & articles
        if touched:
            dropped.update(touched)
        else:
            kept.append(row)
    return kept, dropped


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data", type=Path, help="folder with squad2_dev_half.json")
    ap.add_argument("--train-file", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--articles", required=True, help="comma-separated SQuAD article titles to hold out")
    args = ap.parse_args(argv)
    squad = json.loads((args.data / "squad2_dev_half.json").read_text(encoding="utf-8"))
    index = ArticleIndex.from_squad(squad)
    articles = {a.strip() for a in args.articles.split(",") if a.strip()}
    unknown = sorted(articles - set(index.by_passage_title.values()))
    if unknown:
        ap.error(f"not articles of squad2_dev_half.json: {', '.join(unknown)}")
    rows = list(read_jsonl(args.train_file))
    kept, dropped = hold_out(rows, articles, index)
    write_jsonl(args.out, kept)
    print(json.dumps({"rows_in": len(rows), "rows_out": len(kept), "dropped": dict(sorted(dropped.items()))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
