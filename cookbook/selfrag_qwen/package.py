"""Pack, check and ship ``selfrag-qwen2.5-coder-1.5b``: the judge LoRA and the question model's token rows
as one bundled adapter.

The recipe (``judge_question_model.sh``) makes the model in two merges: the LoRA onto the base GGUF
(``judge.gguf``, Q4_0), then the 15 reflection tokens' rows onto that (``qm/model.gguf``). The bundle
ships both as one PEFT LoRA adapter with ``trainable_token_indices`` (the LoRA in fp16, only the layers
it trained; the rows in fp32), which :mod:`langchain_selfrag.bundled` merges onto the base at first use
in one pass. This script

1. packs that adapter into ``--staging`` with the question model's ``selfrag_training.json`` (layout,
   token ids, Retrieve fit) and both stages' records;
2. builds it as users will (``bundled.build_gguf``) and compares its reflection probabilities with the
   evaluated model's (``--reference``) on make demo's corpus: the first ``--questions`` labelled
   questions of ``benchmarks/project_docs.py`` against every chunk, IsRel; ``STAGING/agreement.json``;
3. with ``--ship``, copies the adapter, the records and the calibration (renamed for the built file)
   into ``langchain_selfrag/models/selfrag-qwen2.5-coder-1.5b``.

    python -m cookbook.selfrag_qwen.package --lora runs/lora15a/run/adapter --question-model runs/lora15a/qm \\
        --reference runs/lora15a/qm/model.gguf --calibration runs/trust/lora15a-val/calibration.json \\
        --staging runs/lora15a/bundle [--ship]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from langchain_selfrag import bundled
from langchain_selfrag import tokens as T
from langchain_selfrag.abstention import BUNDLED_FILE, AbstentionCalibration
from langchain_selfrag.bundled.bases import base_gguf_path
from langchain_selfrag.export.merge import read_safetensors

NAME = "selfrag-qwen2.5-coder-1.5b"
_PREFIX = "base_model.model."
#: the question model's rows, by the module names a LoRA adapter's ``trainable_token_indices`` uses
_ROW_MODULES = {"embed_tokens": "model.embed_tokens", "lm_head": "lm_head"}


def trained_lora(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The LoRA pairs whose B is not all zero (``--train-from-layer`` leaves the layers below untouched)."""
    kept = {}
    for name, b in tensors.items():
        if ".lora_B." in name and np.any(b):
            a_name = name.replace(".lora_B.", ".lora_A.")
            kept[a_name], kept[name] = tensors[a_name], b
    return kept


def layer_of(name: str) -> int:
    return int(name.split(".layers.")[1].split(".")[0])


def seconds_at_step(log: str, step: int, steps: int) -> float:
    """Seconds a Trainer's progress bar of ``steps`` showed at ``step`` (``100/174 [24:35<...``): the time an
    interrupted run spent before the checkpoint it was resumed from, for checkpoints that did not record it."""
    found = re.findall(rf"\b{step}/{steps} \[(\d+(?::\d+)+)", log.replace("\r", "\n"))
    if not found:
        raise SystemExit(f"the log shows no step {step}")
    seconds = 0
    for part in found[0].split(":"):
        seconds = seconds * 60 + int(part)
    return float(seconds)


def training_time(lora_meta: dict, qm_meta: dict, before_resume: float) -> dict:
    """Seconds of each training stage as recorded (the LoRA's time before a resume added where its
    checkpoint did not record it)."""
    lora = float(lora_meta.get("seconds_total", lora_meta["seconds"]))
    if lora_meta.get("resumed_from") and lora == float(lora_meta["seconds"]):
        lora += before_resume
    qm = float(qm_meta["seconds"])
    return {"judge_lora_s": round(lora, 1), "judge_lora_steps": lora_meta["steps"], "question_model_s": round(qm, 1),
            "total_s": round(lora + qm, 1), "judge_lora_min": round(lora / 60, 1), "question_model_min": round(qm / 60, 1),
            "total_min": round((lora + qm) / 60, 1)}


def pack(lora: Path, question_model: Path, staging: Path, before_resume: float = 0.0) -> Path:
    """The bundled adapter in ``staging``: LoRA (fp16, trained layers) + token rows (fp32) + records."""
    from safetensors.numpy import save_file

    qm_adapter = question_model / "adapter"
    lora_meta = json.loads((lora / bundled.META_FILE).read_text())
    qm_meta = json.loads((qm_adapter / bundled.META_FILE).read_text())
    config = json.loads((lora / bundled.CONFIG_FILE).read_text())
    rows_config = json.loads((qm_adapter / bundled.CONFIG_FILE).read_text())
    pairs = trained_lora(read_safetensors(lora / bundled.ADAPTER_FILE))
    if not pairs:
        raise SystemExit(f"{lora}: no trained LoRA pair")
    rows = read_safetensors(qm_adapter / bundled.ADAPTER_FILE)
    tensors = {name: a.astype(np.float16) for name, a in pairs.items()}
    for short, module in _ROW_MODULES.items():
        tensors[f"{_PREFIX}{module}.token_adapter.trainable_tokens_delta"] = rows[
            f"{_PREFIX}{module}.trainable_tokens_delta"].astype(np.float32)
    ids = [int(i) for i in rows_config["token_indices"]]
    config.update(trainable_token_indices={short: ids for short in _ROW_MODULES},
                  layers_to_transform=sorted({layer_of(n) for n in pairs}), base_model_name_or_path=None)
    tokens = {k: int(v) for k, v in qm_meta["reflection_token_ids"].items()}
    if sorted(tokens.values()) != ids:
        raise SystemExit(f"{qm_adapter}: its token rows are not the reflection tokens' ids")
    meta = {**qm_meta, "base_model": lora_meta["base_model"], "method": "judge_sft + question_head",
            "seconds": training_time(lora_meta, qm_meta, before_resume),
            "stages": {"judge_lora": lora_meta, "question_model": qm_meta}}
    staging.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(staging / bundled.ADAPTER_FILE))
    (staging / bundled.CONFIG_FILE).write_text(json.dumps(config, indent=1))
    (staging / bundled.META_FILE).write_text(json.dumps(meta, indent=1))
    return staging


