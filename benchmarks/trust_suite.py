"""Trust suite: on several kinds of text, does the chain answer what the documents state and abstain on
what they do not?

Kinds (``benchmarks/trust/``): ``docs`` (22 packages' documentation as their authors wrote it: READMEs as
published on PyPI, and command-line pages, guides, API pages and changelogs from their sdists; markdown and
reStructuredText with badges, links and code; ``trust/docs/SOURCES.md``), ``news`` (news reports of
invented events), ``invented`` (short invented fact sheets: the project's two invented corpora) and
``squad`` (SQuAD 2.0 Wikipedia articles: ten of the train split in ``benchmarks/trust/squad`` validate, four
of ``../shared/data`` test; the test part is skipped without it). Each kind has a ``validation`` part
(for choices) and a ``test`` part (used for none), on different documents.

Parts of each kind: ``answerable`` (the answer is stated in one document; right = a gold answer in
the answer *and* that document cited), ``near_miss`` (asks a document's own subject a detail it does
not state; right = abstained), ``off_topic`` (real-world questions no document answers; right =
abstained), ``noise_only`` (the answerable questions again, with the retrieved passages filtered to
those holding no gold answer: RGB's noise-only test; right = abstained), and for ``squad`` also
``unanswerable`` (SQuAD 2.0's unanswerable questions of the same articles: ``--n-squad`` // 2 unless
``--n-squad-unanswerable`` says; the validation part's 348 come from two of its ten articles, see
``trust/squad/SOURCES.md``).

The docs kind's answerable questions have a ``type``: ``factoid`` (the default: right as above),
``howto`` ("How do I..."), ``explanation`` ("How does...", "Why...") or ``instruction`` ("Explain...",
"Describe..."), whose gold is the document's own ``sentences``: right = the answer's token F1 with them
(any one, or all together) at least 0.5, as ``project_docs.py`` scores an explanation, and that document
cited (:func:`~benchmarks.trust_loss.answer_right`). The summary counts each type apart (``types``).

Beside each part's share, the summary gives each kind's ``relevance_separation`` (per part, the AUC of
the best IsRel of answerable questions against that part's: what abstention has to work with) and
``reader_ceiling``: the answerable questions
whose chosen answer is right before any abstention (the bars off). In the suite's one-round runs
the bars do not change which answer is chosen, only whether it is given, so no bars can answer more
of them right than that. ``candidate_ceiling`` counts those where any candidate (one per passage
read) is right: no ranking of the candidates can answer more of them right with this reader.

``loss`` (printed as one table at the end) says where each answer is lost, per kind and part:
right, a wrong answer kept, or lost at retrieval, judgement, reading or support
(:mod:`benchmarks.trust_loss` defines the buckets). For it each answerable record keeps the ranks of
the chunks holding a gold answer among the passages read and among the store's top 20, and the
bars the run used. ``--summarize-only --reindex-ranks`` gives older records their ranks from the
documents indexed again as the run did them; ``--rescore-bars ISREL,ISSUP`` re-scores the saved
records at other bars without the model (written to ``OUT/summary-at-ISREL-ISSUP.json``).

Everything goes through the README's path: the kind's documents are indexed by ``selfrag index`` into
a fresh embedded Chroma store, opened with ``open_store`` and asked through
``SelfRAGChain.from_retriever(lm, store)`` with the default config (or ``--paper``). Each run's
answer, abstention, citations and critique trace go to ``OUT/records.jsonl`` (resumable); the
summary (per kind and part, and the selective-QA figures of
:mod:`langchain_selfrag.evaluation.common.selective` with bootstrap intervals) goes to
``OUT/summary.json`` and a risk-coverage plot to ``OUT/risk_coverage.png``::

    python benchmarks/trust_suite.py --split validation --out runs/trust/v4-validation
    python benchmarks/trust_suite.py --split test --out runs/trust/v4-test --json benchmarks/results/trust_suite.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from langchain_selfrag.abstention import AbstentionCalibration, calibrated_config
from langchain_selfrag.answer_sentence import quoted_answer
from langchain_selfrag.config import ANSWER_FORMS, SelfRAGConfig
from langchain_selfrag.config_flags import add_chat_model_flags, add_removed_flags
from langchain_selfrag.evaluation.common.selective import (
    Outcome,
    plot_risk_coverage,
    selective_accuracy_at,
    trust_report,
)
from langchain_selfrag.evaluation.qa import abstention as A
from langchain_selfrag.evaluation.qa.metrics import normalize_answer
from langchain_selfrag.graph.nodes.abstain import bar

from benchmarks.trust_loss import (
    EXPLAINING_TYPES,
    STORE_DEPTH,
    answer_right,
    candidate_given,
    chosen_candidate,
    format_loss_table,
    has_ranks,
    loss_table,
    question_type,
    rank_fields,
    reindexed_ranks,
    requoted,
    replay_misses,
    rescored,
    would_be_answer,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUITE = HERE / "trust"
KINDS = ("docs", "news", "invented", "squad")
SPLITS = ("validation", "test")
#: The invented fact sheets: the project's invented corpora (validation chose the abstention bars of v4).
INVENTED = {"validation": ROOT / "cookbook" / "selfrag_smollm2" / "data" / "abstention_validation_corpus.json",
            "test": ROOT / "tests" / "data" / "invented_corpus.json"}
#: SQuAD validation: ten articles of SQuAD 2.0's train split that no shipped model trained on (sources
#: in its folder). SQuAD test: the bundled model's four held-out articles of
#: ../shared/data/squad2_dev_half.json.
SQUAD_VALIDATION = SUITE / "squad" / "validation.json"
SQUAD_TEST_ARTICLES = ("Computational_complexity_theory", "Harvard_University", "Normans", "Warsaw")
#: Parts whose right outcome is an abstention.
ABSTAIN_PARTS = ("near_miss", "off_topic", "unanswerable", "noise_only")
#: Acceptance bars of the trust issue, per part (share right).
BARS = {"answerable": 0.7, "near_miss": 0.7, "off_topic": 0.9}


# --- corpora -------------------------------------------------------------------------------------

def suite_questions(kind: str, split: str, data: Path | None, n_squad: int, seed: int,
                    n_unanswerable: int | None = None,
                    holdout: Sequence[str] = ()) -> tuple[dict[str, str], list[dict]]:
    """``(documents, questions)`` of one kind and split: file name -> text, and question records
    ``{part, question, answers, source}``; the off-topic questions are the split's shared list.
    ``n_unanswerable``: SQuAD's unanswerable questions (None: ``n_squad // 2``); ``holdout``: see
    :func:`squad_articles`."""
    docs, questions = _kind_questions(kind, split, data, n_squad, seed, n_unanswerable, holdout)
    off_topic = json.loads((SUITE / "off_topic.json").read_text())[split]
    questions = [{"part": "off_topic", "question": q, "answers": [], "source": None} for q in off_topic] + questions
    return docs, questions + [{**q, "part": "noise_only"} for q in questions if q["part"] == "answerable"]


def _kind_questions(kind: str, split: str, data: Path | None, n_squad: int, seed: int,
                    n_unanswerable: int | None = None, holdout: Sequence[str] = ()) -> tuple[dict[str, str], list[dict]]:
    """The kind's documents and its own questions (answerable, near miss or unanswerable)."""
    questions: list[dict] = []
    if kind in ("docs", "news"):
        folder = SUITE / kind / split
        docs = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir()) if p.is_file()}
        spec = json.loads((SUITE / kind / "questions.json").read_text())[split]
        for part in ("answerable", "near_miss"):
            questions += [{"part": part, "answers": q.get("answers", []), **q} for q in spec[part]]
        return docs, questions
    if kind == "invented":
        corpus = json.loads(INVENTED[split].read_text())
        docs = {d["source"]: d["text"] + "\n" for d in corpus["documents"]}
        questions += [{"part": "answerable", **q} for q in corpus["answerable"]]
        questions += [{"part": "near_miss", "question": q, "answers": [], "source": None}
                      for q in corpus["unanswerable_invented"]]
        return docs, questions
    if kind == "squad":
        return squad_questions(split, data, n_squad, seed, n_unanswerable, holdout)
    raise SystemExit(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")


def squad_articles(split: str, data: Path | None, holdout: Sequence[str] = ()) -> dict[str, dict]:
    """The split's SQuAD 2.0 articles by title: validation ships with the suite, test is read from
    ``data`` (``FileNotFoundError`` without it).

    ``holdout``: articles of ``data``'s dev half that the model under test was trained without
    (``cookbook.data.holdout_articles``), added to the validation part; unlike the shipped
    ten, they have unanswerable questions throughout. Never the test part's."""
    holdout = tuple(holdout)
    if holdout and split != "validation":
        raise ValueError("held-out SQuAD articles join the validation part only")
    if bad := sorted(set(holdout) & set(SQUAD_TEST_ARTICLES)):
        raise ValueError(f"test articles cannot validate: {', '.join(bad)}")
    articles = {}
    if split == "validation":
        articles = {a["title"]: a for a in json.loads(SQUAD_VALIDATION.read_text(encoding="utf-8"))["data"]}
        if not holdout:
            return articles
    path = (data or Path()) / "squad2_dev_half.json"
    if data is None or not path.is_file():
        raise FileNotFoundError(f"{path} not found (the squad kind's test part, like held-out articles, needs ../shared/data)")
    wanted = set(holdout) if split == "validation" else set(SQUAD_TEST_ARTICLES)
    dev = {a["title"]: a for a in json.loads(path.read_text(encoding="utf-8"))["data"] if a["title"] in wanted}
    if missing := sorted(wanted - set(dev)):
        raise ValueError(f"not articles of {path}: {', '.join(missing)}")
    return {**articles, **dev}


def squad_questions(split: str, data: Path | None, n: int, seed: int, n_unanswerable: int | None = None,
                    holdout: Sequence[str] = ()) -> tuple[dict[str, str], list[dict]]:
    """One file per article (its paragraphs, blank-line separated); a seeded sample of ``n`` answerable
    and ``n_unanswerable`` (None: ``n // 2``) unanswerable questions. Each sample is a prefix of one
    seeded order, so a larger ``n_unanswerable`` keeps the smaller one's questions."""
    articles = squad_articles(split, data, holdout)
    docs, answerable, unanswerable = {}, [], []
    for title, art in sorted(articles.items()):
        source = f"{title}.txt"
        docs[source] = "\n\n".join(p["context"].strip() for p in art["paragraphs"]) + "\n"
        for p in art["paragraphs"]:
            for qa in p["qas"]:
                if qa.get("is_impossible"):
                    unanswerable.append({"part": "unanswerable", "question": qa["question"], "answers": [],
                                         "source": source})
                else:
                    golds = sorted({a["text"] for a in qa["answers"]})
                    answerable.append({"part": "answerable", "question": qa["question"], "answers": golds,
                                       "source": source})
    rng = random.Random(seed)
    rng.shuffle(answerable)
    rng.shuffle(unanswerable)
    return docs, answerable[:n] + unanswerable[: n // 2 if n_unanswerable is None else n_unanswerable]


# --- the chain ------------------------------------------------------------------------------------

class NoiseOnlyRetriever(BaseRetriever):
    """The store's passages for a question with every passage holding a gold answer removed (RGB's
    noise-only setting): asks the store for ``depth`` passages and keeps the first ``k`` clean ones."""

    store: Any
    answers: list[str]
    k: int = 5
    depth: int = 40

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        golds = [g for g in (normalize_answer(a) for a in self.answers) if g]
        docs = self.store.similarity_search(query, k=self.depth)
        return [d for d in docs if not any(g in normalize_answer(d.page_content) for g in golds)][: self.k]


def index_options(chunk_size: int | None = None, chunk_overlap: int | None = None) -> list[str]:
    """``selfrag index`` options for the suite's chunking (none: the command's defaults, as a user indexes)."""
    options = []
    for flag, value in (("--chunk-size", chunk_size), ("--chunk-overlap", chunk_overlap)):
        if value is not None:
            if value < (1 if flag == "--chunk-size" else 0):
                raise SystemExit(f"{flag} must be {'positive' if flag == '--chunk-size' else 'at least 0'}, not {value}")
            options += [flag, str(value)]
    return options


def index_folder(docs: Mapping[str, str], folder: Path, options: Sequence[str] = ()) -> Path:
    """Write the documents as files and index them with ``selfrag index`` (and ``options``); the store's path."""
    from langchain_selfrag.cli import main as selfrag_main

    src = folder / "docs"
    src.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (src / name).write_text(text, encoding="utf-8")
    store = folder / "store"
    if selfrag_main(["index", str(src), "--store", str(store), "--quiet", *options]) != 0:
        raise SystemExit(f"selfrag index failed for {src}")
    return store


def source_of(doc: Document) -> str:
    return Path(str((doc.metadata or {}).get("source", ""))).name


def record(q: Mapping[str, Any], out: Mapping[str, Any],
           store_hits: Sequence[Document] | None = None) -> dict[str, Any]:
    """What the summary needs of one run: the answer, the abstention, what was cited and the trace
    (each candidate's passage source, text, IsRel, IsSup, score and whether ``select`` chose it).
    With ``store_hits`` (the store's top ``STORE_DEPTH`` for the question) and gold answers, the ranks
    of the chunks holding one among the passages read and in the store (:func:`~benchmarks.trust_loss.rank_fields`)."""
    passages = list(out.get("passages") or [])
    ranks = {}
    if store_hits is not None and q.get("answers"):
        ranks = rank_fields([(source_of(d), d.page_content) for d in passages],
                            [(source_of(d), d.page_content) for d in store_hits], q)
    trace = []
    for t in out.get("trace") or []:
        if t.get("kind", "candidate") != "candidate":
            continue
        idx = t.get("passage")
        trace.append({"source": source_of(passages[idx]) if isinstance(idx, int) and idx < len(passages) else None,
                      "passage": idx, "text": t.get("text", ""), "answer": t.get("answer"), "isrel": t.get("isrel"), "issup": t.get("issup"),
                      "isuse": t.get("isuse"), "score": t.get("score"), "chosen": bool(t.get("chosen")),
                      "dropped": bool(t.get("dropped"))})
    return {**dict(q), "signals": A.signals(out), "answer": out.get("answer", ""), "abstained": bool(out.get("abstained")),
            "reason": out.get("abstain_reason"), "retrieved": bool(out.get("retrieved")),
            "retrieve_probability": out.get("retrieve_probability"), "confidence": out.get("confidence"),
            "cited": [source_of(d) for d in out.get("citations") or []], "trace": trace, **ranks}


def key(r: Mapping[str, Any]) -> tuple:
    return (r["kind"], r["split"], r["part"], r["question"])


def suite_config(args: argparse.Namespace) -> Any:
    """The chain settings of the runs: the defaults or ``--paper``, with ``--answer-form`` and ``--k`` when given."""
    form = {"answer_form": args.answer_form} if args.answer_form else {}
    if getattr(args, "k", None):
        form["k"] = args.k
    return SelfRAGConfig.paper(**form) if args.paper else SelfRAGConfig(**form)


def answer_form_of(args: argparse.Namespace, lm: Any) -> str:
    """The answer form the runs use: ``--answer-form``, else the model's own (generated with ``--paper``)."""
    return calibrated_config(suite_config(args), lm).answer_form


def run_settings(config: Any) -> dict[str, Any]:
    """What a record keeps of the run's settings for re-scoring: the abstention bars it used (a bar
    left at None is the default :func:`~langchain_selfrag.graph.nodes.abstain.bar` gives) and whether a
    closed-book answer was an abstention."""
    return {"bars": {name: bar(config, name) for name in ("abstain_isrel", "abstain_issup")},
            "closed_book": bool(config.abstain_closed_book)}


def run_kind(kind: str, split: str, args: argparse.Namespace, lm: Any, out_file: Path, done: set) -> int:
    """Index one kind's documents and ask all its questions; appends one JSONL line per run."""
    from tqdm import tqdm

    from langchain_selfrag import SelfRAGChain
    from langchain_selfrag.retrieval import open_store

    try:
        docs, questions = suite_questions(kind, split, Path(args.data) if args.data else None, args.n_squad, args.seed,
                                          args.n_squad_unanswerable, args.squad_holdout_articles)
    except FileNotFoundError as exc:
        print(f"skipping {kind}: {exc}", file=sys.stderr)
        return 0
    todo = [q for q in questions if (kind, split, q["part"], q["question"]) not in done
            and (not args.parts or q["part"] in args.parts)]
    if not todo:
        return 0
    config = suite_config(args)
    settings = run_settings(calibrated_config(config, lm))
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(index_folder(docs, Path(tmp), index_options(args.chunk_size, args.chunk_overlap)))
        chain = SelfRAGChain(lm, store, config)
        with out_file.open("a", encoding="utf-8") as fh:
            for q in tqdm(todo, desc=f"{kind}/{split}", file=sys.stderr):
                started = time.perf_counter()
                if q["part"] == "noise_only":
                    retriever = NoiseOnlyRetriever(store=store, answers=q["answers"], k=config.k)
                    out = SelfRAGChain(lm, retriever, config).invoke(q["question"])
                else:
                    out = chain.invoke(q["question"])
                seconds = round(time.perf_counter() - started, 2)
                hits = store.similarity_search(q["question"], k=STORE_DEPTH) if q.get("answers") else None
                fh.write(json.dumps({"kind": kind, "split": split, **record(q, out, hits), **settings,
                                     "seconds": seconds}) + "\n")
                fh.flush()
    return len(todo)


# --- scoring ---------------------------------------------------------------------------------------

#: Confidences a run can be ranked by, from its own trace (all in [0, 1], higher = surer).
def _best_isrel(r: Mapping[str, Any]) -> float | None:
    vals = [t["isrel"] for t in r["trace"] if t.get("isrel") is not None and t.get("passage") is not None]
    return max(vals) if vals else None


def _joint(r: Mapping[str, Any]) -> float | None:
    cand = chosen_candidate(r)
    if cand is None or cand.get("passage") is None:
        return None
    return (cand.get("isrel") or 0.0) * (cand.get("issup") or 0.0)


def _min_rel_sup(r: Mapping[str, Any]) -> float | None:
    cand = chosen_candidate(r)
    rel = _best_isrel(r)
    if cand is None or rel is None:
        return None
    return min(rel, cand.get("issup") or 0.0)


CONFIDENCES = {"chain": lambda r: r.get("confidence"), "best_isrel": _best_isrel, "joint": _joint,
               "min_isrel_issup": _min_rel_sup}


def outcome(r: Mapping[str, Any], confidence: str = "chain") -> Outcome:
    answer, cited = would_be_answer(r)
    conf = CONFIDENCES[confidence](r)
    return Outcome(answerable=r["part"] == "answerable", answered=not r["abstained"],
                   right=answer_right(r, answer, cited), confidence=conf)


#: The parts of a kind, in the order tables show them.
PARTS = ("answerable", "near_miss", "off_topic", "unanswerable", "noise_only")


def in_kind_order(kinds: Iterable[str]) -> list[str]:
    """The suite's kinds in table order (``KINDS``), any other kind after them."""
    return sorted(kinds, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS))


def handled_right(r: Mapping[str, Any]) -> bool:
    """An answerable question answered right with the right citation; any other one abstained on."""
    if r["part"] == "answerable":
        return not r["abstained"] and answer_right(r, r["answer"], r["cited"])
    return bool(r["abstained"])


def part_rate(records: Sequence[Mapping[str, Any]], part: str) -> dict[str, Any]:
    """Share right of one part: answerable = right with the right citation; the others = abstained."""
    rows = [r for r in records if r["part"] == part]
    hits = sum(handled_right(r) for r in rows)
    return {"n": len(rows), "right": hits, "rate": hits / len(rows) if rows else None,
            **({"bar": BARS[part], "holds": bool(rows) and hits / len(rows) >= BARS[part]} if part in BARS else {})}


#: Question types, in the order the summary gives them (``question_type``: a question without ``type`` is a factoid).
QUESTION_TYPES = ("factoid", *EXPLAINING_TYPES)


def type_rates(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per part whose questions are not all factoids (the docs kind's answerable and noise-only parts),
    each question type's share right (:func:`handled_right`: a factoid by its gold answers, a how-to,
    explanation or instruction question by its gold sentences), counted apart."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for part in PARTS:
        rows = [r for r in records if r["part"] == part]
        if not any(question_type(r) != "factoid" for r in rows):
            continue
        out[part] = {}
        for kind in QUESTION_TYPES:
            typed = [r for r in rows if question_type(r) == kind]
            if typed:
                hits = sum(handled_right(r) for r in typed)
                out[part][kind] = {"n": len(typed), "right": hits, "rate": hits / len(typed)}
    return out


def _answerable_share(records: Sequence[Mapping[str, Any]], right: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any]:
    rows = [r for r in records if r["part"] == "answerable"]
    hits = sum(bool(right(r)) for r in rows)
    return {"n": len(rows), "right": hits, "rate": hits / len(rows) if rows else None}


def reader_ceiling(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The answerable questions whose chosen answer is right before any abstention: the most that
    any abstention bars can answer right, since abstaining only removes answers."""
    return _answerable_share(records, lambda r: answer_right(r, *would_be_answer(r)))


def candidate_ceiling(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The answerable questions where some candidate of the trace (one per passage read, not dropped) is
    right: the most that any ranking of the candidates, and any bars, could answer right with this reader."""
    return _answerable_share(records, lambda r: any(answer_right(r, *candidate_given(t)) for t in r["trace"]
                                                    if t.get("passage") is not None and not t.get("dropped")))


def relevance_separation(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """How well the model's judgement of relevance tells answerable questions from each other part, bars
    aside: per part, the AUC of each question's best IsRel over its passages (answerable against that
    part; 0.5 is chance). A ranked answer can be given only when its question clears the IsRel bar, so
    this bounds what any bar can do; questions without a retrieved passage are left out."""
    from training.core.metrics import roc_auc

    best = {p: [v for r in records if r["part"] == p and (v := _best_isrel(r)) is not None] for p in PARTS}
    pos = best["answerable"]
    return {p: {"n": len(neg), "auc": roc_auc(pos + neg, [True] * len(pos) + [False] * len(neg))}
            for p, neg in best.items() if p != "answerable" and neg and pos}


def summarize(records: Sequence[Mapping[str, Any]], *, confidence: str = "chain", n_resamples: int = 1000) -> dict[str, Any]:
    """Per kind: each part's rate against its bar, and the selective-QA figures over answerable +
    unanswerable-kind parts (noise-only runs excluded: they repeat the answerable questions)."""
    kinds: dict[str, Any] = {}
    for kind in in_kind_order({r["kind"] for r in records}):
        rows = [r for r in records if r["kind"] == kind]
        parts = {p: part_rate(rows, p) for p in PARTS if any(r["part"] == p for r in rows)}
        trust_rows = [r for r in rows if r["part"] != "noise_only"]
        selective = trust_report([outcome(r, confidence) for r in trust_rows], n_resamples=n_resamples)
        answerable_items = [outcome(r, confidence) for r in rows if r["part"] == "answerable"]
        answerable_only = trust_report(answerable_items, n_resamples=n_resamples)
        answerable_only["selective_accuracy_at_0.6"] = selective_accuracy_at(answerable_items, 0.6)
        kinds[kind] = {"parts": parts, "reader_ceiling": reader_ceiling(rows),
                       "candidate_ceiling": candidate_ceiling(rows), "relevance_separation": relevance_separation(rows),
                       "selective": selective, **({"types": types} if (types := type_rates(rows)) else {}),
                       "answerable_only": {k: answerable_only[k] for k in ("coverage", "selective_accuracy", "aurc",
                                                                            "aurc_optimal", "selective_accuracy_at_0.6")}}
    timed = [r["seconds"] for r in records if isinstance(r.get("seconds"), (int, float))]
    return {"confidence": confidence, "kinds": kinds, "loss": loss_table(records, list(kinds), PARTS),
            "all_bars_hold": all(p.get("holds", True) for k in kinds.values() for p in k["parts"].values()),
            "seconds_per_question": {"n": len(timed), "mean": round(sum(timed) / len(timed), 2) if timed else None}}


#: The calibration kind of each suite part (what the right behaviour is).
CALIBRATION_KIND = {"answerable": "answerable", "near_miss": "near_miss", "unanswerable": "near_miss",
                    "noise_only": "near_miss", "off_topic": "off_topic"}


def calibration_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records as the calibration fit reads them: the kind to handle, the signals, whether the answer is right."""
    return [{"question": r["question"], "kind": CALIBRATION_KIND[r["part"]], "signals": r["signals"],
             "right": r["part"] == "answerable" and answer_right(r, *would_be_answer(r))} for r in records]


def fit_calibration(records: Sequence[Mapping[str, Any]], model: str, out: Path,
                    answer_form: str | None = None) -> AbstentionCalibration:
    """Choose the model's abstention bars on validation records (``selfrag calibrate``'s rule), write
    them to ``out`` as its calibration (with the ``answer_form`` the runs used) and return it; the test
    part is never used for this."""
    from langchain_selfrag.calibrate.fit import calibration

    if any(r["split"] != "validation" for r in records):
        raise SystemExit("the bars are chosen on the validation part only")
    rows = calibration_rows(records)
    kinds = sorted({r["kind"] for r in records})
    fitted = calibration(rows, model, fitted_on=f"trust suite, validation part ({', '.join(kinds)})",
                         answer_form=answer_form)
    fitted.save(out)
    return fitted


def handled_right_at(r: Mapping[str, Any], isrel: float, issup: float) -> bool:
    """:func:`handled_right` had the run used these bars, replayed from its trace."""
    abstains = A.would_abstain(r["signals"], isrel, issup, closed_book=True)
    if r["part"] == "answerable":
        return not abstains and answer_right(r, *would_be_answer(r))
    return abstains


def parts_at(records: Sequence[Mapping[str, Any]], isrel: float, issup: float) -> dict[str, dict[str, dict[str, int]]]:
    """Per kind and part, the questions handled right had the runs used these bars, replayed from
    their traces (what a calibration's bars give, per kind, on the records it was fitted on)."""
    kinds: dict[str, dict[str, dict[str, int]]] = {}
    for r in records:
        entry = kinds.setdefault(r["kind"], {}).setdefault(r["part"], {"n": 0, "right": 0})
        entry["n"] += 1
        entry["right"] += int(handled_right_at(r, isrel, issup))
    return {kind: {p: parts[p] for p in PARTS if p in parts} for kind, parts in kinds.items()}


def with_run_settings(records: Sequence[Mapping[str, Any]], run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Records written before runs kept their bars get the ones the run used: the model's calibration
    (the judge's, for a run with one) or the paper's, as :func:`suite_config` and the chain resolve them
    (``run``: the run's ``run.json``)."""
    if all("bars" in r for r in records):
        return [dict(r) for r in records]
    if not run.get("model"):
        raise SystemExit("these records do not say which bars their run used, and there is no run.json to tell")
    config = SelfRAGConfig.paper() if run.get("paper") else SelfRAGConfig()
    settings = run_settings(calibrated_config(config, SimpleNamespace(model_path=run.get("judge") or run["model"])))
    return [{**settings, **r} for r in records]


#: Each record's fresh search (:func:`fresh_hits`), by the record's index.
Hits = dict[int, list[tuple[str | None, str]]]


def fresh_hits(records: Sequence[Mapping[str, Any]], todo: Sequence[int], run: Mapping[str, Any],
               data: Path | None) -> Iterator[tuple[int, list[tuple[str | None, str]]]]:
    """For each record of ``todo`` (indices): the top ``STORE_DEPTH`` ``(source, text)`` of its question, each
    kind's documents indexed again as the run indexed them (``run.json``'s chunking, the same embeddings)."""
    from langchain_selfrag.retrieval import open_store

    for kind in in_kind_order({records[i]["kind"] for i in todo}):
        split = next(records[i]["split"] for i in todo if records[i]["kind"] == kind)
        docs, _ = _kind_questions(kind, split, data, run.get("n_squad") or 0, run.get("seed") or 0, 0,
                                  run.get("squad_holdout_articles") or ())
        with tempfile.TemporaryDirectory() as tmp:
            options = index_options(run.get("chunk_size"), run.get("chunk_overlap"))
            store = open_store(index_folder(docs, Path(tmp), options))
            for i in (i for i in todo if records[i]["kind"] == kind):
                hits = store.similarity_search(records[i]["question"], k=STORE_DEPTH)
                yield i, [(source_of(d), d.page_content) for d in hits]


def unranked(records: Sequence[Mapping[str, Any]]) -> list[int]:
    """The answerable records written without gold ranks (what :func:`reindex_ranks` gives ranks to)."""
    return [i for i, r in enumerate(records) if r["part"] == "answerable" and not has_ranks(r)]


def reindex_ranks(records: Sequence[Mapping[str, Any]], hits: Hits) -> list[dict[str, Any]]:
    """Gold ranks for the :func:`unranked` records, from their :func:`fresh_hits` (``hits``, by record index). A
    record whose trace this search does not reproduce (a passage read from another file than the hit at its
    place) gets none and says so (``ranks_from``)."""
    out = [dict(r) for r in records]
    for i in unranked(out):
        ranks = reindexed_ranks(out[i], hits[i])
        out[i].update({**ranks, "ranks_from": "reindex"} if ranks
                      else {"ranks_from": "reindex did not reproduce the run"})
    return out


def requote_answers(records: Sequence[Mapping[str, Any]], hits: Hits) -> tuple[list[dict[str, Any]], int]:
    """The records had their answers been quoted as ``answer_form="sentence"`` quotes them now
    (:func:`~benchmarks.trust_loss.requoted`, each record's passages from its :func:`fresh_hits` in ``hits``), and
    how many records that search did not reproduce (left as they were)."""
    out = [dict(r) for r in records]
    missed = 0
    for i, r in enumerate(out):
        again = requoted(r, hits[i], quoted_answer)
        missed += again is None
        out[i] = again or r
    return out, missed


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=SPLITS, default="validation")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ", ".join(KINDS))
    ap.add_argument("--out", required=True, help="folder for records.jsonl, summary.json and risk_coverage.png")
    ap.add_argument("--model", help="model file, or a bundled model's name (default: the bundled model)")
    add_removed_flags(ap)
    add_chat_model_flags(ap)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"),
                    help="folder with squad2_dev_half.json (the squad kind's test part)")
    ap.add_argument("--parts", type=lambda v: tuple(t for t in v.split(",") if t), default=(),
                    help="ask only these parts (answerable, near_miss, unanswerable, off_topic, noise_only); "
                    "a later run into the same --out asks the rest")
    ap.add_argument("--n-squad", type=int, default=150, help="answerable SQuAD questions (unanswerable: half)")
    ap.add_argument("--n-squad-unanswerable", type=int,
                    help="unanswerable SQuAD questions (default: half of --n-squad; the validation part has 348)")
    ap.add_argument("--squad-holdout-articles", type=lambda v: tuple(t for t in v.split(",") if t), default=(),
                    metavar="TITLES", help="validation part only: comma-separated articles of the dev half that the "
                    "model was trained without, asked beside the shipped ten (cookbook holdout_articles)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: $SELFRAG_THREADS or all)")
    ap.add_argument("--paper", action="store_true", help="SelfRAGConfig.paper() instead of the defaults")
    ap.add_argument("--answer-form", choices=ANSWER_FORMS,
                    help="SelfRAGConfig.answer_form (default: the model's own, or generated with --paper)")
    ap.add_argument("--k", type=int, help="SelfRAGConfig.k, passages per retrieval (default 5)")
    ap.add_argument("--chunk-size", type=int, help="selfrag index --chunk-size (default: the command's)")
    ap.add_argument("--chunk-overlap", type=int, help="selfrag index --chunk-overlap (default: the command's)")
    ap.add_argument("--confidence", choices=sorted(CONFIDENCES), default="chain")
    ap.add_argument("--summarize-only", action="store_true", help="recompute the summary from records.jsonl")
    ap.add_argument("--reindex-ranks", action="store_true",
                    help="records written without gold ranks get them from each kind's documents indexed again "
                    "as the run did (the loss table's retrieval columns; benchmarks/trust_loss.py)")
    ap.add_argument("--requote", action="store_true",
                    help="with --summarize-only: quote each answer again as answer_form='sentence' quotes it now, "
                    "from each kind's documents indexed and searched again as the run did (no model)")
    ap.add_argument("--rescore-bars", type=bar_pair, metavar="ISREL,ISSUP",
                    help="the summary and loss table had the runs used these abstention bars, re-scored from the "
                    "records without the model; written to OUT/summary-at-ISREL-ISSUP.json")
    ap.add_argument("--json", help="also write the summary with machine and settings here (benchmarks/record.py), "
                         "and the risk-coverage plot beside it (.png)")
    ap.add_argument("--fit-calibration", metavar="FILE",
                    help="validation part only: choose the model's abstention bars on these runs and write them here")
    args = ap.parse_args(argv)
    index_options(args.chunk_size, args.chunk_overlap)  # a bad value fails before anything runs
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records_file = out / "records.jsonl"
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        ap.error(f"unknown kind(s): {', '.join(unknown)}")
    start = time.time()
    from benchmarks.record import Run

    bench = Run("trust_suite")
    if not args.summarize_only:
        from langchain_selfrag.graph.context import model_path
        from langchain_selfrag.lm import load_reflection_lm

        options = {"n_threads": args.threads} if args.threads else {}
        if args.chat_model:  # the chat model's name in the cache folder, where its calibration is kept
            from langchain_selfrag.graph.context import chat_lm

            lm = chat_lm(args.chat_model, args.base_url)
            model = str(lm.model_path)
        else:
            model = model_path(args.model)  # a file, or a bundled model's or base's name
            lm = load_reflection_lm(model, **options)
        (out / "run.json").write_text(json.dumps({"model": model, "split": args.split,
                                                  "paper": args.paper,
                                                  "n_squad": args.n_squad,
                                                  "n_squad_unanswerable": args.n_squad_unanswerable, "seed": args.seed,
                                                  "squad_holdout_articles": list(args.squad_holdout_articles),
                                                  "chunk_size": args.chunk_size, "chunk_overlap": args.chunk_overlap,
                                                  "answer_form": answer_form_of(args, lm)},
                                                 indent=1))
        done = {key(r) for r in read_records(records_file)}
        for kind in kinds:
            run_kind(kind, args.split, args, lm, records_file, done)
    records = [r for r in read_records(records_file) if r["split"] == args.split and r["kind"] in kinds]
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}
    scored = with_run_settings(records, run)
    if args.requote and run.get("answer_form") != "sentence":
        raise SystemExit(f"--requote re-quotes sentence answers; this run's answer form is {run.get('answer_form')!r}")
    searched = range(len(scored)) if args.requote else unranked(scored) if args.reindex_ranks else []
    hits = dict(fresh_hits(scored, searched, run, Path(args.data) if args.data else None))  # each kind indexed once
    if args.reindex_ranks:
        scored = reindex_ranks(scored, hits)
    if args.requote:
        scored, unreproduced = requote_answers(scored, hits)
        print(f"answers quoted again as the package quotes them now; searches that did not reproduce the run: "
              f"{unreproduced} of {len(scored)}")
    suffix = ""
    if args.rescore_bars:
        misses = replay_misses(scored)
        scored = [rescored(r, *args.rescore_bars) for r in scored]
        suffix = "-at-{:g}-{:g}".format(*args.rescore_bars)
    summary = summarize(scored, confidence=args.confidence)
    if args.rescore_bars:
        summary["rescored_at"] = {**dict(zip(("abstain_isrel", "abstain_issup"), args.rescore_bars)),
                                  "own_bars_not_reproduced": misses}
    summary["seconds"] = round(time.time() - start, 1)
    if run:
        summary["model"] = Path(run["model"]).name
    if args.fit_calibration:
        bars = fit_calibration(records, summary["model"], Path(args.fit_calibration), run.get("answer_form")).bars
        summary["at_fitted_bars"] = {**bars, "kinds": parts_at(records, bars["abstain_isrel"], bars["abstain_issup"])}
    (out / f"summary{suffix}.json").write_text(json.dumps(summary, indent=1) + "\n")
    title = f"trust suite, {args.split} part: risk-coverage by kind of text (confidence: {args.confidence})"
    curves = {k: v["selective"] for k, v in summary["kinds"].items()}
    plot_risk_coverage(curves, out / f"risk_coverage{suffix}.png", title)
    if args.json:  # the plot ships beside the results file
        plot_risk_coverage(curves, Path(args.json).with_suffix(".png"), title)
    for kind, entry in summary["kinds"].items():
        parts = "  ".join(f"{p} {v['right']}/{v['n']}" for p, v in entry["parts"].items())
        sel = entry["selective"]
        ceilings = f"right before abstention {entry['reader_ceiling']['right']}, by any candidate " \
                   f"{entry['candidate_ceiling']['right']}"
        separation = ", ".join(f"{p} {v['auc']:.2f}" for p, v in entry["relevance_separation"].items())
        print(f"{kind:9s} {parts} ({ceilings})  | coverage {fmt(sel['coverage'])} sel.acc {fmt(sel['selective_accuracy'])} "
              f"F1_RG {fmt(sel['f1_rg'])} AURC {fmt(sel['aurc'])} | best-IsRel AUC against {separation}")
        for part, types in entry.get("types", {}).items():
            counts = "  ".join(f"{t} {v['right']}/{v['n']}" for t, v in types.items())
            print(f"{'':9s} {part} by question type: {counts}")
    rescore = "" if not args.rescore_bars else \
        (" (re-scored at IsRel >= {abstain_isrel:g}, IsSup >= {abstain_issup:g}; records whose own abstention the "
         "replay does not reproduce: {own_bars_not_reproduced})").format(**summary["rescored_at"])
    print(f"\nwhere each answer is lost{rescore} (benchmarks/trust_loss.py):")
    print("\n".join(format_loss_table(summary["loss"])))
    if args.json:
        bench.write(args.json, vars(args), summary)
    if args.fit_calibration:
        fitted = summary["at_fitted_bars"]
        print(f"calibration of {summary['model']} written to {args.fit_calibration}: IsRel {fitted['abstain_isrel']}, "
              f"IsSup {fitted['abstain_issup']}, which would give")
        for kind, parts in fitted["kinds"].items():
            print(f"{kind:9s} " + "  ".join(f"{p} {v['right']}/{v['n']}" for p, v in parts.items()))
    return 0


def bar_pair(value: str) -> tuple[float, float]:
    """``ISREL,ISSUP``: two abstention bars in [0, 1]."""
    try:
        isrel, issup = (float(v) for v in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two bars ISREL,ISSUP (e.g. 0.7,0.25), not {value!r}") from None
    if not (0.0 <= isrel <= 1.0 and 0.0 <= issup <= 1.0):
        raise argparse.ArgumentTypeError(f"bars lie in [0, 1], not {value!r}")
    return isrel, issup


def fmt(fig: Mapping[str, Any]) -> str:
    v = fig.get("value")
    return "  -  " if v is None else f"{v:.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
