"""Evaluation data sets: SQuAD v2, Self-RAG JSONL, PopQA, ARC, SelfAware and plain JSONL.

Every loader returns a :class:`Dataset` of :class:`Example` items plus the data set's own passages
(``corpus``), which the runner pools into a retrieval collection. Malformed input raises
:class:`DatasetError` naming the file and the line (JSONL) or the JSON path (JSON documents).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...jsonl import iter_jsonl
from ...prompts import TASK_INSTRUCTIONS
from ..common.errors import DatasetError
from .data import Dataset, Example, Passage

FORMATS = ("auto", "squad", "selfrag-jsonl", "popqa", "arc", "selfaware", "jsonl")


# -- reading ----------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for every non-blank line; errors name the line."""
    return iter_jsonl(path, DatasetError)


def _read_json(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(location, record) from a JSONL file or a JSON list of objects."""
    if _is_jsonl(path):
        for lineno, record in _read_jsonl(path):
            yield f"{path}:{lineno}", record
        return
    data = _read_json(path)
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected JSON lines or a JSON list of objects")
    for i, record in enumerate(data):
        if not isinstance(record, dict):
            raise DatasetError(f"{path}: item [{i}]: expected a JSON object, got {type(record).__name__}")
        yield f"{path}: item [{i}]", record


def _is_jsonl(path: Path) -> bool:
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return True
    if path.suffix.lower() == ".json":
        return False
    with path.open(encoding="utf-8") as fh:
        first = fh.readline().strip()
        second = fh.readline().strip()
    return first.startswith("{") and first.endswith("}") and (not second or second.startswith("{"))


def _need(record: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    if key not in record:
        raise DatasetError(f"{where}: missing field {key!r}")
    value = record[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise DatasetError(f"{where}: field {key!r} must be {names}, got {type(value).__name__}")
    return value


def _answers(value: Any, where: str, key: str = "answers") -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, list):
        out = []
        for item in value:
            if isinstance(item, dict) and "text" in item:
                item = item["text"]
            if not isinstance(item, (str, int, float)) or isinstance(item, bool):
                raise DatasetError(f"{where}: {key!r} must hold strings, got {type(item).__name__}")
            out.append(str(item))
        return out
    raise DatasetError(f"{where}: {key!r} must be a string or a list of strings, got {type(value).__name__}")


def _question(record: dict[str, Any], where: str) -> str:
    question = _need(record, "question", where)
    if not question.strip():
        raise DatasetError(f"{where}: empty question")
    return question


def _pool(passages: list[Passage], seen: dict[tuple[str, str], Passage]) -> list[Passage]:
    """Deduplicate passages into ``seen`` (keyed by title and text); returns the pooled ones."""
    pooled = []
    for p in passages:
        key = (p.title, p.text)
        if key not in seen:
            seen[key] = Passage(p.title, p.text, p.id or f"p{len(seen)}")
        pooled.append(seen[key])
    return pooled


# -- loaders ----------------------------------------------------------------------------------


def load_squad(path: Path) -> Dataset:
    """SQuAD v2 JSON: every paragraph joins the corpus; unanswerable questions get no answers."""
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DatasetError(f"{path}: not SQuAD JSON (expected an object with a 'data' list of articles)")
    examples: list[Example] = []
    corpus: list[Passage] = []
    for a, article in enumerate(data["data"]):
        where_a = f"{path}: data[{a}]"
        if not isinstance(article, dict):
            raise DatasetError(f"{where_a}: expected an object")
        title = str(article.get("title", "")).replace("_", " ")
        for p, para in enumerate(_need(article, "paragraphs", where_a, list)):
            where_p = f"{where_a}.paragraphs[{p}]"
            if not isinstance(para, dict):
                raise DatasetError(f"{where_p}: expected an object")
            passage = Passage(title, _need(para, "context", where_p), f"{a}-{p}")
            corpus.append(passage)
            for q, qa in enumerate(_need(para, "qas", where_p, list)):
                where_q = f"{where_p}.qas[{q}]"
                if not isinstance(qa, dict):
                    raise DatasetError(f"{where_q}: expected an object")
                answers = _answers(qa.get("answers", []), where_q)
                impossible = bool(qa.get("is_impossible", not answers))
                examples.append(
                    Example(
                        id=str(qa.get("id", f"{a}-{p}-{q}")),
                        question=_question(qa, where_q),
                        answers=[] if impossible else _dedupe(answers),
                        answerable=not impossible,
                        gold_passage=passage.id,
                        meta={
                            "article": title,
                            "plausible_answers": _dedupe(_answers(qa.get("plausible_answers", []), where_q)),
                        },
                    )
                )
    return Dataset(path.stem, "squad", examples, corpus)


def load_selfrag_jsonl(path: Path) -> Dataset:
    """Self-RAG eval JSONL ``{question, answers, ctxs: [{title, text}]}``; ctxs are pooled too."""
    examples: list[Example] = []
    seen: dict[tuple[str, str], Passage] = {}
    for n, (where, record) in enumerate(_records(path)):
        ctxs = _need(record, "ctxs", where, list)
        given = []
        for c, ctx in enumerate(ctxs):
            if not isinstance(ctx, dict) or not isinstance(ctx.get("text"), str):
                raise DatasetError(f"{where}: ctxs[{c}] must be an object with a 'text' string")
            given.append(Passage(str(ctx.get("title") or ""), ctx["text"], str(ctx.get("id", ""))))
        answers = record.get("answers", record.get("answer"))
        examples.append(
            Example(
                id=str(record.get("id", record.get("question_id", n))),
                question=_question(record, where),
                answers=_answers(answers, where),
                instruction=record.get("instruction") if isinstance(record.get("instruction"), str) else None,
                passages=_pool(given, seen),
            )
        )
    return Dataset(path.stem, "selfrag-jsonl", examples, list(seen.values()))


def load_popqa(path: Path, max_popularity: int | None = None) -> Dataset:
    """PopQA ``{id, question, answers, s_wiki_title, pop}``; ``max_popularity`` keeps ``pop`` below it."""
    examples: list[Example] = []
    for n, (where, record) in enumerate(_records(path)):
        answers = record.get("answers", record.get("possible_answers"))
        if isinstance(answers, str) and answers.startswith("["):
            try:
                answers = json.loads(answers)
            except json.JSONDecodeError:
                raise DatasetError(f"{where}: 'answers' is not a valid JSON list") from None
        pop = record.get("pop")
        if max_popularity is not None and isinstance(pop, (int, float)) and pop >= max_popularity:
            continue
        examples.append(
            Example(
                id=str(record.get("id", n)),
                question=_question(record, where),
                answers=_answers(answers, where),
                meta={"pop": pop, "s_wiki_title": record.get("s_wiki_title")},
            )
        )
    return Dataset(path.stem, "popqa", examples, [])


def load_arc(path: Path) -> Dataset:
    """ARC ``{id, question, options: [{label, text}], answer: LABEL}`` (``choices``/``answerKey`` too)."""
    examples: list[Example] = []
    for n, (where, record) in enumerate(_records(path)):
        raw = record.get("options", record.get("choices"))
        if isinstance(raw, dict) and "label" in raw and "text" in raw:  # HF layout
            raw = [{"label": lab, "text": txt} for lab, txt in zip(raw["label"], raw["text"])]
        if not isinstance(raw, list) or not raw:
            raise DatasetError(f"{where}: 'options' must be a non-empty list of {{label, text}}")
        options: dict[str, str] = {}
        for o, opt in enumerate(raw):
            if not isinstance(opt, dict) or not isinstance(opt.get("text"), str) or "label" not in opt:
                raise DatasetError(f"{where}: options[{o}] must be an object with 'label' and 'text'")
            options[str(opt["label"])] = opt["text"]
        label = record.get("answer", record.get("answerKey"))
        if str(label) not in options:
            raise DatasetError(f"{where}: answer {label!r} is not one of the option labels {sorted(options)}")
        label = str(label)
        examples.append(
            Example(
                id=str(record.get("id", n)),
                question=_question(record, where),
                answers=[label, options[label]],
                options=options,
                label=label,
                instruction=TASK_INSTRUCTIONS["arc_c"],
            )
        )
    return Dataset(path.stem, "arc", examples, [])


def load_selfaware(path: Path) -> Dataset:
    """SelfAware ``{"example": [{question_id, question, answer, answerable}]}``."""
    data = _read_json(path) if not _is_jsonl(path) else [r for _, r in _read_jsonl(path)]
    items = data.get("example") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise DatasetError(f"{path}: not SelfAware JSON (expected an object with an 'example' list)")
    examples = []
    for i, record in enumerate(items):
        where = f"{path}: example[{i}]"
        if not isinstance(record, dict):
            raise DatasetError(f"{where}: expected an object")
        answerable = _need(record, "answerable", where, bool)
        examples.append(
            Example(
                id=str(record.get("question_id", i)),
                question=_question(record, where),
                answers=_answers(record.get("answer"), where, "answer") if answerable else [],
                answerable=answerable,
                meta={"source": record.get("source")},
            )
        )
    return Dataset(path.stem, "selfaware", examples, [])


def load_plain_jsonl(path: Path) -> Dataset:
    """Plain ``{question, answers}`` JSONL (``answer`` accepted; ``id`` optional)."""
    examples = []
    for n, (where, record) in enumerate(_records(path)):
        if "answers" not in record and "answer" not in record:
            raise DatasetError(f"{where}: missing field 'answers'")
        answerable = record.get("answerable")
        examples.append(
            Example(
                id=str(record.get("id", n)),
                question=_question(record, where),
                answers=_answers(record.get("answers", record.get("answer")), where),
                answerable=answerable if isinstance(answerable, bool) else None,
            )
        )
    return Dataset(path.stem, "jsonl", examples, [])


LOADERS: dict[str, Callable[[Path], Dataset]] = {
    "squad": load_squad,
    "selfrag-jsonl": load_selfrag_jsonl,
    "popqa": load_popqa,
    "arc": load_arc,
    "selfaware": load_selfaware,
    "jsonl": load_plain_jsonl,
}


def detect_format(path: str | os.PathLike) -> str:
    """Guess the format from the file's first record (JSONL) or top-level shape (JSON)."""
    path = _existing(path)
    if _is_jsonl(path):
        for _, record in _read_jsonl(path):
            return _format_of_record(record, f"{path}")
        raise DatasetError(f"{path}: empty file")
    data = _read_json(path)
    if isinstance(data, dict):
        if isinstance(data.get("data"), list):
            return "squad"
        if isinstance(data.get("example"), list):
            return "selfaware"
        raise DatasetError(f"{path}: unknown JSON layout (keys: {', '.join(sorted(data)[:8])}); pass --format")
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return _format_of_record(data[0], f"{path}")
    raise DatasetError(f"{path}: unknown JSON layout; pass --format")


def _format_of_record(record: dict[str, Any], where: str) -> str:
    keys = set(record)
    if "ctxs" in keys:
        return "selfrag-jsonl"
    if "options" in keys or "choices" in keys:
        return "arc"
    if keys & {"s_wiki_title", "pop", "prop"}:
        return "popqa"
    if "answerable" in keys and "question_id" in keys:
        return "selfaware"
    if "question" in keys and keys & {"answers", "answer"}:
        return "jsonl"
    raise DatasetError(f"{where}: cannot tell the format from fields {sorted(keys)}; pass --format")


def _existing(path: str | os.PathLike) -> Path:
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetError(f"data file not found: {path}")
    return path


def load_dataset(path: str | os.PathLike, format: str = "auto", **options: Any) -> Dataset:
    """Load an evaluation file; ``format="auto"`` detects it. Options go to the loader (PopQA)."""
    if format not in FORMATS:
        raise DatasetError(f"unknown format {format!r}; choose from {', '.join(FORMATS)}")
    path = _existing(path)
    chosen = detect_format(path) if format == "auto" else format
    options = {k: v for k, v in options.items() if v is not None}
    if options and chosen != "popqa":
        raise DatasetError(f"option(s) {', '.join(sorted(options))} only apply to PopQA, not {chosen}")
    dataset = LOADERS[chosen](path, **options)
    if not dataset.examples:
        raise DatasetError(f"{path}: no questions found")
    ids = [ex.id for ex in dataset.examples]
    if len(set(ids)) != len(ids):
        for i, ex in enumerate(dataset.examples):
            ex.id = f"{i}:{ex.id}"
    return dataset


def _dedupe(values: list[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v.strip()))


def load_corpus(path: str | os.PathLike) -> list[Passage]:
    """Passages for pooled retrieval: JSONL of ``{title, text}`` or any data set file with passages."""
    path = _existing(path)
    if _is_jsonl(path):
        for _, first in _read_jsonl(path):
            if "text" in first and "question" not in first:
                return [
                    Passage(str(r.get("title") or ""), _need(r, "text", where), str(r.get("id", i)))
                    for i, (where, r) in enumerate(_records(path))
                ]
            break
    corpus = load_dataset(path).corpus
    if not corpus:
        raise DatasetError(f"{path}: no passages found (expected JSONL of {{title, text}} or SQuAD / ctxs data)")
    return corpus


def select_articles(dataset: Dataset, titles: list[str]) -> Dataset:
    """The questions and passages of the named articles only (SQuAD; ``_`` and spaces are equal).

    Use it to evaluate on articles a model was not trained on. Unknown titles raise DatasetError.
    """
    if dataset.format != "squad":
        raise DatasetError(f"article selection applies to SQuAD data, not {dataset.format}")
    wanted = {t.strip().replace("_", " ") for t in titles if t.strip()}
    known = {p.title for p in dataset.corpus}
    unknown = sorted(wanted - known)
    if unknown:
        raise DatasetError(f"unknown article(s): {', '.join(unknown)}; the file has: {', '.join(sorted(known))}")
    return Dataset(
        dataset.name,
        dataset.format,
        [ex for ex in dataset.examples if ex.meta.get("article") in wanted],
        [p for p in dataset.corpus if p.title in wanted],
    )
