"""Abstention bars for chat models without a calibration of their own, fitted over several chat models.

Reads trust-suite runs (``benchmarks/trust_suite.py --chat-model M --out DIR``, one folder per model and
part) of chat models asked the reflection questions (``ChatReflectionLM``), then:

* fits one pair of bars on the validation runs of all the models pooled (``selfrag calibrate``'s
  balanced rule, each model's questions replayed from their traces: no model is asked again);
* checks them leave-one-model-out: for each model, bars fitted on the other models' validation runs,
  scored on its test run; beside them the pooled bars, the generic bars (``DEFAULT_BARS``) and the bars
  fitted on the model's own validation run (what ``selfrag calibrate`` would give it);
* ``--write`` writes the pooled bars where the chain finds them for a chat model with no calibration
  (``langchain_selfrag.abstention.CHAT_MODELS_FILE``).

    python benchmarks/chat_model_bars.py runs/trust/chat-*-validation runs/trust/chat-*-test \\
        --json benchmarks/results/chat_model_bars.json --write

The test runs are only ever scored, never fitted on.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.trust_suite import calibration_rows, handled_right_at, read_records  # noqa: E402
from langchain_selfrag.abstention import (  # noqa: E402
    CHAT_MODELS_FILE,
    CHAT_MODELS_NAME,
    DEFAULT_BARS,
    AbstentionCalibration,
)
from langchain_selfrag.calibrate.fit import calibration, choose  # noqa: E402


def model_name(run_dir: Path) -> str:
    """The chat model a trust-suite run asked (``local-<file>`` of a local GGUF: its file name)."""
    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    return Path(run["model"]).name.removeprefix("local-")


def load_runs(folders: Sequence[Path]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """``{model: {split: records}}`` of the runs in ``folders`` (records of the same model and part joined)."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for folder in folders:
        if not (folder / "run.json").is_file() or not (folder / "records.jsonl").is_file():
            raise SystemExit(f"{folder}: not a trust-suite run folder (run.json and records.jsonl)")
        for r in read_records(folder / "records.jsonl"):
            runs.setdefault(model_name(folder), {}).setdefault(r["split"], []).append(r)
    return runs


def bars_of(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    row, _ = choose(calibration_rows(records))
    return {"abstain_isrel": float(row["abstain_isrel"]), "abstain_issup": float(row["abstain_issup"])}


def scored(records: Sequence[Mapping[str, Any]], bars: Mapping[str, float]) -> dict[str, Any]:
    """Per part the questions handled right at ``bars`` (answerable: answered right and cited; the others:
    abstained), replayed from the records."""
    parts: dict[str, dict[str, Any]] = {}
    for r in records:
        entry = parts.setdefault(r["part"], {"n": 0, "right": 0})
        entry["n"] += 1
        entry["right"] += int(handled_right_at(r, bars["abstain_isrel"], bars["abstain_issup"]))
    for entry in parts.values():
        entry["rate"] = round(entry["right"] / entry["n"], 4)
    return {**bars, "parts": parts}


def meets(figure: Mapping[str, Any], near_miss: float, answerable: float) -> bool:
    parts = figure["parts"]
    return (parts.get("near_miss", {}).get("rate", 0) >= near_miss
            and parts.get("answerable", {}).get("rate", 0) >= answerable)


def evaluate(runs: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]], *, near_miss: float = 0.8,
             answerable: float = 0.7) -> dict[str, Any]:
    """The pooled bars and, per model, its test part at: bars fitted without it, the pooled bars, the
    generic bars and its own validation bars."""
    models = sorted(m for m, splits in runs.items() if "validation" in splits)
    if len(models) < 2:
        raise SystemExit("give the validation runs of at least two chat models")
    val = {m: list(runs[m]["validation"]) for m in models}
    pooled = bars_of([r for m in models for r in val[m]])
    per_model: dict[str, Any] = {}
    for m in models:
        entry: dict[str, Any] = {"validation_questions": len(val[m])}
        test = runs[m].get("test")
        if test:
            without = bars_of([r for other in models if other != m for r in val[other]])
            entry["test"] = {"left_out": scored(test, without), "pooled": scored(test, pooled),
                             "generic": scored(test, DEFAULT_BARS), "own_validation": scored(test, bars_of(val[m]))}
            for figure in entry["test"].values():
                figure["meets"] = meets(figure, near_miss, answerable)
        entry["validation"] = {"pooled": scored(val[m], pooled), "generic": scored(val[m], DEFAULT_BARS)}
        per_model[m] = entry
    return {"models": models, "pooled_bars": pooled, "bars": {"near_miss": near_miss, "answerable": answerable},
            "per_model": per_model}


