"""Is one model better than another on the trust suite, kind by kind, beyond the noise of a few
dozen questions?

Reads two runs of ``benchmarks/trust_suite.py`` on the same questions (the same split, ``--n-squad``
and seed), each as it ran or replayed at a calibration's bars (``--a-calibration``, ``--b-calibration``:
a validation run made before its model had one), and prints, per kind of text: each part handled right by
both, the mean share handled right over the kind's parts (every part weighs the same), the difference
B - A with a paired bootstrap 95% interval (questions resampled within each part, the same draw for
both runs), and a verdict: ``better`` or ``worse`` when the interval excludes 0, else ``no clear
difference``. Beside it, the ranking: each run's AURC from the chain's own confidence over the
kind's questions (noise-only runs excluded, as in the suite's summary; independent of the bars), and
B - A with a paired bootstrap interval (lower is better, so B ranks better when the interval lies
below 0). A part of 15 questions moves the mean share of a three-part kind by 0.022 a question,
so a win by one question is not a win. Runs of different questions are refused, unless
``--shared-only`` compares them on the questions both asked (a run made before the suite gained a
part, such as the noise-only runs of docs, news and invented). ``--by-source`` also prints each part
per source document (a SQuAD article's questions move together). ``--json`` writes the comparison as a
results file (:mod:`benchmarks.record`: the figures with the date, command, commit and machine)::

    python benchmarks/trust_compare.py runs/trust/v4-test runs/trust/v5-test --json runs/trust/v5-vs-v4.json
    python benchmarks/trust_compare.py runs/trust/v4-val runs/trust/v5-val \
        --a-calibration langchain_selfrag/models/selfrag-smollm2-135m/abstention_calibration.json --b-calibration v5.gguf.calibration.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.record import Run
from benchmarks.trust_suite import PARTS, handled_right, handled_right_at, in_kind_order, key, outcome, read_records
from langchain_selfrag.abstention import AbstentionCalibration, CalibrationError
from langchain_selfrag.evaluation.common.selective import ranking_arrays, risk_coverage_arrays

VERDICTS = ("better", "worse", "no clear difference")


Bars = tuple[float, float]


def outcomes(records: Sequence[Mapping[str, Any]], bars: Bars | None = None) -> dict[tuple, bool]:
    """Each question's handled-right flag, as the run went or replayed at ``bars`` (IsRel, IsSup)."""
    if bars is None:
        return {key(r): handled_right(r) for r in records}
    return {key(r): handled_right_at(r, *bars) for r in records}


def paired_outcomes(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], *, a_bars: Bars | None = None,
                    b_bars: Bars | None = None, shared_only: bool = False) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, int]]:
    """Per kind and part, an (n, 2) array of handled-right flags of A and B on the same questions, and
    how many questions each run asked that the other did not; ``shared_only``: on the questions both
    asked (a run made before the suite gained a part)."""
    right_a, right_b = outcomes(a, a_bars), outcomes(b, b_bars)
    shared = right_a.keys() & right_b.keys()
    only_a, only_b = len(right_a.keys() - shared), len(right_b.keys() - shared)
    if (only_a or only_b) and not (shared_only and shared):
        raise SystemExit(f"the two runs asked different questions ({only_a} only in A, {only_b} only in B): "
                         "compare runs of the same --split, --kinds, --n-squad and --seed, or pass --shared-only")
    out: dict[str, dict[str, list]] = {}
    for k in sorted(shared):
        kind, _split, part, _question = k
        out.setdefault(kind, {}).setdefault(part, []).append((right_a[k], right_b[k]))
    paired = {kind: {p: np.array(parts[p], dtype=float) for p in PARTS if p in parts} for kind, parts in out.items()}
    return paired, {"a": only_a, "b": only_b}


