"""Loaders for the source data: SQuAD v2 JSON, Self-RAG JSONL with ``ctxs``, instruction JSONL.

Everything is turned into three small records: :class:`Passage` (a retrievable text),
:class:`QAItem` (a question with gold answers and the ids of its answer-bearing passages) and
:class:`InstructionItem` (an instruction with a reference output).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core.jsonl import DataFormatError, read_jsonl
from ..core.text import chunk_sentences, contains_answer, split_sentences


@dataclass(frozen=True)
class Passage:
    """A retrievable passage; ``article`` groups passages for article-level splits."""

    id: str
    title: str
    text: str
    article: str = ""


@dataclass
class QAItem:
    """A question with gold answers. ``gold`` lists ids of passages that contain an answer."""

    id: str
    question: str
    answers: list[str]
    article: str = ""
    gold: list[str] = field(default_factory=list)
    answerable: bool = True
    plausible_answers: list[str] = field(default_factory=list)
    ctxs: list[Passage] = field(default_factory=list)


@dataclass
class InstructionItem:
    """An instruction-following task with a reference output (needs no retrieval)."""

    id: str
    instruction: str
    input: str
    output: str


@dataclass
class SquadCorpus:
    """SQuAD articles chunked into passages, and the questions with their gold passage ids."""

    passages: list[Passage]
    questions: list[QAItem]

    @property
    def articles(self) -> list[str]:
        return sorted({p.article for p in self.passages})

    def by_id(self) -> dict[str, Passage]:
        return {p.id: p for p in self.passages}

    def subset(self, articles: Sequence[str]) -> SquadCorpus:
        keep = set(articles)
        return SquadCorpus(
            [p for p in self.passages if p.article in keep], [q for q in self.questions if q.article in keep]
        )


def _read_json(path: str | os.PathLike) -> object:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError as exc:
        raise DataFormatError(f"file not found: {path}") from exc
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path} is not valid JSON: {exc}") from exc


def _collapse(text: str, offset: int) -> tuple[str, int]:
    """White space collapsed to single spaces, and where character ``offset`` lands."""
    collapsed = " ".join(text.split())
    prefix = text[:offset]
    new = len(" ".join(prefix.split()))
    if prefix and prefix[-1].isspace() and new:
        new += 1
    return collapsed, new


def load_squad(path: str | os.PathLike, *, max_passage_chars: int = 450) -> SquadCorpus:
    """SQuAD v1/v2 JSON -> passages (paragraphs chunked by sentences) and questions.

    A question's gold passage is the chunk holding its first answer's character span; other chunks
    of the same paragraph that also contain an answer string are gold too. Unanswerable (v2)
    questions keep their paragraph's chunks in ``gold`` only when a plausible answer lies in them,
    and have ``answerable=False``.
    """
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataFormatError(f"{path}: not SQuAD JSON (expected an object with a 'data' list)")
    passages: list[Passage] = []
    questions: list[QAItem] = []
    for art in data["data"]:
        title = str(art.get("title", "")).replace("_", " ")
        article = str(art.get("title", ""))
        for pi, para in enumerate(art.get("paragraphs", [])):
            context = para.get("context")
            if not isinstance(context, str):
                raise DataFormatError(f"{path}: paragraph without a 'context' string in {article!r}")
            collapsed = " ".join(context.split())
            sentences = split_sentences(collapsed)
            starts, pos = [], 0
            for sent in sentences:
                found = collapsed.find(sent, pos)
                starts.append(found if found >= 0 else pos)
                pos = starts[-1] + len(sent)
            chunks = []
            for ci, (a, b) in enumerate(chunk_sentences(sentences, max_passage_chars)):
                pid = f"{article}/{pi}/{ci}"
                text = " ".join(sentences[a:b])
                span = (starts[a], starts[b - 1] + len(sentences[b - 1]))
                chunks.append((Passage(pid, title, text, article), span))
                passages.append(chunks[-1][0])
            for qa in para.get("qas", []):
                answers = [a["text"] for a in qa.get("answers", []) if a.get("text")]
                plausible = [a["text"] for a in qa.get("plausible_answers", []) if a.get("text")]
                impossible = bool(qa.get("is_impossible", not answers))
                spans = qa.get("answers") or qa.get("plausible_answers") or []
                gold: list[str] = []
                if spans:
                    _, where = _collapse(context, int(spans[0].get("answer_start", 0)))
                    for passage, (s, e) in chunks:
                        if s <= where < e:
                            gold.append(passage.id)
                check = answers or plausible
                for passage, _span in chunks:
                    if passage.id not in gold and contains_answer(passage.text, check):
                        gold.append(passage.id)
                gold = [g for g in gold if contains_answer(next(p.text for p, _ in chunks if p.id == g), check)]
                questions.append(
                    QAItem(
                        id=str(qa.get("id")),
                        question=str(qa.get("question", "")).strip(),
                        answers=sorted(set(answers), key=answers.index),
                        article=article,
                        gold=gold,
                        answerable=not impossible,
                        plausible_answers=sorted(set(plausible), key=plausible.index),
                    )
                )
    return SquadCorpus(passages, questions)


def load_selfrag_qa(path: str | os.PathLike) -> list[QAItem]:
    """Self-RAG evaluation JSONL ``{question, answers, ctxs[{title, text}]}`` -> QA items.

    Passages of ``ctxs`` that contain an answer string are the gold passages.
    """
    items = []
    for n, row in enumerate(read_jsonl(path)):
        question = row.get("question") or row.get("instruction")
        if not isinstance(question, str):
            raise DataFormatError(f"{path}: row {n + 1} has no 'question'")
        answers = row.get("answers") or row.get("golds") or ([row["answer"]] if row.get("answer") else [])
        if isinstance(answers, str):
            answers = [answers]
        answers = [str(a) for a in answers]
        ctxs = []
        for j, ctx in enumerate(row.get("ctxs") or []):
            ctxs.append(Passage(f"{row.get('id', n)}/{j}", str(ctx.get("title", "")), str(ctx.get("text", ""))))
        gold = [p.id for p in ctxs if contains_answer(p.text, answers)]
        items.append(QAItem(str(row.get("id", n)), question, answers, "", gold, bool(answers), [], ctxs))
    return items


def load_instructions(path: str | os.PathLike) -> list[InstructionItem]:
    """Self-instruct style JSONL (``instruction`` + ``instances[{input, output}]``) or flat
    ``{instruction, input, output}`` rows -> instruction items (one per instance)."""
    items = []
    for n, row in enumerate(read_jsonl(path)):
        instruction = row.get("instruction")
        if not isinstance(instruction, str):
            raise DataFormatError(f"{path}: row {n + 1} has no 'instruction'")
        instances = row.get("instances") or [{"input": row.get("input", ""), "output": row.get("output", "")}]
        for j, inst in enumerate(instances):
            output = str(inst.get("output", "")).strip()
            if output:
                items.append(InstructionItem(f"{row.get('id', n)}/{j}", instruction.strip(), str(inst.get("input", "")).strip(), output))
    return items


def instruction_text(item: InstructionItem) -> str:
    """Instruction and input joined as at inference time (Self-RAG uses the no-input prompt)."""
    from langchain_selfrag.prompts import build_instruction

    return build_instruction(item.input, task_instruction=item.instruction) if item.input else item.instruction


def split_articles(articles: Sequence[str], n_heldout: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """(train, held-out) article titles, a seeded shuffle so the split is reproducible."""
    names = sorted(set(articles))
    if not 0 < n_heldout < len(names):
        raise ValueError(f"n_heldout must be between 1 and {len(names) - 1}")
    rng = random.Random(seed)
    rng.shuffle(names)
    return sorted(names[n_heldout:]), sorted(names[:n_heldout])
