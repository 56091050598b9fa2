"""Generator data from several kinds of text, for judgement that transfers beyond SQuAD.

The bundled model up to v4 was trained on 12 SQuAD articles and invented one-line facts, and judged
every passage of real documentation relevant. This builds one training set from:

* **technical documentation installed on this machine** (:mod:`training.selfrag.doc_sources`: package
  READMEs, documentation files, API pages from docstrings), loaded and chunked exactly as
  ``selfrag index`` does (markup rendered to clean text, 800-character chunks), with questions from
  its structure (:mod:`training.selfrag.doc_questions`): what a chunk states (``[Relevant]``, the
  answer, ``[Fully supported]``), the same question on the document's other chunks and on another
  document's best BM25 chunk (``[Irrelevant]``), and near misses, details the whole document does
  not state, on its own best chunks (``[Irrelevant]``);
* **SQuAD 2.0 articles** (``../shared/data``), chunked the same way: answerable questions on their
  gold chunk and a hard negative, "how"/"why" questions answered with the gold sentence, and SQuAD's
  unanswerable questions on their plausible-answer chunk (``[Irrelevant]``);
* **invented documents** (:mod:`cookbook.data.gap_corpus`): a stated detail and a gap on the same text;
* **off-topic questions** (PopQA, SelfAware, HotpotQA) on the best BM25 chunk of the pooled corpus;
* **IsSup negatives** (another question's answer after a gold chunk, ``[No support / Contradictory]``;
  with ``--in-passage N`` also answers of other questions that are spans of the same chunk, so that
  IsSup judges whether a span answers the question and not only whether the passage holds it)
  and **no-retrieval instructions** (``[No Retrieval]``).

After ``[Irrelevant]`` the text is not trained (a no-loss span) and ``[Utility:1]`` is. Left out of
everything: the trust suite's documents (``benchmarks/trust``), the SQuAD articles of its validation
and test parts, and every word of the project's invented corpora::

    python -m cookbook.data.varied_data --data ../shared/data --out runs/v9/data
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from langchain_selfrag import tokens as T
from langchain_selfrag.prompts import format_evidence
from langchain_selfrag.retrieval.loading import load_file, split_documents
from training.core.jsonl import write_jsonl
from training.core.text import contains_answer, split_sentences
from training.selfrag.bm25 import BM25Retriever
from training.selfrag.critic_cases import shorten
from langchain_selfrag.calibrate.questions import gap_questions, stated_questions
from training.selfrag.doc_sources import DocText, installed_docs, normalise, site_dirs
from training.selfrag.qa_data import Passage

from cookbook.selfrag_smollm2.build_data import instruction_split, instruction_tasks

from .gap_corpus import gap_corpus, invented_corpus_texts

ROOT = Path(__file__).resolve().parents[2]
TRUST = ROOT / "benchmarks" / "trust"
#: SQuAD articles left out of every draw here: the trust suite's test part (the bundled model's held-out
#: articles), its validation part (train-split articles, ``benchmarks/trust/squad``; a unit test keeps
#: the two lists equal) and the two dev-half articles that validated it before.
KEEP_OUT_ARTICLES = ("Packet_switching", "1973_oil_crisis", "Computational_complexity_theory", "Harvard_University",
                     "Normans", "Warsaw", "Beyoncé", "Frédéric_Chopin", "Sino-Tibetan_relations_during_the_Ming_dynasty",
                     "IPod", "The_Legend_of_Zelda:_Twilight_Princess", "Spectre_(2015_film)", "2008_Sichuan_earthquake",
                     "New_York_City", "To_Kill_a_Mockingbird", "Solar_energy")
_HOW = re.compile(r"^\s*(how|why|in what way)\b(?!\s+(many|much|long|old|far|large|big|often|tall|high|deep|wide))", re.I)


def suite_packages(sources: Path = TRUST / "docs" / "sources.json") -> set[str]:
    """Distribution names of the trust suite's documentation (never trained on), as its sources list them
    (``benchmarks/trust/docs/sources.json``: a package has several files, named ``<package>-<what>.<ext>``)."""
    return {normalise(row["package"]) for row in json.loads(sources.read_text(encoding="utf-8"))["files"]}


def chunk_texts(files: Mapping[str, str], tag: str) -> dict[str, list[Passage]]:
    """Each file loaded and chunked as ``selfrag index`` does; its chunks as passages (by file name)."""
    out: dict[str, list[Passage]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            path = Path(tmp) / name
            path.write_text(text, encoding="utf-8")
            try:
                chunks = split_documents(load_file(path, source=name))
            except Exception:  # a file the loader rejects is not training text  # noqa: BLE001
                continue
            out[name] = [Passage(f"{tag}:{name}#{c.metadata['chunk']}", str(c.metadata.get("title") or Path(name).stem),
                                 c.page_content, article=f"{tag}:{name}") for c in chunks if c.page_content.strip()]
    return out


# --- rows --------------------------------------------------------------------------------------------

def relevant_row(question: str, answer: str, p: Passage, variant: str) -> dict:
    output = T.RETRIEVAL + format_evidence(p.title, p.text) + T.RELEVANT + answer + T.FULLY_SUPPORTED + T.UTILITY[4]
    return {"instruction": question, "input": "", "output": output, "variant": variant, "passage": p.id}


def irrelevant_row(question: str, p: Passage, filler: str, variant: str) -> dict:
    """``[Irrelevant]``, then ``filler`` read but not trained, then ``[Utility:1]``."""
    head = T.RETRIEVAL + format_evidence(p.title, p.text) + T.IRRELEVANT
    filler = filler.strip() or "-"
    return {"instruction": question, "input": "", "output": head + filler + T.UTILITY[0], "variant": variant,
            "passage": p.id, "no_loss_spans": [[len(head), len(head) + len(filler)]]}


def issup_negative_row(question: str, wrong: str, p: Passage, variant: str = "issup_negative") -> dict:
    head = T.RETRIEVAL + format_evidence(p.title, p.text) + T.RELEVANT
    return {"instruction": question, "input": "", "output": head + wrong + T.NO_SUPPORT + T.UTILITY[0],
            "variant": variant, "passage": p.id, "no_loss_spans": [[len(head), len(head) + len(wrong)]]}


def _words(question: str) -> set[str]:
    return {w.lower().strip("?,.;:!\"'()") for w in question.split()}


def in_passage_distractors(items: Sequence[tuple[str, str, Passage, Sequence[str]]], rng: random.Random,
                           *, max_overlap: float = 0.3) -> list[tuple[str, str, str, Passage]]:
    """``(question, answer, distractor, passage)``: another question's answer that is a span of the
    same passage, so an IsSup judge must read the question and not just find the span. Distractors
    that overlap a gold answer, or whose question shares more than ``max_overlap`` of its words
    (Jaccard) with this one (a paraphrase, likely the same answer), are left out."""
    by_passage: dict[str, list[tuple[set[str], str]]] = {}
    for question, answer, p, _ in items:
        by_passage.setdefault(p.id, []).append((_words(question), answer))
    out = []
    for question, answer, p, golds in items:
        words = _words(question)
        candidates = []
        for other_words, other_a in by_passage[p.id]:
            if len(words & other_words) / len(words | other_words) >= max_overlap:
                continue
            if any(other_a.lower() in g.lower() or g.lower() in other_a.lower() for g in [answer, *golds]):
                continue  # the same answer, or one overlapping a gold answer
            if contains_answer(p.text, [other_a]):
                candidates.append(other_a)
        if candidates:
            out.append((question, answer, rng.choice(candidates), p))
    return out


def no_retrieval_row(instruction: str, output: str) -> dict:
    return {"instruction": instruction, "input": "", "output": T.NO_RETRIEVAL + output + T.UTILITY[4],
            "variant": "no_retrieval"}


# --- sources -----------------------------------------------------------------------------------------

def doc_items(docs: Sequence[DocText], rng: random.Random, *, per_doc: int = 4, install_share: float = 0.25):
    """``(chunks by file, answerable [(question, answer, passage)], near misses [(question, file)])``."""
    chunks = chunk_texts({d.name: d.text for d in docs}, "doc")
    kinds = {d.name: d for d in docs}
    answerable, near = [], []
    params = sorted({a for d in docs if d.kind == "api" for a in re.findall(r"\b([a-z]+_[a-z_]+)=", d.text)})
    for name, passages in chunks.items():
        doc = kinds[name]
        label = doc.package if doc.kind != "api" else Path(name).stem
        found = [(q, a, p) for p in passages for q, a in stated_questions(label, p.text, rng, kind=doc.kind)]
        installs = [f for f in found if "install" in f[0].lower()]
        others = [f for f in found if f not in installs]
        rng.shuffle(others)
        keep = others[:per_doc]
        if installs and rng.random() < install_share:
            keep.append(installs[0])
        answerable += keep
        if doc.kind in ("readme", "api"):
            whole = "\n".join(p.text for p in passages)
            near += [(q, name) for q in gap_questions(label, whole, rng, limit=2, parameter_pool=params)]
    return chunks, answerable, near


def squad_items(path: Path, rng: random.Random):
    """Chunks of the training articles, answerable ``(question, answer, passage)`` (how/why answered with
    the gold sentence) and unanswerable ``(question, plausible answer, passage)``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SystemExit(f"{path} is not a SQuAD 2.0 JSON file (a top-level 'data' list of articles): {err}") from None
    files, qas = {}, []
    for art in data:
        if art["title"] in KEEP_OUT_ARTICLES:
            continue
        name = f"{art['title']}.txt"
        files[name] = "\n\n".join(p["context"].strip() for p in art["paragraphs"]) + "\n"
        for para in art["paragraphs"]:
            for qa in para["qas"]:
                qas.append((name, para["context"], qa))
    chunks = chunk_texts(files, "squad")
    answerable, unanswerable = [], []
    for name, context, qa in qas:
        spans = qa.get("answers") or qa.get("plausible_answers") or []
        if not spans:
            continue
        span = spans[0]
        start, text = int(span["answer_start"]), span["text"]
        window = " ".join(context[max(0, start - 40): start + len(text) + 40].split())
        gold = [p for p in chunks.get(name, []) if text in p.text and window[10:-10] in " ".join(p.text.split())]
        if not gold:
            continue
        question = qa["question"].strip()
        if qa.get("is_impossible"):
            unanswerable.append((question, text, gold[0]))
            continue
        answer = text
        if _HOW.match(question):
            sent = next((s for s in split_sentences(gold[0].text) if text in s), None)
            answer = sent if sent and len(sent) < 300 else text
        answerable.append((question, answer, gold[0], sorted({a["text"] for a in qa["answers"]})))
    rng.shuffle(answerable)
    rng.shuffle(unanswerable)
    return chunks, answerable, unanswerable


