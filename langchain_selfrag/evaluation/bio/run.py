"""``selfrag eval bio``: self-restraint on biographies ("LLMs can learn self-restraint through iterative
self-reflection", section 4), resumably.

For every question (held-out entities of the split, then invented people) each system answers
once; the answer is split into claims and the judge labels each claim. Answers and labels are
kept apart, so a rerun reuses every answer and a rerun with another judge or splitter only judges.

Layout of the output directory::

    DIR/run.json                             what was run; checked on resume
    DIR/answers/SYSTEM.jsonl                 one answer per question (appended as it finishes)
    DIR/judgments/JUDGE+SPLITTER/SYSTEM.jsonl claims and labels per answered question
    DIR/report.json, DIR/report.md           metrics with bootstrap intervals, the judge caveat
    DIR/bio_tradeoff.png                     abstention vs accuracy across rho*, utility vs rho*
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ...restraint.claims import ClaimSplitter, SentenceSplitter
from ..common.cache import CachingLM
from ..common.errors import EvalError
from ..common.records import read_records, repair_records
from . import report as R
from .data import BioData, BioQuestion
from .judges import IsSupJudge, OverlapJudge, describe
from .judges.agreement import agreement, load_labelled
from .metrics import UTILITY_RHOS, Judged
from .systems import (
    BioOutput,
    BioRunner,
    BioSystemSpec,
    chain_runner,
    research_runner,
    strip_refusals,
)


@dataclass
class BioOptions:
    """What to run: the systems, the run-wide Self-RAG settings and the report's statistics."""

    systems: list[BioSystemSpec]
    split: str = "test"
    utility_rhos: tuple[float, ...] = UTILITY_RHOS
    settings: dict[str, Any] = field(default_factory=lambda: {"k": 5, "max_new_tokens": 160})
    model_name: str = ""
    model_paths: dict[str, str] = field(default_factory=dict)
    cache: bool = True
    n_resamples: int = 1000
    seed: int = 0
    research_path: str = ""
    #: The judge when none is passed: ``overlap`` (lexical, shares nothing with the restraint scorer)
    #: or ``issup`` (the reflection model's IsSup: self-graded).
    judge_kind: str = "overlap"
    judge_threshold: float = 0.5
    judge_passages: int | None = None
    #: Hand-labelled claims (:mod:`.judges.agreement`): when given, every judge's agreement goes in the report.
    judge_labels: str = ""

    def __post_init__(self) -> None:
        if self.judge_kind not in JUDGE_KINDS:
            raise EvalError(f"judge must be one of {', '.join(JUDGE_KINDS)}, not {self.judge_kind!r}")


#: The judges run_bio builds itself (a chat judge is passed in).
JUDGE_KINDS = ("overlap", "issup")


def default_judge(kind: str, lm: Any, options: BioOptions) -> Any:
    """The judge of ``kind``: :class:`OverlapJudge`, or :class:`IsSupJudge` over ``lm``."""
    if kind == "issup":
        return IsSupJudge(lm, threshold=options.judge_threshold, max_passages=options.judge_passages,
                          model_name=options.model_name)
    return OverlapJudge()


def judge_agreements(judge: Any, lm: Any, options: BioOptions) -> list[dict[str, Any]]:
    """Agreement with ``options.judge_labels`` of the run's judge, then of the built-in judges it is not."""
    claims = load_labelled(options.judge_labels)
    judges = [judge] + [default_judge(kind, lm, options) for kind in JUDGE_KINDS
                        if not isinstance(judge, OverlapJudge if kind == "overlap" else IsSupJudge)]
    return [agreement(j, claims) for j in judges]


# -- resume -------------------------------------------------------------------------------------
def restraint_calibration(lm: Any, systems: Sequence[Any]) -> dict[str, Any] | None:
    """The calibration ``restrain``'s default scorer applies with ``lm`` when some system restrains
    (None otherwise): restrained answers made under another calibration must not be resumed."""
    from ...restraint.calibration import calibration_for

    if not any((getattr(s, "settings", None) or {}).get("rho") is not None for s in systems):
        return None
    calibration = calibration_for(lm)
    return calibration.to_dict() if calibration is not None else None


