"""``selfrag calibrate``: fit a model's abstention bars on the user's own store, and say what to expect.

    selfrag calibrate --store .selfrag/store                      # questions generated from the store
    selfrag calibrate --store .selfrag/store --questions mine.jsonl --model my-selfrag.gguf
    selfrag calibrate --chat-model openai:qwen --base-url http://127.0.0.1:8080/v1

Labelled questions come from ``--questions`` (JSONL rows ``{question, kind?, answers?, source?}``) or
are generated from the store's own documents (:func:`.questions.questions_from_documents`). Each is
asked once with the bars off; the bars are then chosen offline (:mod:`.fit`) and written beside the
model file (``<model>.calibration.json``), where every chain over that model finds them.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..config import ANSWER_FORMS
from ..errors import SelfRAGError


class CalibrateError(SelfRAGError, ValueError):
    """``selfrag calibrate`` cannot run as asked."""


def store_documents(store: Any) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The chunks of a Chroma store grouped by source, and each source's title."""
    try:
        data = store.get(include=["documents", "metadatas"])
    except Exception as exc:  # noqa: BLE001 - any store failure is the user's to fix, said in one line
        raise CalibrateError(f"cannot read the documents of the store: {exc}") from exc
    chunks: dict[str, list[tuple[int, str]]] = defaultdict(list)
    titles: dict[str, str] = {}
    for text, meta in zip(data.get("documents") or [], data.get("metadatas") or []):
        meta = meta or {}
        source = str(meta.get("source") or "?")
        chunks[source].append((int(meta.get("chunk") or 0), text or ""))
        if meta.get("title"):
            titles.setdefault(source, str(meta["title"]))
    return {s: [t for _, t in sorted(c)] for s, c in chunks.items()}, titles


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ..abstention import calibrated_config, sidecar_path
    from ..chain import SelfRAGChain
    from ..config import SelfRAGConfig
    from ..graph.context import chat_lm, default_lm, model_path
    from ..jsonl import iter_jsonl
    from ..retrieval import open_store
    from .fit import RULES, calibration, collect
    from .questions import load_questions, questions_from_documents

    if args.rule not in RULES:
        raise CalibrateError(f"--rule must be one of {', '.join(RULES)}")
    if args.chat_model and args.model:
        raise CalibrateError("--chat-model replaces --model: give one of them")
    store = open_store(args.store, chroma_url=args.chroma_url)
    if args.questions:
        try:
            questions = load_questions(row for _, row in iter_jsonl(Path(args.questions), CalibrateError))
        except ValueError as exc:
            raise CalibrateError(f"{args.questions}: {exc}") from exc
    else:
        docs, titles = store_documents(store)
        if not docs:
            raise CalibrateError("the store holds no documents: index some first (selfrag index FOLDER)")
        questions = questions_from_documents(docs, random.Random(args.seed), titles=titles, answerable=args.answerable,
                                             near_miss=args.near_miss, off_topic=args.off_topic)
    if not any(q.kind == "answerable" for q in questions):
        raise CalibrateError("no answerable question to calibrate on: give labelled ones with --questions FILE")
    chat = chat_lm(args.chat_model, args.base_url) if args.chat_model else None
    # the file whose calibration the chain reads: the model's; a chat model's name in the cache folder
    # (ChatReflectionLM.model_path), where no file need be (a chat model needs no Self-RAG model built)
    model = str(chat.model_path) if chat is not None else model_path(args.model)
    out = Path(args.out) if args.out else sidecar_path(model)
    if not args.out and chat is None and not Path(model).is_file():
        raise CalibrateError(f"{model} is not a model file: say where to write the calibration with --out")
    print(f"calibrating {Path(model).name} on {len(questions)} questions "
          f"({', '.join(f'{k} {sum(q.kind == k for q in questions)}' for k in ('answerable', 'near_miss', 'off_topic'))})",
          file=sys.stderr)
    lm = chat or default_lm(model)
    # the paper preset sets both bars, so a sidecar fitted for another file (about to be replaced) is no error
    form = args.answer_form or calibrated_config(SelfRAGConfig.paper(answer_form=None), lm).answer_form
    chain = SelfRAGChain(lm, store, SelfRAGConfig.paper(k=args.k, answer_form=form))
    records = collect(chain, questions, progress=not args.quiet)
    if args.records:
        Path(args.records).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    cal = calibration(records, Path(model).name, rule=args.rule, target=args.target,
                      fitted_on=args.questions or f"generated from {args.chroma_url or args.store} (seed {args.seed})",
                      answer_form=form)
    cal.save(out)
    if args.json:
        print(json.dumps({**cal.to_dict(), "path": str(out)}))
    else:
        print(format_calibration(cal, out))
    return 0


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:.0%}"


def format_calibration(cal: Any, path: Path) -> str:
    """The bars, where they were written, and what they are expected to give against the bars off."""
    exp, off = cal.expected, cal.expected.get("bars_off") or {}
    lines = [f"abstain_isrel = {cal.abstain_isrel:g}, abstain_issup = {cal.abstain_issup:g}  (written to {path})",
             f"rule: {cal.rule}", f"answers judged as: {cal.answer_form or 'generated'}", "",
             "expected on these questions      with the bars   bars off"]
    for kind, share in (exp.get("handled") or {}).items():
        what = "answered right" if kind == "answerable" else "abstained"
        lines.append(f"  {kind:<12} {what:<18} {_pct(share):>8}   {_pct((off.get('handled') or {}).get(kind)):>8}")
    for key in ("coverage", "selective_accuracy", "rejection_rate", "over_refusal"):
        lines.append(f"  {key.replace('_', ' '):<31} {_pct(exp.get(key)):>8}   {_pct(off.get(key)):>8}")
    return "\n".join(lines)


def register(sub: Any) -> None:
    """Add ``calibrate`` to the ``selfrag`` command's subparsers."""
    from ..config_flags import add_chat_model_flags, add_removed_flags
    from ..retrieval import DEFAULT_STORE

    p = sub.add_parser("calibrate", help="fit the model's abstention bars on questions about the store's documents")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--store", default=DEFAULT_STORE, help=f"store folder (default {DEFAULT_STORE})")
    group.add_argument("--chroma-url", metavar="URL", help="a Chroma server instead of a folder")
    p.add_argument("--model", help="Self-RAG GGUF file, HF folder, hub id or bundled model's name (default: the "
                                   "bundled model)")
    add_removed_flags(p)
    add_chat_model_flags(p)
    p.add_argument("--questions", metavar="FILE",
                   help="labelled questions, JSONL {question, kind?, answers?, source?}; default: generated from the store")
    p.add_argument("--answerable", type=int, default=40, help="generated answerable questions at most")
    p.add_argument("--near-miss", type=int, default=30, help="generated near misses at most")
    p.add_argument("--off-topic", type=int, default=30, help="built-in off-topic questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, default=5, help="passages per question")
    p.add_argument("--answer-form", choices=ANSWER_FORMS,
                   help="the answers to judge and fit the bars for: the model's words or the passage sentence that "
                        "holds them (default: the form the model's calibration names, else generated)")
    p.add_argument("--rule", default="balanced", help="balanced (default) or accuracy")
    p.add_argument("--target", type=float, default=0.8, help="selective accuracy to reach with --rule accuracy")
    p.add_argument("--out", help="calibration file (default: <model file>.calibration.json beside the model)")
    p.add_argument("--records", help="also write every question's run (JSONL) here")
    p.add_argument("--json", action="store_true", help="print the calibration as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_calibrate)
