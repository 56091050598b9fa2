"""Run several systems on the same questions, resumably, and write the report, table and plots.

Layout of the output directory::

    DIR/run.json                    what was run (data set, model, settings); checked on resume
    DIR/predictions/SYSTEM.jsonl    one record per finished question (appended as it finishes)
    DIR/predictions/SYSTEM@noise.jsonl  the same system given only passages without the answer
                                    (``negative_rejection``: RGB's noise-only test)
    DIR/chroma/                     the pooled passage collection (pooled retrieval only)
    DIR/report.json, DIR/report.md  metrics per system, sweeps, the Markdown table
    DIR/sweep_threshold.png, DIR/sweep_issup.png, DIR/sweep_abstention.png
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ... import tokens as T
from ...abstention import DEFAULT_BARS, bars_for
from ...config import SelfRAGConfig
from ...prompts import build_instruction, format_prompt
from ...retrieval import default_embeddings
from ...scoring import retrieve_probability
from ..common.cache import CachingLM
from ..common.errors import EvalError
from ..common.records import read_records, repair_records
from ..common.selective import Outcome, plot_risk_coverage, trust_report
from . import abstention as A
from . import metrics as M
from . import sweeps as S
from .data import Dataset, Example
from .report import system_metrics, write_report
from .retrieval import (
    corpus_key,
    empty_retriever,
    given_candidates,
    pooled_candidates,
    pooled_store,
)
from .systems import SystemSpec, make_runner, prediction_record


@dataclass
class EvalOptions:
    """What to run. ``retrieval``: auto (given ctxs when the data has them, else pooled), pooled or given."""

    systems: list[SystemSpec]
    retrieval: str = "auto"
    k: int = 5
    overrides: dict[str, Any] = field(default_factory=dict)
    sweeps: bool = True
    model_name: str = ""
    cache: bool = True
    negative_rejection: bool = False
    bootstrap: int = 1000


#: Suffix of a system's noise-only run (negative rejection).
NOISE = "@noise"
#: Candidates searched per noise-only question: this many times ``k``.
NOISE_POOL_FACTOR = 8


def noise_systems(options: EvalOptions) -> list[SystemSpec]:
    """The systems run noise-only too: every one that reads passages, when negative rejection is on."""
    return [s for s in options.systems if s.uses_retrieval] if options.negative_rejection else []


def noise_candidates(examples: Sequence[Example], pool: Mapping[str, list[Any]], k: int) -> dict[str, list[Any]]:
    """Per example with gold answers, the first ``k`` of its candidate ``pool`` that hold none of
    its answers (RGB's noise-only passages)."""
    return {ex.id: A.noise_only(pool.get(ex.id, []), lambda d, ex=ex: bool(M.match(
        f"{d.metadata.get('title', '')} {d.page_content}", ex.answers)), k)
        for ex in examples if ex.answers and not ex.options}


def _check_resume(out: Path, run_info: Mapping[str, Any]) -> None:
    path = out / "run.json"
    if path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        for key in ("dataset_path", "format", "model", "settings", "retrieval", "corpus"):
            if key in before and before[key] != run_info.get(key):
                raise EvalError(
                    f"{out} holds a run with a different {key} ({before.get(key)!r} vs {run_info.get(key)!r}); "
                    "use another --out directory or delete it"
                )
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run_info, indent=2) + "\n", encoding="utf-8")


def resolve_retrieval(dataset: Dataset, choice: str) -> str:
    if choice not in ("auto", "pooled", "given"):
        raise EvalError(f"retrieval must be auto, pooled or given, not {choice!r}")
    if choice == "auto":
        return "given" if dataset.has_given_passages else "pooled"
    if choice == "given" and not dataset.has_given_passages:
        raise EvalError(f"{dataset.name} has no given passages (ctxs); use --retrieval pooled")
    return choice


