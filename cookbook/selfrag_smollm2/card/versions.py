"""``versions.json``: one row per build, made by :func:`version_row` from that build's artefacts, and
the lineage of a build that continued an earlier one. Rows not in the current schema
(:data:`VERSIONS_SCHEMA`) are dropped on the next write."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .figures import figures
from .io import file_digest, read_json

#: Schema tag of a ``versions.json`` row made by :func:`version_row`.
VERSIONS_SCHEMA = "selfrag-smollm2-versions/1"


#: A build's artefacts a row is made from (hashed into the row's ``sources``).
ARTEFACTS = ("eval.json", "generator_phase1_training.json", "selfrag_training.json", "critic_training.json", "split.json")


def training_seconds(meta: dict):
    """Wall-clock training seconds, summed over resumed runs."""
    return meta.get("seconds_total", meta.get("seconds"))


def version_row(build: str, folder: str | Path) -> dict[str, Any]:
    """One ``versions.json`` row for build ``build`` from the artefacts in ``folder`` (eval.json needed)."""
    folder = Path(folder)
    ev = read_json(folder, "eval.json")
    if not ev:
        raise FileNotFoundError(f"{folder / 'eval.json'} is missing: a build row needs its evaluation")
    phase1, gen = read_json(folder, "generator_phase1_training.json"), read_json(folder, "selfrag_training.json")
    critic, split = read_json(folder, "critic_training.json"), read_json(folder, "split.json")
    return {
        "schema": VERSIONS_SCHEMA,
        "build": build,
        # phase 2 started from an earlier build's adapter: this build continues the row before it
        "continued": continued_earlier_build((gen.get("config") or {}).get("init_adapter")),
        "generator_steps": [m["steps"] for m in (phase1, gen) if m.get("steps")],
        "generator_minutes": round(sum(training_seconds(m) or 0 for m in (phase1, gen)) / 60, 1),
        "phase1_minutes": round((training_seconds(phase1) or 0) / 60, 1),
        "critic_steps": critic.get("steps"),
        "heldout_articles": ev.get("heldout_articles") or split.get("heldout_articles"),
        "figures": figures(ev),
        "sources": {name: file_digest(folder / name) for name in ARTEFACTS if (folder / name).is_file()},
    }


def load_versions(folder: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of ``folder/versions.json`` in the current schema, and the names of the rows dropped."""
    rows = read_json(Path(folder), "versions.json").get("versions", [])
    kept = [r for r in rows if isinstance(r, dict) and r.get("schema") == VERSIONS_SCHEMA]
    dropped = [str(r.get("build") if isinstance(r, dict) else r) for r in rows if r not in kept]
    return kept, dropped


def upsert(rows: Sequence[Mapping[str, Any]], row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``rows`` with ``row`` replacing the row of the same build name in place, else appended."""
    out = [dict(r) for r in rows]
    for i, r in enumerate(out):
        if r.get("build") == row["build"]:
            out[i] = dict(row)
            return out
    return [*out, dict(row)]


def add_build(folder: str | Path, build: str, artefacts: str | Path | None = None) -> list[str]:
    """Add (or replace) build ``build``'s row, made from ``artefacts`` (default ``folder``), to
    ``folder/versions.json``; returns the names of non-schema rows dropped on the way."""
    folder = Path(folder)
    rows, dropped = load_versions(folder)
    rows = upsert(rows, version_row(build, artefacts or folder))
    (folder / "versions.json").write_text(json.dumps({"versions": rows}, indent=1) + "\n")
    return dropped


def current_row(folder: Path, rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The row whose eval.json digest is the folder's own (None when no row is)."""
    if not (folder / "eval.json").is_file():
        return None
    digest = file_digest(folder / "eval.json")
    return next((r for r in rows if (r.get("sources") or {}).get("eval.json") == digest), None)


def continued_earlier_build(init_adapter: str | None) -> bool:
    """True when phase 2 started from an earlier build's adapter, not this build's phase 1."""
    return bool(init_adapter) and Path(str(init_adapter)).parts[-2:] != ("generator", "adapter")


def lineage(rows: Sequence[Mapping[str, Any]], current: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The builds ``current`` descends from, oldest first, ending with ``current``.

    A row marked ``continued`` continues the row before it in ``versions.json`` (builds are added
    in order); rows without the mark start a lineage.
    """
    if current is None:
        return []
    rows = list(rows)
    i = next((k for k, r in enumerate(rows) if r is current), None)
    if i is None:
        return [current]
    chain = [rows[i]]
    while chain[0].get("continued") and i > 0:
        i -= 1
        chain.insert(0, rows[i])
    return chain


def lineage_totals(chain: Sequence[Mapping[str, Any]]) -> tuple[list[int], float]:
    """Generator steps along a lineage (the root's phases, then each continuation's phase 2) and minutes."""
    if not chain:
        return [], 0.0
    steps = list(chain[0].get("generator_steps") or [])
    minutes = float(chain[0].get("generator_minutes") or 0)
    for row in chain[1:]:
        own = row.get("generator_steps") or []
        steps.append(own[-1] if own else 0)
        phase1_minutes = (row.get("phase1_minutes") if row.get("phase1_minutes") is not None
                          else _phase1_minutes_of(chain[0]))
        minutes += max(0.0, float(row.get("generator_minutes") or 0) - phase1_minutes)
    return steps, minutes


def _phase1_minutes_of(root: Mapping[str, Any]) -> float:
    return float(root.get("phase1_minutes") or 0)