def off_topic_questions(data: Path, n: int, rng: random.Random, avoid: Iterable[str]) -> list[str]:
    """``n`` open-domain questions (PopQA, SelfAware, HotpotQA), none of the trust suite's."""
    skip = {q.strip().lower() for q in avoid}
    pool = []
    for line in (data / "popqa.jsonl").read_text().splitlines():
        pool.append(json.loads(line)["question"])
    pool += [e["question"] for e in json.loads((data / "selfaware.json").read_text())["example"]]
    pool += [json.loads(line)["question"] for line in (data / "hotpotqa_dev_200.jsonl").read_text().splitlines()]
    pool = sorted({q.strip() for q in pool if q.strip().lower() not in skip})
    return rng.sample(pool, min(n, len(pool)))


# --- assembly ----------------------------------------------------------------------------------------

def build(data: Path, *, seed: int = 0, scale: float = 1.0, extra_site: Sequence[str] = (),
          squad_files: Sequence[Path] = (), squad_answerable: int = 1000,
          squad_unanswerable: int = 250, in_passage: int = 0) -> tuple[list[dict], dict]:
    """The rows and a summary; ``squad_files``: more SQuAD 2.0 files (e.g. articles of the train split)
    beside the dev half, whose answerable and unanswerable questions join the pools; ``in_passage``:
    IsSup negatives whose wrong answer is a span of the same passage (:func:`in_passage_distractors`),
    each with the right answer as its positive 70% of the time."""
    rng = random.Random(seed)

    def n(x: int) -> int:
        return max(1, int(round(x * scale)))

    docs = installed_docs(site_dirs(extra_site), exclude=suite_packages())
    doc_chunks, doc_qa, doc_near = doc_items(docs, rng)
    sq_chunks, sq_qa, sq_unans = squad_items(data / "squad2_dev_half.json", rng)
    for path in squad_files:
        more_chunks, more_qa, more_unans = squad_items(Path(path), rng)
        if set(more_chunks) & set(sq_chunks):
            raise SystemExit(f"{path} repeats articles already read: {sorted(set(more_chunks) & set(sq_chunks))[:3]}")
        sq_chunks.update(more_chunks)
        sq_qa += more_qa
        sq_unans += more_unans
    if squad_files:  # mixed, so that every file gives to each count (the default draw is unchanged)
        rng.shuffle(sq_qa)
        rng.shuffle(sq_unans)
    gaps = gap_corpus(n(500), seed, avoid=invented_corpus_texts())
    gap_chunks = chunk_texts({g.source: g.text for g in gaps}, "gap")
    pool = [p for group in (doc_chunks, sq_chunks, gap_chunks) for ps in group.values() for p in ps]
    bm25 = BM25Retriever(pool)
    rows: list[dict] = []

    def negatives(question: str, answers: Sequence[str], own: str, k: int = 8) -> tuple[list[Passage], list[Passage]]:
        """Best BM25 chunks lacking every answer: of the same file, and of other files."""
        hits = [p for p in bm25(question, k * 4) if not contains_answer(p.text, answers)]
        return [p for p in hits if p.article == own][:k], [p for p in hits if p.article != own][:k]

    rng.shuffle(doc_qa)
    for question, answer, p in doc_qa[: n(1800)]:
        rows.append(relevant_row(question, answer, p, "doc_relevant"))
        same, other = negatives(question, [answer], p.article)
        if same:
            rows.append(irrelevant_row(question, same[0], answer, "doc_same_document"))
        if other and rng.random() < 0.4:
            rows.append(irrelevant_row(question, other[0], answer, "doc_other_document"))
    stated = [a for _, a, _ in doc_qa]
    for question, name in doc_near[: n(700)]:
        own = f"doc:{name}"
        hits = [p for p in bm25(question, 40) if p.article == own][:2]
        for p in hits[: 1 + (rng.random() < 0.5)]:
            rows.append(irrelevant_row(question, p, rng.choice(stated), "doc_near_miss"))
    # every "how" / "why" question is kept (answered with its gold sentence: answers that explain)
    sentence_qa = [item for item in sq_qa if item[1] not in item[3]]
    plain_qa = [item for item in sq_qa if item[1] in item[3]]
    for question, answer, p, golds in sentence_qa[: n(400)] + plain_qa[: n(squad_answerable)]:
        rows.append(relevant_row(question, answer, p, "squad_relevant" if answer in golds else "squad_relevant_sentence"))
        same, other = negatives(question, golds, p.article)
        hard = same or other
        if hard:
            rows.append(irrelevant_row(question, hard[0], golds[0], "squad_hard_negative"))
    for question, plausible, p in sq_unans[: n(squad_unanswerable)]:
        rows.append(irrelevant_row(question, p, plausible, "squad_unanswerable"))
    for g in gaps:
        passages = gap_chunks.get(g.source) or []
        if not passages or not g.gaps or not g.answerable:
            continue
        question, answer = rng.choice(g.answerable)
        if contains_answer(passages[0].text, [answer]):
            rows.append(relevant_row(question, answer, passages[0], "gap_stated"))
        rows.append(irrelevant_row(rng.choice(g.gaps), passages[0], answer, "gap_unstated"))
    suite_off = json.loads((TRUST / "off_topic.json").read_text())
    for question in off_topic_questions(data, n(700), rng, suite_off["validation"] + suite_off["test"]):
        hits = bm25(question, 3)
        if hits:
            rows.append(irrelevant_row(question, rng.choice(hits), "-", "off_topic"))
    wrong_pool = [a for _, a, _ in doc_qa] + [a for _, a, _, _ in sq_qa]
    for question, answer, p in rng.sample(doc_qa, min(len(doc_qa), n(300))):
        wrong = rng.choice(wrong_pool)
        if not contains_answer(p.text, [wrong]) and wrong != answer:
            rows.append(issup_negative_row(question, wrong, p))
    for question, answer, p, golds in sq_qa[: n(300)]:
        wrong = rng.choice(wrong_pool)
        if not contains_answer(p.text, [wrong]):
            rows.append(issup_negative_row(question, wrong, p))
    if in_passage:
        span_qa = plain_qa + [(q, a, p, [a]) for q, a, p in doc_qa]
        pairs = in_passage_distractors(span_qa, rng)
        rng.shuffle(pairs)
        for question, answer, wrong, p in pairs[: n(in_passage)]:
            rows.append(issup_negative_row(question, wrong, p, "issup_in_passage"))
            if rng.random() < 0.7:
                rows.append(relevant_row(question, answer, p, "issup_in_passage_positive"))
    instr_train, _ = instruction_split(instruction_tasks(data), 0)
    for item in instr_train[: n(300)]:
        from training.selfrag.qa_data import instruction_text

        rows.append(no_retrieval_row(instruction_text(item), shorten(item.output)))
    for i, r in enumerate(rows):
        r["id"] = f"{r['variant']}/{i}"
    rng.shuffle(rows)
    summary = {"examples": len(rows), "variants": dict(sorted(Counter(r["variant"] for r in rows).items())),
               "documents": dict(Counter(d.kind for d in docs)), "doc_questions": len(doc_qa),
               "doc_near_misses": len(doc_near), "squad_answerable": len(sq_qa), "squad_unanswerable": len(sq_unans),
               "gap_documents": len(gaps), "left_out": {"packages": sorted(suite_packages()),
                                                        "squad_articles": list(KEEP_OUT_ARTICLES)},
               "squad_files": [str(f) for f in squad_files], "in_passage": in_passage, "seed": seed, "scale": scale}
    return rows, summary


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--out", default="runs/v9/data", help="folder for generator_train.jsonl and data.json")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every count (a smaller pilot set)")
    ap.add_argument("--site-packages", action="append", default=[],
                    help="another site-packages folder to read documentation from (repeatable)")
    ap.add_argument("--squad-file", action="append", default=[], type=Path,
                    help="another SQuAD 2.0 JSON file (e.g. part of train-v2.0.json) whose articles join the "
                         "dev half's (repeatable; the trust suite's articles are left out of every file)")
    ap.add_argument("--squad-answerable", type=int, default=1000, help="plain answerable SQuAD questions (before --scale)")
    ap.add_argument("--squad-unanswerable", type=int, default=250,
                    help="SQuAD 2.0 unanswerable questions on their plausible-answer chunk (before --scale)")
    ap.add_argument("--in-passage", type=int, default=0,
                    help="IsSup negatives whose wrong answer is another question's answer in the same passage "
                         "(before --scale; 0: none)")
    args = ap.parse_args(argv)
    for path in args.squad_file:
        if not path.is_file():
            ap.error(f"--squad-file {path}: no such file")
    rows, summary = build(Path(args.data), seed=args.seed, scale=args.scale, extra_site=args.site_packages,
                          squad_files=args.squad_file, squad_answerable=args.squad_answerable,
                          squad_unanswerable=args.squad_unanswerable, in_passage=args.in_passage)
    out = Path(args.out)
    write_jsonl(out / "generator_train.jsonl", rows)
    (out / "data.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "left_out"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