def run_evaluation(
    dataset: Dataset,
    examples: Sequence[Example],
    lm: Any,
    out: Path,
    options: EvalOptions,
    *,
    dataset_path: str = "",
    embeddings: Any = None,
    chain_factory: Callable[..., Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run every system of ``options`` on ``examples``, resuming finished ones; returns the report."""
    out = Path(out)
    retrieval = resolve_retrieval(dataset, options.retrieval)
    needs_passages = any(s.uses_retrieval for s in options.systems)
    if retrieval == "pooled" and needs_passages and not dataset.corpus:
        raise EvalError(
            f"{dataset.name} has no passages of its own to retrieve from; pass --corpus FILE or run only "
            "--systems no_retrieval"
        )
    run_info = {
        "dataset": dataset.name,
        "dataset_path": dataset_path,
        "format": dataset.format,
        "model": options.model_name,
        "retrieval": retrieval,
        "settings": {"k": options.k, **bars_for(lm)[0], **options.overrides,
                     **({"negative_rejection": True} if options.negative_rejection else {})},
        "corpus": corpus_key(dataset.corpus) if retrieval == "pooled" else None,
    }
    _check_resume(out, run_info)
    pred_dir = out / "predictions"
    pred_dir.mkdir(exist_ok=True)
    noisy = noise_systems(options)
    names = [s.name for s in options.systems] + [s.name + NOISE for s in noisy]
    for name in names:
        repair_records(pred_dir / f"{name}.jsonl")
    done = {name: read_records(pred_dir / f"{name}.jsonl") for name in names}
    noise_ids = {ex.id for ex in examples if ex.answers and not ex.options}
    jobs = [(s.name, s, False) for s in options.systems] + [(s.name + NOISE, s, True) for s in noisy]
    wanted = {name: ({ex.id for ex in examples} if not noise else noise_ids) for name, _, noise in jobs}
    pending = [ex for ex in examples if any(ex.id not in done[name] and ex.id in wanted[name] for name in names)]

    candidates: dict[str, list[Any]] = {}
    noise: dict[str, list[Any]] = {}
    retrieval_s = 0.0
    retriever: Any = empty_retriever()
    if needs_passages and pending:
        depth = options.k * (NOISE_POOL_FACTOR if noisy else 1)
        if retrieval == "given":
            pool = given_candidates(pending, depth)
        else:
            embeddings = embeddings if embeddings is not None else default_embeddings()
            store = pooled_store(dataset.corpus, out / "chroma", embeddings)
            retriever = store.as_retriever(search_kwargs={"k": options.k})
            pool, retrieval_s = pooled_candidates(store, embeddings, pending, depth)
        candidates = {i: docs[: options.k] for i, docs in pool.items()}
        if noisy:
            noise = noise_candidates(pending, pool, options.k)

    model = CachingLM(lm) if options.cache else lm
    chain = None
    if pending and any(s.kind == "chain" for s in options.systems):
        factory = chain_factory or _default_chain_factory
        chain = factory(model, retriever, k=options.k, **options.overrides)
    overrides = {"k": options.k, **options.overrides}
    runners = {s.name: make_runner(s, model, chain, overrides) for s in options.systems}

    handles = {name: (pred_dir / f"{name}.jsonl").open("a", encoding="utf-8") for name in names}
    total = sum(ex.id not in done[name] and ex.id in wanted[name] for ex in pending for name in names)
    try:
        with tqdm(total=total, desc=f"eval {dataset.name}", unit="answer", disable=not progress or not total) as bar:
            for ex in pending:
                for name, spec, is_noise in jobs:
                    if ex.id in done[name] or ex.id not in wanted[name]:
                        continue
                    bar.set_postfix_str(name, refresh=False)
                    given = (noise if is_noise else candidates).get(ex.id, [])
                    record = _run_one(runners[spec.name], ex, given, retrieval_s, model)
                    handles[name].write(json.dumps(record) + "\n")
                    handles[name].flush()
                    done[name][ex.id] = record
                    bar.update(1)
                if isinstance(model, CachingLM):
                    model.clear()
    finally:
        for handle in handles.values():
            handle.close()

    report = build_report(examples, done, options, run_info, lm=lm)
    report["notes"].append(
        "latency: seconds per query, including the per-query share of retrieval when the system retrieved"
        + ("; model calls shared between systems are charged to every system that made them" if options.cache else "")
    )
    report["sweeps"]["plots"] = save_plots(report, out)
    write_report(out, report)
    return report


def _run_one(
    runner: Callable[..., Mapping[str, Any]], ex: Example, passages: list[Any], retrieval_s: float, model: Any
) -> dict:
    """One system on one question. Latency counts the cost of model calls replayed from the cache
    (what the system would have spent alone) and the per-question share of retrieval."""
    from ...errors import SelfRAGError
    from ...lm import ReflectionLMError

    replayed = getattr(model, "replayed_s", 0.0)
    started = time.perf_counter()
    try:
        output = runner(ex, passages)
    except (SelfRAGError, ReflectionLMError) as exc:
        record = prediction_record(ex, {"answer": ""}, time.perf_counter() - started)
        record["error"] = f"{type(exc).__name__}: {exc}"
        return record
    latency = time.perf_counter() - started + getattr(model, "replayed_s", 0.0) - replayed
    if output.get("retrieved"):
        latency += retrieval_s
    return prediction_record(ex, output, latency)


def _default_chain_factory(lm: Any, retriever: Any, **settings: Any) -> Any:
    try:
        from ...chain import SelfRAGChain
    except ImportError as exc:  # the chain module ships with the package; guard a broken install
        raise EvalError(f"SelfRAGChain is unavailable: {exc}") from exc
    return SelfRAGChain.from_retriever(lm, retriever, **settings)


def build_report(
    examples: Sequence[Example],
    done: Mapping[str, Mapping[str, Mapping[str, Any]]],
    options: EvalOptions,
    run_info: Mapping[str, Any],
    lm: Any = None,
) -> dict[str, Any]:
    """Metrics per system on ``examples`` plus both sweeps (when their systems were run)."""
    ids = {ex.id for ex in examples}
    systems = {}
    for spec in options.systems:
        records = {i: r for i, r in done[spec.name].items() if i in ids}
        metrics = system_metrics(examples, records)
        metrics["errors"] = sum(1 for r in records.values() if r.get("error"))
        systems[spec.name] = {"metrics": metrics, "n": len(records), "description": spec.description}
    report: dict[str, Any] = {
        "run": {
            **run_info,
            "n_questions": len(examples),
            "n_with_gold_answers": sum(1 for ex in examples if ex.answers and not ex.options),
            "n_unanswerable": sum(1 for ex in examples if ex.answerable is False),
            "n_multiple_choice": sum(1 for ex in examples if ex.options),
        },
        "systems": systems,
        "sweeps": {},
        "notes": [],
    }
    for spec in noise_systems(options):
        records = [r for i, r in done.get(spec.name + NOISE, {}).items() if i in ids]
        systems[spec.name]["metrics"]["negative_rejection"] = M.mean(float(bool(r.get("abstained"))) for r in records)
        systems[spec.name]["n_noise"] = len(records)
    for spec in options.systems:
        if spec.kind == "chain":
            items = trust_outcomes(examples, done[spec.name], done.get(spec.name + NOISE, {}))
            if items:
                systems[spec.name]["trust"] = trust_report(items, n_resamples=options.bootstrap)
    if options.sweeps:
        _add_sweeps(report, examples, done, options, lm)
    return report


def trust_outcomes(examples: Sequence[Example], normal: Mapping[str, Mapping[str, Any]],
                   noise: Mapping[str, Mapping[str, Any]]) -> list[Outcome]:
    """One chain system's runs as selective-QA outcomes: its answerable questions (right = the answer,
    or the one it would have given when it abstained, matches a gold answer), the data set's
    unanswerable questions and its noise-only runs (never right when answered); the chain's own
    ``confidence`` ranks them."""
    items = []
    for ex in examples:
        if ex.options:
            continue
        record = normal.get(ex.id)
        if record is not None and (ex.answers or ex.answerable is False):
            items.append(_outcome(record, ex.answers, answerable=bool(ex.answers)))
        if ex.id in noise:
            items.append(_outcome(noise[ex.id], ex.answers, answerable=False))
    return items


def _outcome(record: Mapping[str, Any], answers: Sequence[str], *, answerable: bool) -> Outcome:
    right = answerable and bool(M.match(A.chosen_text(record), answers))
    return Outcome(answerable=answerable, answered=not record.get("abstained"), right=right,
                   confidence=record.get("confidence"))


def abstention_sweep(examples: Sequence[Example], normal: Mapping[str, Mapping[str, Any]],
                     noise: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Answer rate, match and rejection over the abstention bars, replayed from the traces of one
    system's normal and noise-only runs (:func:`langchain_selfrag.evaluation.qa.abstention.sweep`)."""
    answerable = [ex for ex in examples if ex.answers and not ex.options]
    sets = {
        "answerable": [{"signals": A.signals(normal[ex.id]),
                        "match": bool(M.match(A.chosen_text(normal[ex.id]), ex.answers))}
                       for ex in answerable if ex.id in normal],
        "noise_only": [{"signals": A.signals(noise[ex.id]), "match": None} for ex in answerable if ex.id in noise],
    }
    return A.sweep(sets)


def _add_sweeps(
    report: dict[str, Any],
    examples: Sequence[Example],
    done: Mapping[str, Mapping[str, Mapping[str, Any]]],
    options: EvalOptions,
    lm: Any,
) -> None:
    sweeps = report["sweeps"]
    closed = any(ex.options for ex in examples)
    sweeps["threshold_metric"] = "accuracy" if closed else "match"
    if "no_retrieval" in done and "selfrag_always" in done:
        probs = {
            i: float(r["retrieve_probability"])
            for i, r in done.get("selfrag_adaptive", {}).items()
            if r.get("retrieve_probability") is not None
        }
        missing = [ex for ex in examples if ex.id not in probs]
        if missing and lm is not None:
            probs.update(retrieve_probabilities(lm, missing))
        sweeps["threshold"] = S.threshold_sweep(examples, probs, done["no_retrieval"], done["selfrag_always"])
    else:
        report["notes"].append("threshold sweep needs the systems no_retrieval and selfrag_always")
    source = next((n for n in ("selfrag_always", "selfrag_adaptive") if n in done), None)
    if source is not None:
        w = options.overrides
        sweeps["issup_source"] = source
        sweeps["issup_weight"] = S.issup_sweep(
            examples, done[source], w_rel=float(w.get("w_rel", 1.0)), w_use=float(w.get("w_use", 0.5))
        )
    else:
        report["notes"].append("IsSup sweep needs selfrag_always or selfrag_adaptive")
    noisy = [s.name for s in noise_systems(options) if s.kind == "chain" and s.name + NOISE in done]
    source = next((n for n in ("selfrag_adaptive", "selfrag_always") if n in noisy), noisy[0] if noisy else None)
    if source is not None:
        sweeps["abstention_source"] = source
        sweeps["abstention"] = abstention_sweep(examples, done[source], done[source + NOISE])


def retrieve_probabilities(lm: Any, examples: Sequence[Example], batch_size: int = 8) -> dict[str, float]:
    """Normalised p([Retrieval]) at the first answer position of each example's Self-RAG prompt."""
    out: dict[str, float] = {}
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        prompts = [format_prompt(build_instruction(ex.question, ex.instruction, ex.options)) for ex in chunk]
        for ex, probs in zip(chunk, lm.candidate_probs(prompts, [T.NO_RETRIEVAL, T.RETRIEVAL])):
            out[ex.id] = retrieve_probability(probs)
    return out


def save_plots(report: Mapping[str, Any], out: Path) -> list[str]:
    """Write the sweep PNGs that the report has data for; returns their file names."""
    sweeps = report.get("sweeps") or {}
    name = report["run"].get("dataset", "")
    written = []
    if sweeps.get("threshold"):
        metric = sweeps["threshold_metric"]
        S.plot_threshold(sweeps["threshold"], out / "sweep_threshold.png", metric, f"{name}: {metric} vs retrieval")
        written.append("sweep_threshold.png")
    if sweeps.get("issup_weight"):
        S.plot_issup(sweeps["issup_weight"], out / "sweep_issup.png", f"{name}: IsSup weight")
        written.append("sweep_issup.png")
    trust = {name: entry["trust"] for name, entry in report["systems"].items() if entry.get("trust")}
    if trust:
        plot_risk_coverage(trust, out / "risk_coverage.png", f"{name}: risk-coverage (the chain's confidence)")
        written.append("risk_coverage.png")
    if sweeps.get("abstention"):
        settings = report["run"].get("settings") or {}
        A.plot_sweep(sweeps["abstention"], "answerable", ["noise_only"], out / "sweep_abstention.png",
                     issup_bar=float(settings.get("abstain_issup", DEFAULT_BARS["abstain_issup"])),
                     chosen=float(settings.get("abstain_isrel", DEFAULT_BARS["abstain_isrel"])),
                     title=f"{name}: abstention bars ({sweeps['abstention_source']})")
        written.append("sweep_abstention.png")
    return written