def demo_pairs(n_questions: int) -> list[tuple[str, str, str]]:
    """(question, title, chunk) for the first ``n_questions`` labelled demo questions (make demo's first)
    against every chunk of the demo corpus."""
    from benchmarks.project_docs import CORPUS, load_questions
    from langchain_selfrag.retrieval.loading import load_file, split_documents

    chunks = split_documents([d for f in sorted(CORPUS.glob("*.md")) for d in load_file(f)])
    return [(row["question"], str(c.metadata.get("title", "")), c.page_content)
            for row in load_questions()[:n_questions] for c in chunks]


def isrel_of(model: Path, pairs: Sequence[tuple[str, str, str]], threads: int | None) -> list[float]:
    from cookbook.selfrag_smollm2.evaluate import batched_probs
    from langchain_selfrag.lm import load_reflection_lm
    from langchain_selfrag.prompts import build_instruction, format_prompt, with_evidence
    from langchain_selfrag.scoring import isrel_score

    lm = load_reflection_lm(str(model), n_threads=threads)
    try:
        prompts = [with_evidence(format_prompt(build_instruction(q)), title, text) for q, title, text in pairs]
        return [isrel_score(p) for p in batched_probs(lm, prompts, T.GROUPS[T.Kind.ISREL], f"IsRel: {model.name}", 8)]
    finally:
        lm.close()


def agreement(built: Path, reference: Path, n_questions: int, threads: int | None) -> dict:
    """IsRel of the built and the evaluated model on the demo corpus, and how far apart they are."""
    pairs = demo_pairs(n_questions)
    a, b = np.array(isrel_of(built, pairs, threads)), np.array(isrel_of(reference, pairs, threads))
    diff = np.abs(a - b)
    return {"pairs": len(pairs), "max_abs_diff": round(float(diff.max()), 4),
            "mean_abs_diff": round(float(diff.mean()), 4),
            "same_side_of_0.5": int(((a >= 0.5) == (b >= 0.5)).sum()), "built": built.name, "reference": str(reference)}


def ship(staging: Path, calibration: Path) -> Path:
    """The packed adapter, its records and the calibration into the bundled model's folder; the calibration
    names the file users build (the one ``bundled.default_model_path`` finds)."""
    folder = bundled.bundle_dir(NAME)
    folder.mkdir(parents=True, exist_ok=True)
    for name in (bundled.ADAPTER_FILE, bundled.CONFIG_FILE, bundled.META_FILE, "agreement.json"):
        shutil.copy(staging / name, folder / name)
    built = bundled.cached_gguf_path(folder)
    cal = AbstentionCalibration.load(calibration)
    shipped = AbstentionCalibration(built.name, cal.abstain_isrel, cal.abstain_issup, cal.rule,
                                    {**cal.fitted_on, "file": cal.model}, cal.expected, cal.answer_form)
    shipped.save(folder / BUNDLED_FILE)
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cookbook.selfrag_qwen.package", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lora", required=True, type=Path, help="the judge LoRA's adapter folder (judge_sft)")
    ap.add_argument("--question-model", required=True, type=Path, help="question_head's output folder")
    ap.add_argument("--reference", type=Path, help="the evaluated GGUF to compare the built one with")
    ap.add_argument("--calibration", type=Path, help="the calibration fitted on the validation part")
    ap.add_argument("--staging", required=True, type=Path)
    ap.add_argument("--resumed-log", type=Path, help="the log of an interrupted LoRA run resumed from a checkpoint "
                    "that did not record its seconds: its progress bar's time at --resumed-step is added")
    ap.add_argument("--resumed-step", type=int, default=100)
    ap.add_argument("--questions", type=int, default=1, help="demo questions the agreement asks (default: %(default)s)")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--ship", action="store_true", help="copy into langchain_selfrag/models/" + NAME)
    args = ap.parse_args(argv)
    steps = json.loads((args.lora / bundled.META_FILE).read_text())["steps"]
    before = seconds_at_step(args.resumed_log.read_text(), args.resumed_step, steps) if args.resumed_log else 0.0
    staging = pack(args.lora, args.question_model, args.staging, before)
    base = base_gguf_path(bundled.bundled_model(NAME).base)
    outtype = bundled.bundled_model(NAME).outtype
    # named by the adapter's fingerprint, as the cache names it: the same packed adapter is built once
    built = staging / bundled.cached_gguf_path(staging, base, outtype).name
    if not built.is_file():
        start = time.time()
        bundled.build_gguf(built, folder=staging, base=base, outtype=outtype)
        print(f"built {built} in {time.time() - start:.0f} s", file=sys.stderr)
    measured = staging / "agreement.json"
    if args.reference and not (measured.is_file() and json.loads(measured.read_text())["built"] == built.name):
        report = agreement(built, args.reference, args.questions, args.threads)
        (staging / "agreement.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report, indent=1))
    if args.ship:
        if not (args.calibration and args.reference):
            raise SystemExit("--ship needs --calibration and --reference")
        print(f"shipped into {ship(staging, args.calibration)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
