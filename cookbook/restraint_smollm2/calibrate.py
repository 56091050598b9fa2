"""Calibrate the restraint scorer on hand-labelled claims (issue 26), and measure the IsSup judge.

``collect``: the reflection model's IsSup of every labelled claim against each of its entity's
passages and each passage's IsRel (``IsSupScorer.passage_scores``), written as JSON. ``fit`` (pure,
no model): for each aggregate (max, mean, IsRel-weighted mean, best IsRel x IsSup) a Platt calibration fitted on the
``validation`` claims; the aggregate of lowest validation log loss is chosen; the ``test`` claims
report its calibration (ECE, log loss, reliability bins and plot) before and after, and the IsSup
judge's agreement (best passage > 0.5) on each split. Writes ``calibration.json`` and
``reliability.png``; ``--ship`` also writes the calibration beside the bundled model
(``langchain_selfrag.restraint.calibration.CALIBRATION_FILE``), where ``restrain``'s default scorer
uses it for that model file only.

    python -m cookbook.restraint_smollm2.calibrate collect --claims tests/data/bio_claims.jsonl --out runs/calib
    python -m cookbook.restraint_smollm2.calibrate fit --scores runs/calib/scores.json --out runs/calib
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_selfrag.evaluation.bio.judges.agreement import by_entity, counts, load_labelled
from langchain_selfrag.restraint.calibration import (
    AGGREGATES,
    Calibration,
    aggregate,
    expected_calibration_error,
    fit_platt,
    log_loss,
    reliability,
)


def collect(claims_path: str, model: str, out: Path) -> Path:
    """Per-passage IsSup and IsRel of every labelled claim (one scorer call per entity)."""
    from langchain_selfrag.evaluation.common.models import default_model, load_model
    from langchain_selfrag.restraint.scoring import IsSupScorer

    path = default_model() if model == "bundled" else model
    scorer = IsSupScorer(load_model(path))
    rows: list[dict[str, Any]] = []
    for entity, group in by_entity(load_labelled(claims_path)).items():
        issup, isrel = scorer.passage_scores([c.claim for c in group], question=f"Who is {entity}?",
                                             evidence=group[0].passages)
        rows += [{"entity": entity, "split": c.split, "claim": c.claim, "label": c.label, "issup": s, "isrel": isrel}
                 for c, s in zip(group, issup)]
        print(f"{entity}: {len(group)} claims", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "scores.json"
    target.write_text(json.dumps({"claims": claims_path, "model": Path(path).name, "rows": rows}, indent=1))
    return target


def _split(rows: Sequence[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["split"] == split]


def first_k(row: dict[str, Any], k: int | None) -> dict[str, Any]:
    """The row with only its first ``k`` passages (as ``restrain`` judges against the first k given)."""
    return row if k is None else row | {"issup": row["issup"][:k], "isrel": row["isrel"][:k]}


def fit(scores_path: Path, out: Path, bins: int = 10, k: int | None = None) -> dict[str, Any]:
    """Choose the aggregate and its calibration on validation; report calibration on test."""
    data = json.loads(Path(scores_path).read_text())
    rows = [first_k(r, k) for r in data["rows"]]
    val, test = _split(rows, "validation"), _split(rows, "test")
    candidates = {}
    for how in AGGREGATES:
        xs = [aggregate(r["issup"], r["isrel"], how) for r in val]
        a, b = fit_platt(xs, [r["label"] for r in val])
        passages = "all passages" if k is None else f"the first {k} passages"
        cal = Calibration(how, a, b, model=data.get("model", ""),
                          fitted_on=f"{data['claims']} (validation split, {passages} of each entity)", passages=k)
        candidates[how] = {"calibration": cal, "validation_log_loss": log_loss([cal(x) for x in xs],
                                                                                [r["label"] for r in val])}
    best = min(candidates, key=lambda h: candidates[h]["validation_log_loss"])
    cal = candidates[best]["calibration"]
    labels = [r["label"] for r in test]
    support = [aggregate(r["issup"], r["isrel"], best) for r in test]
    raw_max = [aggregate(r["issup"], r["isrel"], "max") for r in test]
    probs = [cal(x) for x in support]
    report = {
        "scores": str(scores_path), "model": data.get("model"), "passages_per_claim": k,
        "n_validation": len(val), "n_test": len(test),
        "validation_log_loss": {h: c["validation_log_loss"] for h, c in candidates.items()},
        "chosen_aggregate": best, "calibration": cal.to_dict(), "no_evidence_p": cal.no_evidence,
        "test": {
            "ece_max_uncalibrated": expected_calibration_error(raw_max, labels, bins),
            "ece_calibrated": expected_calibration_error(probs, labels, bins),
            "log_loss_max_uncalibrated": log_loss(raw_max, labels),
            "log_loss_calibrated": log_loss(probs, labels),
            "agreement_calibrated_gt_0.5": counts(labels, [p > 0.5 for p in probs]),
            "reliability_calibrated": reliability(probs, labels, bins),
            "reliability_max_uncalibrated": reliability(raw_max, labels, bins),
        },
        "issup_judge_agreement": {  # the IsSup judge: best passage > 0.5
            split: counts([r["label"] for r in part], [max(r["issup"]) > 0.5 for r in part])
            for split, part in (("validation", val), ("test", test), ("all", rows))},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.json").write_text(json.dumps(report, indent=1) + "\n")
    plot(report, out / "reliability.png")
    return report


def ship(report: dict[str, Any]) -> Path:
    """Write the chosen calibration (with what it was measured on) beside the bundled model."""
    from langchain_selfrag.bundled import bundle_dir
    from langchain_selfrag.restraint.calibration import CALIBRATION_FILE

    test = report["test"]
    path = bundle_dir() / CALIBRATION_FILE
    path.write_text(json.dumps({
        "calibration": report["calibration"],
        "made_by": "python -m cookbook.restraint_smollm2.calibrate fit --ship",
        "validation_log_loss": report["validation_log_loss"],
        "passages_per_claim": report["passages_per_claim"],
        "test": {k: v for k, v in test.items() if not k.startswith("reliability")} | {"n": report["n_test"]},
    }, indent=1) + "\n")
    return path


def plot(report: dict[str, Any], path: Path) -> Path:
    """Reliability diagram of the test claims: the best-passage IsSup and the calibrated probability."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 4.5))
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--", label="perfect calibration")
    t = report["test"]
    for key, label in (("reliability_max_uncalibrated", f"max IsSup (ECE {t['ece_max_uncalibrated']:.2f})"),
                       ("reliability_calibrated",
                        f"{report['chosen_aggregate']} + Platt (ECE {t['ece_calibrated']:.2f})")):
        bins = t[key]
        ax.plot([b["mean_p"] for b in bins], [b["frac_true"] for b in bins], "o-", label=label)
    ax.set_xlabel("claim probability")
    ax.set_ylabel("share of claims labelled true")
    ax.set_title(f"Held-out labelled claims (n={report['n_test']})")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cookbook.restraint_smollm2.calibrate", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--claims", required=True)
    c.add_argument("--model", default="bundled")
    c.add_argument("--out", required=True)
    f = sub.add_parser("fit")
    f.add_argument("--scores", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--k", type=int, default=5,
                   help="judge against the first K passages, as restrain does with SelfRAGConfig.k (default 5)")
    f.add_argument("--ship", action="store_true",
                   help="also write the chosen calibration beside the bundled model (restrain's default scorer)")
    args = ap.parse_args(argv)
    if args.command == "collect":
        print(collect(args.claims, args.model, Path(args.out)))
    else:
        report = fit(Path(args.scores), Path(args.out), k=args.k)
        if args.ship:
            print(ship(report))
        print(json.dumps({k: report[k] for k in ("chosen_aggregate", "validation_log_loss", "no_evidence_p")}
                         | {"test": {k: v for k, v in report["test"].items() if not k.startswith("reliability")}},
                         indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
