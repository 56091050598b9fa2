"""How far each biography judge agrees with hand-labelled claims (issue 26: judge the judges).

A labelled-claims file is JSONL, one record per entity::

    {"entity", "split": "validation"|"test", "passages": [{"title", "text"}],
     "claims": [{"claim", "label": true|false, "reason"}]}

with the passages the claims are judged against (the entity's retrieved passages), so that the
file stands on its own. :func:`agreement` runs a judge (``judge(entity, claims, passages)``, see
:mod:`.base`) over every claim and counts agreement with the labels, per split and overall; a
claim the judge leaves unlabelled (None) counts as a disagreement and in ``unjudged``.

``python -m langchain_selfrag.evaluation.bio.judges --claims tests/data/bio_claims.jsonl`` prints
the agreement of the lexical judge, the reflection model's IsSup judge (``--model``, default the
bundled model; ``--no-issup`` skips it) and a chat judge (``--chat-model``), and writes it as JSON
with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from tqdm.auto import tqdm

from ....jsonl import iter_jsonl
from ...common.models import chat_model, default_model, load_model
from .base import describe
from .chat import ChatJudge
from .issup import IsSupJudge
from .overlap import OverlapJudge

LABEL_SPLITS = ("validation", "test")


class LabelError(ValueError):
    """A labelled-claims file is malformed."""


@dataclass(frozen=True)
class LabelledClaim:
    """One hand-labelled claim about an entity, with the passages it is judged against."""

    entity: str
    split: str
    claim: str
    label: bool
    reason: str
    passages: tuple[Document, ...]


def _documents(value: Any, where: str) -> tuple[Document, ...]:
    if not isinstance(value, list):
        raise LabelError(f"{where}: 'passages' must be a list of {{title, text}}")
    docs = []
    for item in value:
        if not isinstance(item, Mapping) or not isinstance(item.get("text"), str):
            raise LabelError(f"{where}: every passage needs a 'text' string")
        docs.append(Document(page_content=item["text"], metadata={"title": str(item.get("title") or "")}))
    return tuple(docs)


def parse_labelled(record: Mapping[str, Any], where: str = "record") -> list[LabelledClaim]:
    """The claims of one entity record; :class:`LabelError` when it is malformed."""
    entity, split = record.get("entity"), record.get("split")
    if not isinstance(entity, str) or not entity.strip():
        raise LabelError(f"{where}: no 'entity'")
    if split not in LABEL_SPLITS:
        raise LabelError(f"{where}: 'split' must be one of {', '.join(LABEL_SPLITS)}, not {split!r}")
    passages = _documents(record.get("passages"), where)
    claims = record.get("claims")
    if not isinstance(claims, list) or not claims:
        raise LabelError(f"{where}: no 'claims' list")
    out = []
    for n, item in enumerate(claims):
        if not isinstance(item, Mapping) or not isinstance(item.get("claim"), str) or not item["claim"].strip():
            raise LabelError(f"{where}: claim {n} has no 'claim' text")
        if not isinstance(item.get("label"), bool):
            raise LabelError(f"{where}: claim {n} needs a true/false 'label'")
        out.append(LabelledClaim(entity, split, item["claim"].strip(), item["label"], str(item.get("reason") or ""),
                                 passages))
    return out


def load_labelled(path: str | Path) -> list[LabelledClaim]:
    """Every labelled claim of a file, in file order."""
    claims: list[LabelledClaim] = []
    for lineno, record in iter_jsonl(Path(path), LabelError):
        claims += parse_labelled(record, f"{path}:{lineno}")
    if not claims:
        raise LabelError(f"{path}: no labelled claims")
    return claims


def by_entity(claims: Iterable[LabelledClaim]) -> dict[str, list[LabelledClaim]]:
    """Claims grouped by entity, in first-seen order."""
    groups: dict[str, list[LabelledClaim]] = {}
    for c in claims:
        groups.setdefault(c.entity, []).append(c)
    return groups


def verdicts(judge: Any, claims: Sequence[LabelledClaim], *, progress: bool = True) -> list[bool | None]:
    """The judge's label of every claim (one judge call per entity, with a progress bar: a model
    judge scores every claim against every passage), in the order of ``claims``."""
    out: dict[int, bool | None] = {}
    index = {id(c): i for i, c in enumerate(claims)}
    groups = by_entity(claims)
    for entity, group in tqdm(groups.items(), total=len(groups), unit="entity", disable=not progress,
                              desc=f"judge agreement ({getattr(judge, 'name', type(judge).__name__)})"):
        labels = list(judge(entity, [c.claim for c in group], group[0].passages))
        if len(labels) != len(group):
            raise ValueError(f"the judge gave {len(labels)} labels for {len(group)} claims about {entity}")
        for c, label in zip(group, labels):
            out[index[id(c)]] = label
    return [out[i] for i in range(len(claims))]


def counts(labels: Sequence[bool], predicted: Sequence[bool | None]) -> dict[str, Any]:
    """Agreement counts of predictions against labels (pure): accuracy, the confusion matrix,
    and the share of true claims called true (``recall_true``) and of false claims called false
    (``recall_false``)."""
    if len(labels) != len(predicted):
        raise ValueError(f"{len(labels)} labels but {len(predicted)} predictions")
    tp = sum(1 for y, p in zip(labels, predicted) if y and p is True)
    fn = sum(1 for y, p in zip(labels, predicted) if y and p is False)
    tn = sum(1 for y, p in zip(labels, predicted) if not y and p is False)
    fp = sum(1 for y, p in zip(labels, predicted) if not y and p is True)
    n, positives = len(labels), sum(1 for y in labels if y)
    return {"n": n, "agree": tp + tn, "accuracy": (tp + tn) / n if n else None,
            "true_positive": tp, "false_negative": fn, "true_negative": tn, "false_positive": fp,
            "unjudged": sum(1 for p in predicted if p is None),
            "recall_true": tp / positives if positives else None,
            "recall_false": tn / (n - positives) if n - positives else None}


def agreement(judge: Any, claims: Sequence[LabelledClaim]) -> dict[str, Any]:
    """The judge's agreement with the labels: ``all`` and per split, with its name and description."""
    predicted = verdicts(judge, claims)
    out: dict[str, Any] = {"judge": getattr(judge, "name", type(judge).__name__), "description": describe(judge),
                           "all": counts([c.label for c in claims], predicted)}
    for split in LABEL_SPLITS:
        pairs = [(c.label, p) for c, p in zip(claims, predicted) if c.split == split]
        if pairs:
            out[split] = counts([y for y, _ in pairs], [p for _, p in pairs])
    return out