def by_source(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], *, a_bars: Bars | None = None,
              b_bars: Bars | None = None) -> dict[str, dict[str, dict[str, dict[str, int]]]]:
    """Per kind, source document and part: questions both runs asked about that document and how many
    each handled right (questions of one document move together, which a question bootstrap does not see)."""
    right_a, right_b = outcomes(a, a_bars), outcomes(b, b_bars)
    out: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
    for r in a:
        k = key(r)
        if not r.get("source") or k not in right_b:
            continue
        cell = out.setdefault(r["kind"], {}).setdefault(r["source"], {}).setdefault(r["part"], {"n": 0, "a": 0, "b": 0})
        cell["n"] += 1
        cell["a"] += int(right_a[k])
        cell["b"] += int(right_b[k])
    return {kind: dict(sorted(sources.items())) for kind, sources in out.items()}


def mean_share(parts: Mapping[str, np.ndarray], column: int) -> float:
    return float(np.mean([rows[:, column].mean() for rows in parts.values()]))


def compare_kind(parts: Mapping[str, np.ndarray], *, n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Parts handled right by A and B, their mean shares and B - A with a paired bootstrap interval."""
    rng = np.random.default_rng(seed)
    diff = mean_share(parts, 1) - mean_share(parts, 0)
    draws = np.zeros(n_resamples)
    for rows in parts.values():
        idx = rng.integers(0, len(rows), size=(n_resamples, len(rows)))
        draws += rows[idx, 1].mean(axis=1) - rows[idx, 0].mean(axis=1)
    draws /= len(parts)
    lo, hi = (float(x) for x in np.percentile(draws, [2.5, 97.5])) if n_resamples else (diff, diff)
    verdict = VERDICTS[0] if lo > 0 else VERDICTS[1] if hi < 0 else VERDICTS[2]
    return {"parts": {p: {"n": len(rows), "a": int(rows[:, 0].sum()), "b": int(rows[:, 1].sum())} for p, rows in parts.items()},
            "mean_share": {"a": mean_share(parts, 0), "b": mean_share(parts, 1)},
            "difference": {"value": diff, "ci95": [lo, hi]}, "verdict": verdict}


def paired_ranking(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Per kind, a (4, n) array over the questions both runs asked (noise-only runs left out): A's good
    flags and confidences, then B's (:func:`ranking_arrays`), in one question order."""
    by_key_a = {key(r): r for r in a if r["part"] != "noise_only"}
    by_key_b = {key(r): r for r in b if r["part"] != "noise_only"}
    out: dict[str, list] = {}
    for k in sorted(by_key_a.keys() & by_key_b.keys()):
        out.setdefault(k[0], []).append(k)
    ranked = {}
    for kind, keys in out.items():
        good_a, conf_a = ranking_arrays([outcome(by_key_a[k]) for k in keys])
        good_b, conf_b = ranking_arrays([outcome(by_key_b[k]) for k in keys])
        ranked[kind] = np.vstack([good_a, conf_a, good_b, conf_b])
    return ranked


def _aurc(good: np.ndarray, conf: np.ndarray) -> float:
    return float(risk_coverage_arrays(good, conf)[1].mean())


def compare_ranking(ranked: np.ndarray, *, n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """A's and B's AURC on one kind's questions and B - A with a paired bootstrap interval (the same
    resampled questions for both); ``better`` when B's is clearly lower."""
    rng = np.random.default_rng(seed)
    a, b = _aurc(ranked[0], ranked[1]), _aurc(ranked[2], ranked[3])
    n = ranked.shape[1]
    draws = np.array([_aurc(ranked[2, i], ranked[3, i]) - _aurc(ranked[0, i], ranked[1, i])
                      for i in rng.integers(0, n, size=(n_resamples, n))])
    lo, hi = (float(x) for x in np.percentile(draws, [2.5, 97.5])) if n_resamples else (b - a, b - a)
    verdict = VERDICTS[0] if hi < 0 else VERDICTS[1] if lo > 0 else VERDICTS[2]
    return {"n": n, "aurc": {"a": a, "b": b}, "difference": {"value": b - a, "ci95": [lo, hi]}, "verdict": verdict}


def compare(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], *, a_bars: Bars | None = None,
            b_bars: Bars | None = None, n_resamples: int = 2000, seed: int = 0, shared_only: bool = False) -> dict[str, Any]:
    """Each kind's parts handled right (the verdict), its ranking (AURC, reported beside it) and its parts
    per source document."""
    paired, left_out = paired_outcomes(a, b, a_bars=a_bars, b_bars=b_bars, shared_only=shared_only)
    ranked = paired_ranking(a, b)
    kinds = {kind: {**compare_kind(paired[kind], n_resamples=n_resamples, seed=seed),
                    **({"ranking": compare_ranking(ranked[kind], n_resamples=n_resamples, seed=seed)}
                       if kind in ranked else {})}
             for kind in in_kind_order(paired)}
    return {"kinds": kinds, "b_better_on_every_kind": all(v["verdict"] == "better" for v in kinds.values()),
            "b_worse_on_some_kind": any(v["verdict"] == "worse" for v in kinds.values()), "left_out": left_out,
            "by_source": by_source(a, b, a_bars=a_bars, b_bars=b_bars)}


def overall(result: Mapping[str, Any]) -> str:
    """One line on the comparison: where B is clearly better or worse, naming the kinds."""
    better, worse = ([k for k, e in result["kinds"].items() if e["verdict"] == v] for v in VERDICTS[:2])
    if result["b_better_on_every_kind"]:
        return "B better on every kind"
    if worse:
        return f"B worse on {', '.join(worse)}" + (f" (better on {', '.join(better)})" if better else "")
    if better:
        return f"B better on {', '.join(better)} and worse on none"
    return "no clear difference on any kind"


def load_run(folder: Path) -> list[dict[str, Any]]:
    records = read_records(folder / "records.jsonl")
    if not records:
        raise SystemExit(f"{folder} has no records.jsonl from benchmarks/trust_suite.py")
    return records


def calibration_bars(path: Path | None) -> Bars | None:
    if path is None:
        return None
    try:
        cal = AbstentionCalibration.load(path)
    except CalibrationError as err:
        raise SystemExit(str(err)) from None
    return cal.abstain_isrel, cal.abstain_issup


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="the trust-suite run to compare against (e.g. the shipped model's)")
    ap.add_argument("b", type=Path, help="the candidate's run, on the same questions")
    ap.add_argument("--a-calibration", type=Path, help="replay A at this calibration's bars")
    ap.add_argument("--b-calibration", type=Path, help="replay B at this calibration's bars")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shared-only", action="store_true",
                    help="compare on the questions both runs asked (one made before the suite gained a part)")
    ap.add_argument("--by-source", action="store_true",
                    help="also print each part per source document (e.g. per SQuAD article)")
    ap.add_argument("--json", type=Path, help="also write the comparison here")
    args = ap.parse_args(argv)
    run = Run("trust_compare")
    if args.resamples < 0:
        ap.error("--resamples must be at least 0")
    a_bars, b_bars = calibration_bars(args.a_calibration), calibration_bars(args.b_calibration)
    result = compare(load_run(args.a), load_run(args.b), a_bars=a_bars, b_bars=b_bars, n_resamples=args.resamples,
                     seed=args.seed, shared_only=args.shared_only)
    left_out = result["left_out"]
    if any(left_out.values()):
        print(f"compared on the questions both runs asked; left out {left_out['a']} only in A, {left_out['b']} only in B")
    result.update(a_bars=a_bars, b_bars=b_bars)
    for kind, v in result["kinds"].items():
        parts = "  ".join(f"{p} {c['a']}->{c['b']}/{c['n']}" for p, c in v["parts"].items())
        d = v["difference"]
        print(f"{kind:9s} {parts} | mean share {v['mean_share']['a']:.3f} -> {v['mean_share']['b']:.3f}, "
              f"B-A {d['value']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]: {v['verdict']}")
        if rank := v.get("ranking"):
            d = rank["difference"]
            print(f"{'':9s} ranking: AURC {rank['aurc']['a']:.3f} -> {rank['aurc']['b']:.3f} (n {rank['n']}, lower is better), "
                  f"B-A {d['value']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]: {rank['verdict']}")
        for source, parts_of in (result["by_source"].get(kind, {}) if args.by_source else {}).items():
            print(f"{'':9s} {source}: " + "  ".join(f"{p} {c['a']}->{c['b']}/{c['n']}" for p, c in parts_of.items()))
    print(overall(result))
    if args.json:
        run.write(args.json, vars(args), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
