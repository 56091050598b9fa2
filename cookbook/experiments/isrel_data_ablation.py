"""Which IsRel pairs move the 1.5B question model's relevance head on the demo corpus: an ablation.

Starts from a fitted head's own pairs (``--pairs``, e.g. ``runs/relhead/q15/pairs.jsonl``) and adds

- ``meta``: the documentation pairs of ``--train-file`` whose passage talks about questions, answers,
  passages, queries or retrieval (three such words or more), the words the demo corpus shares with the
  IsRel question (tagged ``<variant>_meta``);
- ``rules``: the first ``--rules`` documents of a :mod:`cookbook.data.decision_rules` file ("How does X
  decide whether to Y?" on a tool document with and without the rule that answers it);

then fits one head per combination (base, meta, rules, both) with the relevance head's own fit and writes
each to ``OUT/NAME/relevance_head.json`` with a report (``OUT/report.json``) and every pair (``OUT/pairs.jsonl``:
base, then meta, then rules): held-out AUC on the base
pairs and on the added ones. Features are computed once, cached by prompt (``--features``: copy the
head's own features folder there first and only the added pairs run through the model)::

    python -m cookbook.data.decision_rules --out runs/qwen/data/rules.jsonl --documents 120
    cp -r runs/relhead/q15/features runs/relhead/q15m/features
    python cookbook/experiments/isrel_data_ablation.py --pairs runs/relhead/q15/pairs.jsonl \\
        --train-file runs/qwen/data/all.jsonl --rules-file runs/qwen/data/rules.jsonl --rules 40 \\
        --features runs/relhead/q15m/features --out runs/relhead/q15m
    python cookbook/experiments/isrel_probe.py --model runs/relhead/q15/model.gguf --store .selfrag/store \\
        --labelled --head runs/relhead/q15m/base/relevance_head.json --head runs/relhead/q15m/rules/relevance_head.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: Words of the IsRel question itself, and of text about question answering.
META = re.compile(r"\b(questions?|answers?|answered|passages?|retriev\w*|relevan\w*|queries|query|documents?|"
                  r"prompts?|replies|reply)\b", re.I)
BASE_MODEL = "qwen2.5-coder-1.5b-instruct"


def meta_pairs(pairs: list[dict], seen: set[tuple[str, str]]) -> list[dict]:
    """Documentation pairs whose passage holds three meta words or more, not in ``seen``."""
    out = []
    for p in pairs:
        key = (p["question"], p["passage"])
        if p["variant"].startswith("doc_") and len(META.findall(p["passage"])) >= 3 and key not in seen:
            seen.add(key)
            out.append({**p, "variant": p["variant"] + "_meta"})
    return out


def main(argv=None) -> int:
    from langchain_selfrag.bundled.parts import file_sha256
    from langchain_selfrag.graph.context import model_path
    from langchain_selfrag.jsonl import iter_jsonl
    from langchain_selfrag.lm.judge import JudgePrompt
    from langchain_selfrag.lm.relevance_head import RelevanceHead
    from training.relevance_head import auc, fit_head, judge_pairs

    from cookbook.data.judge_mix import rule_pairs
    from cookbook.experiments.isrel_probe import YesShare

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", required=True, help="a fitted head's pairs.jsonl")
    ap.add_argument("--train-file", required=True, help="the Self-RAG training file those pairs were drawn from")
    ap.add_argument("--rules-file", required=True, help="a cookbook.data.decision_rules file")
    ap.add_argument("--rules", type=int, default=40, help="decision-rule documents to add (two pairs each)")
    ap.add_argument("--features", required=True, type=Path, help="the feature cache (by prompt)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--model", default=BASE_MODEL, help="the frozen base (default the 1.5B)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    base = [json.loads(line) for line in Path(args.pairs).read_text(encoding="utf-8").splitlines()]
    seen = {(p["question"], p["passage"]) for p in base}
    meta = meta_pairs(judge_pairs(r for _, r in iter_jsonl(args.train_file)), seen)
    rules = rule_pairs(judge_pairs(r for _, r in iter_jsonl(args.rules_file)), args.rules)
    pairs = base + meta + rules
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    path = Path(model_path(args.model))
    prompt = JudgePrompt()
    reader = YesShare(path, args.threads)  # the probe's reader: the hidden states and the Yes-minus-No row
    h = reader.hidden(prompt.ask, pairs, args.features)
    reader.close()
    direction = reader.direction
    labels = np.array([p["label"] for p in pairs])
    n_base, n_meta = len(base), len(meta)
    part = np.array(["base"] * n_base + ["meta"] * n_meta + ["rules"] * len(rules))
    report: dict = {"pairs": {"base": n_base, "meta": n_meta, "rules": len(rules)}, "heads": {}}
    for name, parts in {"base": ("base",), "meta": ("base", "meta"), "rules": ("base", "rules"),
                        "both": ("base", "meta", "rules")}.items():
        idx = np.where(np.isin(part, parts))[0]
        weights, bias, fit = fit_head(h[idx], labels[idx], [pairs[i]["question"] for i in idx], direction)
        held = fit.pop("held_out_scores")
        row = {"l2": fit["l2"], "held_out_auc_base_pairs": round(auc(labels[idx][part[idx] == "base"], held[part[idx] == "base"]), 4)}
        added = part[idx] != "base"
        if added.any():
            row["held_out_auc_added_pairs"] = round(auc(labels[idx][added], held[added]), 4)
            row["untrained_auc_added_pairs"] = round(auc(labels[idx][added], (h[idx] @ direction)[added]), 4)
        report["heads"][name] = row
        (args.out / name).mkdir(parents=True, exist_ok=True)
        RelevanceHead(weights=weights.astype(np.float32), bias=bias, model_sha256=file_sha256(path),
                      model_name=args.model, ask=prompt.ask, system=prompt.system,
                      report=fit).save(args.out / name / "relevance_head.json")
        print(name, json.dumps(row), flush=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
