"""Relevance-judge SFT: LoRA teaches a chat model the judge's ``Yes`` / ``No`` (TRL ``SFTTrainer`` + PEFT).

:class:`~langchain_selfrag.lm.judge.RelevanceJudge` asks a chat model, in its own layout, whether a
passage states the answer to a question, and reads ``P(Yes) / (P(Yes) + P(No))`` as IsRel. Here the
model is trained to answer that question. Each labelled (question, passage) pair becomes one chat
record whose prompt is the judge's own (:class:`~langchain_selfrag.lm.judge.JudgePrompt`, byte for
byte) and whose completion is ``Yes`` or ``No``; LoRA trains in the model's own vocabulary (no
reflection tokens). The pairs are the IsRel labels of a Self-RAG training file
(``[Retrieval]<paragraph>title\\npassage</paragraph>[Relevant]``, what the data recipes and
``cookbook/own_data`` write; sampled by variant as :func:`training.relevance_head.judge_pairs` does),
or a JSONL of ``{question, title, passage, label}`` pairs. Held-out pairs (``--eval-file``, either
kind) are scored before and after training: the AUC of the judge's IsRel, overall and on the
contrasts that matter (SQuAD 2.0's unanswerable questions, documentation near misses), written to
``judge_report.json``. ``--gguf-out`` merges the adapter onto a GGUF base with numpy (no torch; the
base's own vocabulary) and writes the judge that ``RelevanceJudge`` and ``selfrag ask --judge`` load.

Example::

    python -m training.judge_sft --base-model qwen2.5-coder-0.5b-instruct \\
        --train-file runs/qwen/data/all.jsonl --eval-file runs/judge/eval_pairs.jsonl \\
        --output-dir runs/judge --limit 4000 --gguf-out runs/judge/judge.gguf
    selfrag ask --reader qwen2.5-coder-0.5b-instruct --judge runs/judge/judge.gguf "..."
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from langchain_selfrag.export.gguf import OUTTYPES
from langchain_selfrag.lm.chat import ReaderTurn
from langchain_selfrag.lm.chat_questions import ReflectionQuestions
from langchain_selfrag.lm.judge import JudgePrompt

from .core.args import add_sft_arguments, config_from_args, parse
from .core.config import TrainingError
from .core.jsonl import DataFormatError, read_jsonl
from .relevance_head import auc, contrast_scores, judge_pairs

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


def judge_prompt_text(pair: Mapping[str, Any], prompt: JudgePrompt) -> str:
    """The judge's prompt about ``pair``, exactly as :class:`~langchain_selfrag.lm.judge.RelevanceJudge` asks it."""
    return prompt(ReaderTurn(pair["question"], "", pair.get("title") or None, pair["passage"]))


def judge_records(pairs: Iterable[Mapping[str, Any]], prompt: JudgePrompt) -> list[dict[str, Any]]:
    """SFT records (``prompt`` used verbatim, ``output`` the answer word) of labelled pairs."""
    return [{"instruction": p["question"], "prompt": judge_prompt_text(p, prompt),
             "output": prompt.yes if p["label"] else prompt.no} for p in pairs]


def answer_records(pairs: Iterable[Mapping[str, Any]], prompt: JudgePrompt, limit: int,
                   questions: ReflectionQuestions | None = None) -> list[dict[str, Any]]:
    """SFT records of the answer request (the passage in the user's turn, as a chat model of the
    ``chatml-questions`` layout is asked for its answer) of the first ``limit`` relevant pairs that carry an
    ``answer``: the writer trained beside the judge, so that the LoRA keeps (or learns) answering."""
    questions = questions or ReflectionQuestions()
    records = []
    for p in pairs:
        if len(records) >= limit:
            break
        if p["label"] and p.get("answer"):
            turn = ReaderTurn(p["question"], "", p.get("title") or None, p["passage"])
            records.append({"instruction": p["question"], "prompt": prompt.chat(*questions.answer(turn), ""),
                            "output": p["answer"]})
    return records


def answer_ids(tokenizer, prompt: JudgePrompt) -> tuple[int, int]:
    """The token ids of the judge's two answer words (each must be one token of the model)."""
    ids = []
    for word in (prompt.yes, prompt.no):
        pieces = tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(pieces) != 1:
            raise TrainingError(f"the judge's answer {word!r} is {len(pieces)} tokens of this model, not one")
        ids.append(pieces[0])
    return ids[0], ids[1]


