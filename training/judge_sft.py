"""IsRel SFT: LoRA teaches a chat model to answer the IsRel question ``Yes`` / ``No`` (TRL ``SFTTrainer`` + PEFT).

A chat model asked in its own layout whether a passage states the answer to a question
(:class:`~langchain_selfrag.questions.ReflectionQuestions`' IsRel question, in ChatML) gives
``P(Yes) / (P(Yes) + P(No))`` as IsRel (:class:`~langchain_selfrag.lm.ChatReflectionLM`). Here the model
is trained to answer that question. Each labelled (question, passage) pair becomes one chat record whose
prompt is that question, byte for byte as the model is asked it (:func:`~langchain_selfrag.questions.in_chatml`),
and whose completion is ``Yes`` or ``No``; LoRA trains in the model's own vocabulary (no reflection
tokens). With ``--answers N`` the answer request of N relevant pairs is trained beside it, so the merged
model still writes well: how ``selfrag-qwen2.5-coder-1.5b``'s LoRA was trained, before
:mod:`training.question_head` fitted its reflection tokens (``cookbook/selfrag_qwen/judge_question_model.sh``).
The pairs are the IsRel labels of a Self-RAG training file
(``[Retrieval]<paragraph>title\\npassage</paragraph>[Relevant]``, what the data recipes and
``cookbook/own_data`` write; sampled by variant as :func:`training.relevance_head.judge_pairs` does),
or a JSONL of ``{question, title, passage, label}`` pairs. Held-out pairs (``--eval-file``, either
kind) are scored before and after training: the AUC of the trained IsRel, overall and on the
contrasts that matter (SQuAD 2.0's unanswerable questions, documentation near misses), written to
``judge_report.json``. ``--gguf-out`` merges the adapter onto a GGUF base with numpy (no torch; the
base's own vocabulary).

Example::

    python -m training.judge_sft --base-model qwen2.5-coder-0.5b-instruct \\
        --train-file runs/qwen/data/all.jsonl --eval-file runs/judge/eval_pairs.jsonl \\
        --output-dir runs/judge --limit 4000 --gguf-out runs/judge/judge.gguf
    selfrag ask --chat-model runs/judge/judge.gguf "..."
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from langchain_selfrag import tokens as T
from langchain_selfrag.export.gguf import OUTTYPES
from langchain_selfrag.questions import ReflectionQuestions, in_chatml

from .core.args import add_sft_arguments, config_from_args, parse
from .core.config import TrainingError
from .core.jsonl import DataFormatError, read_jsonl
from .relevance_head import auc, contrast_scores, isrel_prompt, isrel_words, judge_pairs, pair_turn

REPORT_FILE = "judge_report.json"
PAIR_FIELDS = ("question", "passage", "label")


def read_pairs(path: str | Path, *, seed: int = 0) -> list[dict[str, Any]]:
    """Labelled pairs of a file: a JSONL of ``{question, title, passage, label}`` pairs as they are, or
    the IsRel labels of a Self-RAG training file (``{instruction, output}`` rows) in weighted random order."""
    rows = list(read_jsonl(path))
    if not rows:
        raise TrainingError(f"{path}: no rows")
    if all(isinstance(r.get("instruction"), str) and isinstance(r.get("output"), str) for r in rows):
        pairs = judge_pairs(rows, seed=seed)
        if not pairs:
            raise TrainingError(f"{path}: no IsRel label ([Retrieval]<paragraph>...</paragraph>[Relevant] or "
                                "[Irrelevant]) in its outputs")
        return pairs
    for n, row in enumerate(rows, 1):
        missing = [f for f in PAIR_FIELDS if f not in row]
        if missing or row["label"] not in (0, 1, True, False):
            raise TrainingError(f"{path}: row {n} is neither a Self-RAG record ({{instruction, output}}) nor a pair "
                                f"({{question, title, passage, label}} with label 0 or 1): {dict(row)!r:.200}")
    return [{"question": r["question"], "title": r.get("title") or "", "passage": r["passage"],
             "label": int(r["label"]), "variant": r.get("variant") or "pair",
             **({"answer": r["answer"].strip()} if isinstance(r.get("answer"), str) and r["answer"].strip() else {})}
            for r in rows]


def judge_prompt_text(pair: Mapping[str, Any], questions: ReflectionQuestions) -> str:
    """The IsRel question about ``pair`` in ChatML, exactly as a chat model of this package's backends is asked it."""
    return isrel_prompt(pair_turn(pair), questions)


