"""The card's trust section: the trust suite's test part (``benchmarks/trust_suite.py``) for this build
and the build it replaced, from ``trust_eval.json`` (written by :mod:`cookbook.selfrag_smollm2.trust`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .cells import fmt
from .io import read_json

TRUST_FILE = "trust_eval.json"
#: (part, heading) of the table; near misses of SQuAD are its unanswerable questions; the reader's
#: ceiling is the answerable questions right before abstention (what no bars can exceed).
PARTS = (("answerable", "answerable right, cited"), ("reader_ceiling", "right before abstention"),
         ("near_miss", "near miss abstained"), ("off_topic", "off topic abstained"),
         ("noise_only", "noise only abstained"))


def _part(entry: Mapping[str, Any], part: str) -> Mapping[str, Any] | None:
    if part == "reader_ceiling":
        return entry.get("reader_ceiling")
    parts = entry.get("parts") or {}
    return parts.get(part) or (parts.get("unanswerable") if part == "near_miss" else None)


def _cell(part: Mapping[str, Any] | None) -> str:
    if not part or not part.get("n"):
        return "-"
    return f"{part['right']}/{part['n']} ({part['right'] / part['n']:.2f})"


def trust_section(folder: str | Path) -> list[str]:
    data = read_json(Path(folder), TRUST_FILE)
    if not data:
        return []
    builds = [b for b in (data.get("current"), data.get("baseline")) if b]
    first = builds[0]["result"]
    lines = ["## Trust on kinds of text it was not chosen on", "",
             ("The trust suite's test part (`benchmarks/trust`: package READMEs as published, invented news reports, "
              "invented fact sheets and SQuAD's held-out articles; no choice was made on it, and none of its documents "
              "was trained on, except that the shipped build saw passages of the SQuAD test articles as `[Irrelevant]` "
              "negatives of other questions (see Data)), indexed with `selfrag index` and asked through `SelfRAGChain` with the defaults, "
              f"measured by `{first.get('command')}` on {first.get('date')}. Bars of the trust issue: answerable "
              "0.7, near miss 0.7, off topic 0.9. Abstaining only removes answers, so no bars can answer more "
              "right than the column \"right before abstention\" (the chain's chosen answer with the bars off)."), "",
             "| kind | build | " + " | ".join(h for _, h in PARTS) + " | coverage | selective accuracy | F1_RG | AURC |",
             "|---|---|" + "---|" * len(PARTS) + "---:|---:|---:|---:|"]
    kinds = list((first.get("figures") or {}).get("kinds") or {})
    for kind in kinds:
        for build in builds:
            entry = ((build["result"].get("figures") or {}).get("kinds") or {}).get(kind)
            if not entry:
                continue
            sel = entry.get("selective") or {}
            cells = " | ".join(_cell(_part(entry, p)) for p, _ in PARTS)
            lines.append(f"| {kind} | {build['build']} | {cells} | {fmt((sel.get('coverage') or {}).get('value'))} | "
                         f"{fmt((sel.get('selective_accuracy') or {}).get('value'))} | "
                         f"{fmt((sel.get('f1_rg') or {}).get('value'))} | {fmt((sel.get('aurc') or {}).get('value'))} |")
    squad = ((first.get("figures") or {}).get("kinds") or {}).get("squad")
    if squad:
        only, noise = squad.get("answerable_only") or {}, (squad.get("parts") or {}).get("noise_only") or {}
        lines += ["", (f"SQuAD held-out articles, answerable questions only ({builds[0]['build']}): coverage "
                       f"{fmt((only.get('coverage') or {}).get('value'))}, selective accuracy "
                       f"{fmt((only.get('selective_accuracy') or {}).get('value'))}, "
                       f"{fmt(only.get('selective_accuracy_at_0.6'))} at coverage 0.6 by the chain's confidence; "
                       f"noise-only runs rejected: {_cell(noise)}.")]
    return [*lines, ""]