def yes_shares(model, tokenizer, pairs: Sequence[Mapping[str, Any]], prompt: JudgePrompt) -> np.ndarray:
    """The judge's IsRel, ``P(Yes) / (P(Yes) + P(No))`` at the prompt's end, of each pair (transformers, one
    prompt at a time: no padding to get wrong)."""
    import torch

    yes, no = answer_ids(tokenizer, prompt)
    out = np.zeros(len(pairs))
    model.eval()
    with torch.no_grad():
        for n, pair in enumerate(pairs):
            ids = tokenizer(judge_prompt_text(pair, prompt), return_tensors="pt")["input_ids"]  # as training encodes it
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


def train_judge(cfg, prompt: JudgePrompt | None = None, *, answers: int = 0):
    """Train the judge's LoRA on ``cfg.train_file``'s pairs (the first ``cfg.limit``), and with ``answers`` > 0
    the answers of that many of their relevant pairs (:func:`answer_records`); the SFT result."""
    from .trainers.sft import train_sft

    prompt = prompt or JudgePrompt()
    pairs = read_pairs(cfg.train_file, seed=cfg.seed)
    if cfg.limit:
        pairs = pairs[: cfg.limit]
    written = answer_records(pairs, prompt, answers) if answers > 0 else []
    if answers > 0 and not written:
        raise TrainingError(f"{cfg.train_file}: --answers needs relevant pairs with an 'answer' "
                            "(cookbook.data.judge_mix writes them)")
    cfg = dataclasses.replace(cfg, limit=None, eval_file=None,
                              extra=dict(cfg.extra) | {"method": "judge_sft", "pairs": len(pairs), "answers": len(written),
                                                       "judge_prompt": dataclasses.asdict(prompt) | {"chat": prompt.chat.__name__}})
    return train_sft(cfg, records=judge_records(pairs, prompt) + written, reflection_tokens=False)


def trained_prompt(adapter_dir: str | Path) -> JudgePrompt:
    """The judge prompt an adapter of :func:`train_judge` was trained with (its ``selfrag_training.json``)."""
    from langchain_selfrag.lm import chat

    from .core.config import META_FILE

    meta_path = Path(adapter_dir) / META_FILE
    if not meta_path.is_file():
        raise TrainingError(f"{adapter_dir} is not a training output (no {META_FILE})")
    fields = dict(json.loads(meta_path.read_text()).get("config", {}).get("judge_prompt") or {})
    if not fields:
        raise TrainingError(f"{adapter_dir} was not trained by training.judge_sft (no judge prompt in {META_FILE})")
    layout = getattr(chat, str(fields.pop("chat", "chatml")), None)
    if not callable(layout):
        raise TrainingError(f"{adapter_dir}: unknown chat layout in {META_FILE}")
    return JudgePrompt(chat=layout, **fields)


def evaluate(base_model: str, adapter_dir: Path | None, eval_file: str, prompt: JudgePrompt | None = None) -> dict:
    """Held-out report: the untrained base's and (with ``adapter_dir``) the trained judge's AUCs, both asked
    with ``prompt`` (default: the one the adapter was trained with, else :class:`JudgePrompt`'s)."""
    from .core.adapters import prepare_model

    prompt = prompt or (trained_prompt(adapter_dir) if adapter_dir is not None else JudgePrompt())
    pairs = read_pairs(eval_file)
    model, tokenizer, _ = prepare_model(base_model, add_tokens=False)  # loaded once (minutes for a GGUF base)
    scores = {"untrained": yes_shares(model, tokenizer, pairs, prompt)}
    if adapter_dir is not None:
        from peft import PeftModel

        scores["trained"] = yes_shares(PeftModel.from_pretrained(model, str(adapter_dir)), tokenizer, pairs, prompt)
    return contrast_report(pairs, scores)


def write_judge_gguf(base_model: str, adapter_dir: Path, out: str | Path, *, outtype: str = "q8_0") -> Path:
    """The trained judge as one GGUF: ``adapter_dir`` merged onto the GGUF base (a path or a known base name)."""
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
    ap.add_argument("--gguf-out", help="write the trained judge here as one GGUF (the base must be a GGUF)")
    ap.add_argument("--outtype", default="q8_0", choices=OUTTYPES, help="the judge GGUF's tensor type")
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