def judge_records(pairs: Iterable[Mapping[str, Any]], questions: ReflectionQuestions) -> list[dict[str, Any]]:
    """SFT records (``prompt`` used verbatim, ``output`` the answer word) of labelled pairs."""
    yes, no = isrel_words(questions)
    return [{"instruction": p["question"], "prompt": judge_prompt_text(p, questions),
             "output": yes if p["label"] else no} for p in pairs]


def answer_records(pairs: Iterable[Mapping[str, Any]], questions: ReflectionQuestions, limit: int) -> list[dict[str, Any]]:
    """SFT records of the answer request (the passage in the user's turn, as a chat model of the
    ``chatml-questions`` layout is asked for its answer) of the first ``limit`` relevant pairs that carry an
    ``answer``: the writer trained beside the IsRel question, so that the LoRA keeps (or learns) answering."""
    records = []
    for p in pairs:
        if len(records) >= limit:
            break
        if p["label"] and p.get("answer"):
            records.append({"instruction": p["question"], "prompt": in_chatml(questions.answer(pair_turn(p))),
                            "output": p["answer"]})
    return records


def answer_ids(tokenizer, questions: ReflectionQuestions) -> tuple[int, int]:
    """The token ids of the IsRel question's two answer words (each must be one token of the model)."""
    ids = []
    for word in isrel_words(questions):
        pieces = tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(pieces) != 1:
            raise TrainingError(f"the IsRel answer {word!r} is {len(pieces)} tokens of this model, not one")
        ids.append(pieces[0])
    return ids[0], ids[1]


def yes_shares(model, tokenizer, pairs: Sequence[Mapping[str, Any]], questions: ReflectionQuestions) -> np.ndarray:
    """The model's IsRel, ``P(Yes) / (P(Yes) + P(No))`` at the question's end, of each pair (transformers, one
    prompt at a time: no padding to get wrong)."""
    import torch

    yes, no = answer_ids(tokenizer, questions)
    out = np.zeros(len(pairs))
    model.eval()
    with torch.no_grad():
        for n, pair in enumerate(pairs):
            ids = tokenizer(judge_prompt_text(pair, questions), return_tensors="pt")["input_ids"]  # as training encodes it
            logits = model(input_ids=ids, logits_to_keep=1, use_cache=False).logits[0, -1, [yes, no]].float()
            out[n] = float(torch.softmax(logits, 0)[0])
    return out