def _check_resume(out: Path, info: dict[str, Any]) -> None:
    """Refuse a directory holding a run with other data, model or settings; merge the systems."""
    path = out / "run.json"
    if path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        before.setdefault("invented_distractors", False)  # runs written before the option had none
        for key in ("task", "data", "split_seed", "invented_distractors", "model", "settings",
                    "restraint_calibration"):
            if key in before and before[key] != info.get(key):
                raise EvalError(f"{out} holds a run with a different {key} ({before.get(key)!r} vs "
                                f"{info.get(key)!r}); use another --out directory or delete it")
        for group in ("systems", "models", "research"):
            old, new = before.get(group) or {}, info.get(group) or {}
            for name in set(old) & set(new):
                if old[name] != new[name]:
                    raise EvalError(f"{out} holds answers of {name!r} from a different setup "
                                    f"({old[name]!r} vs {new[name]!r}); use another --out or another name")
            info[group] = {**old, **new}
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def _records(path: Path) -> dict[str, dict[str, Any]]:
    repair_records(path)
    return read_records(path)


# -- running ------------------------------------------------------------------------------------
def _default_chain_factory(lm: Any, **settings: Any) -> Any:
    """The chain of the bio systems: the paper's knobs (``SelfRAGConfig.paper()``: abstention is
    what self-restraint is compared on, so the chain itself never abstains on evidence)."""
    from ...chain import SelfRAGChain
    from ...config import PAPER_SETTINGS

    return SelfRAGChain.from_retriever(lm, None, **{**PAPER_SETTINGS, **settings})


def _run_one(runner: BioRunner, question: BioQuestion, lms: Sequence[Any]) -> dict[str, Any]:
    """One answer record; latency includes the cost of model calls replayed from the cache."""
    from ...errors import SelfRAGError
    from ...lm import ReflectionLMError

    replayed = sum(getattr(lm, "replayed_s", 0.0) for lm in lms)
    started = time.perf_counter()
    try:
        output: BioOutput = runner(question)
    except (SelfRAGError, ReflectionLMError, LookupError) as exc:
        return {"id": question.id, "entity": question.entity, "answer": "", "abstained": False,
                "error": f"{type(exc).__name__}: {exc}", "latency_s": time.perf_counter() - started}
    latency = time.perf_counter() - started + sum(getattr(lm, "replayed_s", 0.0) for lm in lms) - replayed
    return {"id": question.id, "entity": question.entity, **output, "latency_s": latency}


#: A claim has at least this many words, one of them lower-case (a verb or function word).
MIN_CLAIM_WORDS = 3
_WORDS = re.compile(r"[^\W\d_]+")


def is_claim(text: str) -> bool:
    """False for fragments that state nothing: fewer than :data:`MIN_CLAIM_WORDS` words, or only
    capitalised words (a bare name or title such as "Bram Vellacott")."""
    words = _WORDS.findall(text or "")
    return len(words) >= MIN_CLAIM_WORDS and any(w[0].islower() for w in words)


def judge_answer(record: Mapping[str, Any], question: BioQuestion, judge: Any, splitter: ClaimSplitter) -> dict:
    """Claims of an answer and their labels (none for an abstention); fragments that are no claim
    (:func:`is_claim`) are dropped and counted."""
    if record.get("abstained"):
        return {"id": question.id, "abstained": True, "claims": [], "labels": [], "fragments": []}
    _, text = strip_refusals(str(record.get("answer") or ""))
    pieces = list(splitter.split(text, entity=question.entity)) if text else []
    claims = [c for c in pieces if is_claim(c)]
    labels = list(judge(question.entity, claims, question.passages)) if claims else []
    if len(labels) != len(claims):
        raise EvalError(f"the judge gave {len(labels)} labels for {len(claims)} claims")
    return {"id": question.id, "abstained": False, "claims": claims,
            "labels": [None if label is None else bool(label) for label in labels],
            "fragments": [c for c in pieces if not is_claim(c)]}


def splitter_name(splitter: Any) -> str:
    return "sentence" if isinstance(splitter, SentenceSplitter) else type(splitter).__name__


def make_runners(options: BioOptions, base: Any, models: Mapping[str, Any],
                 research: Mapping[str, Mapping[str, Any]] | None,
                 chain_factory: Callable[..., Any] | None = None) -> dict[str, BioRunner]:
    """One runner per system; chain systems on the same LM share one chain."""
    factory = chain_factory or _default_chain_factory
    chains: dict[str | None, Any] = {}
    runners: dict[str, BioRunner] = {}
    for spec in options.systems:
        if spec.kind == "research":
            runners[spec.name] = research_runner(research or {})
            continue
        if spec.model not in chains:
            chains[spec.model] = factory(models[spec.model] if spec.model else base, **options.settings)
        runners[spec.name] = chain_runner(spec, chains[spec.model])
    return runners