def shipped_calibration(runs: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
                        result: Mapping[str, Any], answer_form: str | None) -> AbstentionCalibration:
    """The pooled fit as the calibration the chain reads for a chat model with none of its own."""
    models = result["models"]
    cal = calibration(calibration_rows([r for m in models for r in runs[m]["validation"]]), CHAT_MODELS_NAME,
                      fitted_on=f"trust suite, validation part (docs), pooled over {', '.join(models)}",
                      answer_form=answer_form)
    left_out = {m: {p: v["rate"] for p, v in e["test"]["left_out"]["parts"].items()}
                for m, e in result["per_model"].items() if "test" in e}
    return AbstentionCalibration(cal.model, cal.abstain_isrel, cal.abstain_issup, cal.rule,
                                 {**cal.fitted_on, "models": models},
                                 {**cal.expected, "test_part_bars_fitted_without_the_model": left_out}, cal.answer_form)


def plot(runs: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]], result: Mapping[str, Any], path: Path) -> Path:
    """Per model (test part), near misses abstained and answerable right over the IsRel bar at the
    pooled IsSup bar; the pooled IsRel bar marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from langchain_selfrag.evaluation.qa.abstention import ISREL_GRID

    issup = result["pooled_bars"]["abstain_issup"]
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    for n, m in enumerate(result["models"]):
        test = runs[m].get("test")
        if not test:
            continue
        rows = [scored(test, {"abstain_isrel": a, "abstain_issup": issup})["parts"] for a in ISREL_GRID]
        color = f"C{n}"
        ax.plot(ISREL_GRID, [r.get("answerable", {}).get("rate", 0) for r in rows], "o-", color=color,
                label=f"{m}: answerable right")
        ax.plot(ISREL_GRID, [r.get("near_miss", {}).get("rate", 0) for r in rows], "d--", color=color,
                label=f"{m}: near miss abstained")
    ax.axvline(result["pooled_bars"]["abstain_isrel"], color="grey", linestyle=":", label="shipped IsRel bar")
    ax.set_xlabel(f"abstain_isrel (abstain_issup={issup:g})")
    ax.set_ylabel("share handled right, test part (docs)")
    ax.set_title("chat models asked the reflection questions")
    ax.legend(fontsize=6, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _rate(figure: Mapping[str, Any], part: str) -> str:
    entry = figure["parts"].get(part)
    return "-" if entry is None else f"{entry['right']}/{entry['n']}"


def format_result(result: Mapping[str, Any]) -> list[str]:
    bars = result["pooled_bars"]
    lines = [f"pooled bars over {len(result['models'])} models: IsRel >= {bars['abstain_isrel']:g}, "
             f"IsSup >= {bars['abstain_issup']:g}",
             "test part (docs): answerable right / near miss abstained at each model's bars",
             f"{'model':40s} {'fitted without it':>26s} {'pooled':>18s} {'generic 0.5/0.25':>18s} "
             f"{'own validation':>22s}"]
    for m, entry in result["per_model"].items():
        test = entry.get("test")
        if not test:
            lines.append(f"{m:40s} (no test run)")
            continue
        cells = []
        for name in ("left_out", "pooled", "generic", "own_validation"):
            f = test[name]
            text = f"{_rate(f, 'answerable')} {_rate(f, 'near_miss')}"
            if name in ("left_out", "own_validation"):
                text = f"({f['abstain_isrel']:g},{f['abstain_issup']:g}) " + text
            cells.append(text + (" *" if f["meets"] else ""))
        lines.append(f"{m:40s} {cells[0]:>26s} {cells[1]:>18s} {cells[2]:>18s} {cells[3]:>22s}")
    b = result["bars"]
    lines.append(f"* meets near misses abstained >= {b['near_miss']:g} and answerable right >= {b['answerable']:g}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="trust-suite run folders (validation and test parts)")
    ap.add_argument("--json", type=Path, help="write the figures here (benchmarks/record.py), the plot beside it")
    ap.add_argument("--write", action="store_true",
                    help="write the pooled bars where the chain reads them (langchain_selfrag/models/"
                         "chat_models_calibration.json)")
    args = ap.parse_args(argv)
    runs = load_runs(args.runs)
    result = evaluate(runs)
    print("\n".join(format_result(result)))
    forms = {json.loads((f / "run.json").read_text()).get("answer_form") for f in args.runs}
    if args.write:
        if len(forms) != 1:
            raise SystemExit(f"the runs used different answer forms ({sorted(map(str, forms))}): fit one at a time")
        cal = shipped_calibration(runs, result, forms.pop())
        cal.save(CHAT_MODELS_FILE)
        print(f"written to {CHAT_MODELS_FILE}")
    if args.json:
        from benchmarks.record import Run

        Run("chat_model_bars").write(args.json, {"runs": [str(p) for p in args.runs], "write": args.write}, result)
        print(f"plot: {plot(runs, result, args.json.with_suffix('.png'))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