def contrast_report(pairs: Sequence[Mapping[str, Any]], scores: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """AUC of each scoring in ``scores`` (``untrained``, ``trained``) over all pairs and on each of
    :data:`~training.relevance_head.CONTRASTS` the pairs hold both sides of."""
    labels = np.array([int(p["label"]) for p in pairs])
    report: dict[str, Any] = {"pairs": len(pairs)}
    if len(set(labels.tolist())) == 2:
        report["all"] = {name: round(auc(labels, s), 4) for name, s in scores.items()}
    return report | contrast_scores([p.get("variant") or "" for p in pairs], labels, scores)


def question_record(questions: ReflectionQuestions) -> dict[str, str]:
    """What an adapter's metadata keeps of the question it was trained on (``judge_prompt``, the key adapters
    trained before 0.1 wrote too)."""
    yes, no = isrel_words(questions)
    return {"chat": "chatml", "system": questions.system, "ask": questions.isrel, "yes": yes, "no": no}


def train_judge(cfg, questions: ReflectionQuestions | None = None, *, answers: int = 0):
    """Train the IsRel LoRA on ``cfg.train_file``'s pairs (the first ``cfg.limit``), and with ``answers`` > 0
    the answers of that many of their relevant pairs (:func:`answer_records`); the SFT result."""
    from .trainers.sft import train_sft

    questions = questions or ReflectionQuestions()
    pairs = read_pairs(cfg.train_file, seed=cfg.seed)
    if cfg.limit:
        pairs = pairs[: cfg.limit]
    written = answer_records(pairs, questions, answers) if answers > 0 else []
    if answers > 0 and not written:
        raise TrainingError(f"{cfg.train_file}: --answers needs relevant pairs with an 'answer' "
                            "(cookbook.data.judge_mix writes them)")
    cfg = dataclasses.replace(cfg, limit=None, eval_file=None,
                              extra=dict(cfg.extra) | {"method": "judge_sft", "pairs": len(pairs), "answers": len(written),
                                                       "judge_prompt": question_record(questions)})
    return train_sft(cfg, records=judge_records(pairs, questions) + written, reflection_tokens=False)


def trained_questions(adapter_dir: str | Path) -> ReflectionQuestions:
    """The questions an adapter of :func:`train_judge` was trained with (its ``selfrag_training.json``)."""
    from .core.config import META_FILE

    meta_path = Path(adapter_dir) / META_FILE
    if not meta_path.is_file():
        raise TrainingError(f"{adapter_dir} is not a training output (no {META_FILE})")
    fields = dict(json.loads(meta_path.read_text()).get("config", {}).get("judge_prompt") or {})
    if not fields:
        raise TrainingError(f"{adapter_dir} was not trained by training.judge_sft (no judge prompt in {META_FILE})")
    if fields.get("chat", "chatml") != "chatml":
        raise TrainingError(f"{adapter_dir}: unknown chat layout in {META_FILE}")
    defaults = ReflectionQuestions()
    words = {str(fields.get("yes", "Yes")): T.RELEVANT, str(fields.get("no", "No")): T.IRRELEVANT}
    return dataclasses.replace(
        defaults, system=str(fields.get("system", defaults.system)), isrel=str(fields.get("ask", defaults.isrel)),
        answer_words=MappingProxyType({**defaults.answer_words, T.Kind.ISREL: MappingProxyType(words)}))


def evaluate(base_model: str, adapter_dir: Path | None, eval_file: str, questions: ReflectionQuestions | None = None) -> dict:
    """Held-out report: the untrained base's and (with ``adapter_dir``) the trained model's AUCs, both asked
    with ``questions`` (default: those the adapter was trained with, else :class:`ReflectionQuestions`')."""
    from .core.adapters import prepare_model

    questions = questions or (trained_questions(adapter_dir) if adapter_dir is not None else ReflectionQuestions())
    pairs = read_pairs(eval_file)
    model, tokenizer, _ = prepare_model(base_model, add_tokens=False)  # loaded once (minutes for a GGUF base)
    scores = {"untrained": yes_shares(model, tokenizer, pairs, questions)}
    if adapter_dir is not None:
        from peft import PeftModel

        scores["trained"] = yes_shares(PeftModel.from_pretrained(model, str(adapter_dir)), tokenizer, pairs, questions)
    return contrast_report(pairs, scores)


def write_judge_gguf(base_model: str, adapter_dir: Path, out: str | Path, *, outtype: str = "q8_0") -> Path:
    """The trained model as one GGUF: ``adapter_dir`` merged onto the GGUF base (a path or a known base name)."""
    from langchain_selfrag.export import ExportError
    from langchain_selfrag.export.merge import merge_gguf

    from .core.adapters import resolve_base

    base = Path(resolve_base(base_model))
    if base.suffix != ".gguf":
        raise TrainingError(f"--gguf-out merges onto a GGUF base, and {base_model} is not one: build the judge with "
                            "python -m training.export --adapter ... --hf-out ... --gguf-out ...")
    try:
        return merge_gguf(base, adapter_dir, out, tokens={}, outtype=outtype, name=Path(out).stem)
    except ExportError as exc:
        raise TrainingError(str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.judge_sft", description=__doc__.split("\n\n")[0])
    add_sft_arguments(ap, lr=2e-4, max_length=512)
    ap.add_argument("--eval-only", action="store_true", help="skip training; report on output-dir/adapter")
    ap.add_argument("--answers", type=int, default=0, metavar="N",
                    help="also train the answers of N relevant pairs that carry one (the answer request, "
                         "passage in the user's turn), so the merged model still writes well (default 0)")
    ap.add_argument("--gguf-out", help="write the trained model here as one GGUF (the base must be a GGUF)")
    ap.add_argument("--outtype", default="q8_0", choices=OUTTYPES, help="the GGUF's tensor type")
    args = parse(ap, argv)
    try:
        cfg = config_from_args(args)
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        adapter = Path(args.output_dir) / "adapter"
        if not args.eval_only:
            result = train_judge(cfg, answers=args.answers)
            adapter = result.adapter_dir
            print(json.dumps({"adapter": str(adapter), "steps": result.steps, "train_loss": result.train_loss,
                              "seconds": round(result.seconds, 1), "dropped_too_long": result.dropped}, indent=1))
        if args.eval_file:
            report = evaluate(cfg.base_model, adapter, args.eval_file)
            Path(args.output_dir, REPORT_FILE).write_text(json.dumps(report, indent=1))
            print(json.dumps(report, indent=1))
        if args.gguf_out:
            print(f"judge: {write_judge_gguf(cfg.base_model, adapter, args.gguf_out, outtype=args.outtype)}")
    except (TrainingError, DataFormatError) as exc:
        ap.exit(2, f"error: {exc}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