def run_bio(
    data: BioData,
    questions: Sequence[BioQuestion],
    lm: Any,
    out: Path,
    options: BioOptions,
    *,
    models: Mapping[str, Any] | None = None,
    judge: Any = None,
    splitter: ClaimSplitter | None = None,
    research: Mapping[str, Mapping[str, Any]] | None = None,
    chain_factory: Callable[..., Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Answer, judge and report every system of ``options`` on ``questions``; returns the report.

    ``lm``: the base reflection LM (prompted, safety-prompted, Self-RAG systems and the IsSup
    judge); ``models``: the LM of each trained system; ``judge``: default ``options.judge_kind``
    (:func:`default_judge`: the lexical :class:`OverlapJudge`, or :class:`IsSupJudge` over ``lm``
    with ``options.judge_threshold`` and ``options.judge_passages``); ``splitter``: default
    :class:`SentenceSplitter`; ``research``: ReSearch records by entity.
    """
    out = Path(out)
    models = dict(models or {})
    missing = [s.model for s in options.systems if s.model is not None and s.model not in models]
    if missing:
        raise EvalError(f"no model loaded for system(s) {', '.join(missing)}")
    if any(s.kind == "research" for s in options.systems) and research is None:
        raise EvalError("the research system needs ReSearch records (--research FILE)")
    base = CachingLM(lm) if options.cache else lm
    wrapped = {name: (CachingLM(m) if options.cache else m) for name, m in models.items()}
    if judge is None:
        judge = default_judge(options.judge_kind, base, options)
    splitter = splitter or SentenceSplitter()
    info = {
        "task": "bio",
        "data": data.path,
        "split_seed": data.seed,
        "invented_distractors": data.invented_distractors,
        "model": options.model_name,
        "settings": dict(options.settings),
        "systems": {s.name: s.key() for s in options.systems},
        "models": {s.model: options.model_paths.get(s.model, "") for s in options.systems if s.model},
        "research": {"research": options.research_path} if research is not None else {},
        "restraint_calibration": restraint_calibration(lm, options.systems),
    }
    _check_resume(out, info)
    judge_dir = out / "judgments" / f"{judge.name}+{splitter_name(splitter)}"
    for folder in (out / "answers", judge_dir):
        folder.mkdir(parents=True, exist_ok=True)
    answers = {s.name: _records(out / "answers" / f"{s.name}.jsonl") for s in options.systems}
    labels = {s.name: _records(judge_dir / f"{s.name}.jsonl") for s in options.systems}

    def todo(q: BioQuestion, name: str) -> bool:  # failed answers are tried again
        record = answers[name].get(q.id)
        return record is None or bool(record.get("error")) or q.id not in labels[name]

    pending = [(q, s) for q in questions for s in options.systems if todo(q, s.name)]
    runners = make_runners(options, base, wrapped, research, chain_factory) if pending else {}
    lms = [base, *wrapped.values()]
    handles = {}
    try:
        with tqdm(total=len(pending), desc=f"eval bio ({options.split})", unit="answer",
                  disable=not progress or not pending) as bar:
            current = None
            for q, spec in pending:
                if current is not None and q.id != current:
                    for m in lms:
                        if isinstance(m, CachingLM):
                            m.clear()
                current = q.id
                bar.set_postfix_str(spec.name, refresh=False)
                if q.id not in answers[spec.name] or answers[spec.name][q.id].get("error"):
                    record = _run_one(runners[spec.name], q, lms)
                    _append(handles, out / "answers" / f"{spec.name}.jsonl", record)
                    answers[spec.name][q.id] = record
                record = answers[spec.name][q.id]
                if not record.get("error") and q.id not in labels[spec.name]:
                    judged = judge_answer(record, q, judge, splitter)
                    _append(handles, judge_dir / f"{spec.name}.jsonl", judged)
                    labels[spec.name][q.id] = judged
                bar.update(1)
    finally:
        for handle in handles.values():
            handle.close()
    report = build_report(data, questions, answers, labels, options, judge=judge, splitter=splitter)
    if options.judge_labels:
        report["judge_agreement"] = judge_agreements(judge, base, options)
        report["run"]["judge_labels"] = options.judge_labels
    report["plots"] = save_plot(report, out)
    R.write_report(out, report)
    return report


def _append(handles: dict[Path, Any], path: Path, record: Mapping[str, Any]) -> None:
    if path not in handles:
        handles[path] = path.open("a", encoding="utf-8")
    handles[path].write(json.dumps(record) + "\n")
    handles[path].flush()


# -- the report ---------------------------------------------------------------------------------
def build_report(data: BioData, questions: Sequence[BioQuestion], answers: Mapping[str, Mapping[str, Any]],
                 labels: Mapping[str, Mapping[str, Any]], options: BioOptions, *, judge: Any,
                 splitter: Any) -> dict[str, Any]:
    """Metrics with intervals per system and subset, plus the run facts and the caveats."""
    invented = {q.id: q.invented for q in questions}
    systems: dict[str, Any] = {}
    judged_items: dict[str, dict[str, Judged]] = {}
    for spec in options.systems:
        items = judged_items[spec.name] = {}
        errors = fragments = 0
        for q in questions:
            record, judged = answers[spec.name].get(q.id), labels[spec.name].get(q.id)
            if record is None:
                continue
            if record.get("error"):
                errors += 1
                continue
            if judged is not None:
                items[q.id] = Judged(bool(judged["abstained"]), tuple(judged["labels"]))
                fragments += len(judged.get("fragments") or [])
        latencies = [float(answers[spec.name][q.id]["latency_s"]) for q in questions
                     if q.id in answers[spec.name] and answers[spec.name][q.id].get("latency_s") is not None]
        flags = [bool(answers[spec.name][q.id]["retrieved"]) for q in questions
                 if "retrieved" in answers[spec.name].get(q.id, {})]
        systems[spec.name] = {
            "description": spec.description,
            "rho": spec.settings.get("rho"),
            "model": spec.model,
            "n": len(items),
            "errors": errors,
            "fragments": fragments,
            "latency_mean_s": sum(latencies) / len(latencies) if latencies else None,
            # share of answers where the model chose to retrieve (None when the system does not record it)
            "retrieved_share": sum(flags) / len(flags) if flags else None,
            "metrics": R.system_entry(items, invented, options.utility_rhos, n_resamples=options.n_resamples,
                                      seed=options.seed),
        }
    real = [q for q in questions if not q.invented]
    self_graded = isinstance(judge, IsSupJudge)
    caveats = [R.JUDGE_CAVEAT] if self_graded else [R.OVERLAP_CAVEAT] if isinstance(judge, OverlapJudge) else []
    report: dict[str, Any] = {
        "task": "bio",
        "run": {
            **data.info(),
            "split": options.split,
            "n_entities_evaluated": len(real),
            "n_invented_evaluated": len(questions) - len(real),
            "entities": [q.entity for q in real],
            "invented_names": [q.entity for q in questions if q.invented],
            "model": options.model_name,
            "models": dict(options.model_paths),
            "research": options.research_path or None,
            "judge": judge.name,
            "judge_description": describe(judge),
            "self_graded_judge": self_graded,
            "independent_judge": not self_graded,
            "splitter": ("one claim per sentence (SentenceSplitter)" if isinstance(splitter, SentenceSplitter)
                         else type(splitter).__name__),
            "settings": dict(options.settings),
            "utility_rhos": list(options.utility_rhos),
            "bootstrap": {"resamples": options.n_resamples, "seed": options.seed, "level": 0.95},
        },
        "systems": systems,
        "comparisons": R.comparisons(judged_items, invented, options.utility_rhos, n_resamples=options.n_resamples,
                                     seed=options.seed),
        "caveats": caveats,
        "notes": [
            ("Claims the judge could not label are left out of accuracy and utility (column 'unjudged' in "
            "report.json); answers that failed with an error are left out of every metric ('errors')."),
            ("An answer counts as an abstention when the system abstained or nothing but refusal sentences "
            "and questions is left of it."),
            (f"Pieces of fewer than {MIN_CLAIM_WORDS} words, or of capitalised words only (a bare name or title), "
             "are no claims: they are not judged and are counted in 'fragments'."),
        ],
        "plots": [],
    }
    unparsed = getattr(judge, "unparsed", 0)
    if unparsed:
        report["notes"].append(f"{unparsed} judge replies held no True/False verdict (labelled {judge.fallback}).")
    return report


def save_plot(report: Mapping[str, Any], out: Path) -> list[str]:
    """Write the trade-off PNG; [] (and a note) when matplotlib is not installed."""
    try:
        R.plot_tradeoff(report, out / R.PLOT_FILE)
    except ImportError:
        report["notes"].append("matplotlib is not installed: no plot (pip install matplotlib)")
        return []
    return [R.PLOT_FILE]