def agreement_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown rows: each judge's agreement (overall, validation, test) and its errors."""
    if not rows:
        return []
    lines = ["| judge | agree (all) | validation | test | true called true | false called false | unjudged |",
             "|---|---:|---:|---:|---:|---:|---:|"]

    def pct(entry: Mapping[str, Any] | None, key: str = "accuracy") -> str:
        value = (entry or {}).get(key)
        return "–" if value is None else f"{100 * value:.1f}%"

    for row in rows:
        a = row["all"]
        lines.append(f"| {row['judge']} | {a['agree']}/{a['n']} ({pct(a)}) | {pct(row.get('validation'))} | "
                     f"{pct(row.get('test'))} | {pct(a, 'recall_true')} | {pct(a, 'recall_false')} | {a['unjudged']} |")
    return lines


# -- command line ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m langchain_selfrag.evaluation.bio.judges",
                                 description="Agreement of the biography judges with hand-labelled claims.")
    ap.add_argument("--claims", required=True, help="labelled claims (JSONL, see the module doc)")
    ap.add_argument("--model", default="bundled", help="reflection model of the IsSup judge ('bundled', a GGUF, ...)")
    ap.add_argument("--no-issup", action="store_true", help="skip the IsSup judge (it needs the model)")
    ap.add_argument("--chat-model", help="also measure a chat judge (langchain's init_chat_model spec)")
    ap.add_argument("--out", help="write the agreement as JSON here")
    return ap


def main(argv: Sequence[str] | None = None, *, lm: Any = None, chat: Any = None) -> int:
    """Print (and write) every judge's agreement; ``lm`` / ``chat`` replace the loaded models (tests)."""
    args = build_parser().parse_args(argv)
    try:
        claims = load_labelled(args.claims)
    except (OSError, LabelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    judges: list[Any] = [OverlapJudge()]
    if not args.no_issup:
        model = args.model
        if lm is None:
            model = default_model() if model == "bundled" else model
            lm = load_model(model)
        judges.append(IsSupJudge(lm, model_name=Path(model).name))
    if chat is not None or args.chat_model:
        judges.append(ChatJudge(chat if chat is not None else chat_model(args.chat_model),
                                model_name=args.chat_model or type(chat).__name__))
    rows = [agreement(j, claims) for j in judges]
    print("\n".join(agreement_table(rows)))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"claims": str(args.claims), "judges": rows}, indent=1) + "\n")
    return 0

