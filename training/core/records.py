"""SFT records: the prompt of a ``{instruction, input, output}`` record, its token encoding
(``input_ids`` and a ``completion_mask``: prompt and ``no_loss_spans`` are 0), loading and tokenizing."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_selfrag.prompts import format_prompt

from .config import TrainingError
from .jsonl import read_jsonl


def record_prompt(record: Mapping[str, Any]) -> str:
    """The Alpaca prompt of a ``{instruction, input, output}`` record.

    A record with a non-empty ``prompt`` string (ReSearch data: the exact prompt the policy saw)
    uses it verbatim instead.
    """
    prompt = record.get("prompt")
    if isinstance(prompt, str) and prompt:
        return prompt
    instruction = record.get("instruction")
    if not isinstance(instruction, str) or not instruction:
        raise TrainingError(f"record has no 'instruction' string: {dict(record)!r:.200}")
    return format_prompt(instruction, record.get("input") or None)


def _output_pieces(output: str, no_loss: Sequence[Sequence[int]]) -> list[tuple[str, bool]]:
    """Split ``output`` into (text, trained?) pieces at the ``no_loss`` character spans."""
    pieces: list[tuple[str, bool]] = []
    pos = 0
    for start, end in sorted((int(s), int(e)) for s, e in no_loss):
        if not 0 <= start <= end <= len(output) or start < pos:
            raise TrainingError(f"bad no_loss span {(start, end)} for an output of {len(output)} characters")
        if start > pos:
            pieces.append((output[pos:start], True))
        if end > start:
            pieces.append((output[start:end], False))
        pos = end
    if pos < len(output):
        pieces.append((output[pos:], True))
    return pieces


def encode_record(tokenizer, record: Mapping[str, Any], max_length: int | None = None) -> dict[str, list[int]] | None:
    """``input_ids`` and ``completion_mask`` of a record; None when the prompt alone is too long.

    A trailing ``</s>`` (Llama's end-of-sequence text in the published data) is replaced by the
    tokenizer's own end-of-sequence id, which ends every record but one with ``"eos": false``. ``record["no_loss_spans"]`` (character spans of
    ``output``) get mask 0: the model reads them but is not trained to write them.
    """
    output = record.get("output")
    if not isinstance(output, str):
        raise TrainingError(f"record has no 'output' string: {dict(record)!r:.200}")
    output = output.removesuffix("</s>")
    prompt_ids = tokenizer(record_prompt(record), add_special_tokens=True)["input_ids"]
    ids = list(prompt_ids)
    mask = [0] * len(ids)
    for text, trained in _output_pieces(output, record.get("no_loss_spans") or ()):
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids.extend(piece)
        mask.extend([1 if trained else 0] * len(piece))
    if tokenizer.eos_token_id is not None and record.get("eos", True):
        ids.append(tokenizer.eos_token_id)
        mask.append(1)
    if max_length is not None and len(ids) > max_length:
        if len(prompt_ids) >= max_length:
            return None
        ids, mask = ids[:max_length], mask[:max_length]
    return {"input_ids": ids, "completion_mask": mask}


def laid_out_records(records: Iterable[Mapping[str, Any]], layout: str | None) -> list[dict]:
    """The records as the prompt ``layout`` lays them out (``paper``: unchanged); a chat layout turns a record
    into one record per retrieved passage (``prompt``, ``output``, ``no_loss_spans``, ``eos``; other fields kept)."""
    from langchain_selfrag.prompt_layouts import layout_named

    chosen = layout_named(layout)
    if chosen.is_paper:
        return [dict(r) for r in records]
    out = []
    for rec in records:
        output = rec.get("output")
        if not isinstance(output, str):
            raise TrainingError(f"record has no 'output' string: {dict(rec)!r:.200}")
        for example in chosen.training_examples(record_prompt(rec), output.removesuffix("</s>"), rec.get("no_loss_spans") or ()):
            out.append(dict(rec) | example)
    return out


def load_records(path: str | os.PathLike) -> list[dict]:
    """Records of a ``{instruction, input, output}`` JSONL file (extra fields kept)."""
    rows = list(read_jsonl(path))
    for n, row in enumerate(rows, 1):
        if not isinstance(row.get("instruction"), str) or not isinstance(row.get("output"), str):
            raise TrainingError(f"{path}: row {n} needs 'instruction' and 'output' strings")
    if not rows:
        raise TrainingError(f"{path}: no records")
    return rows


def tokenize_records(tokenizer, records: Iterable[Mapping[str, Any]], max_length: int | None):
    """A ``datasets.Dataset`` of encoded records (too-long prompts dropped) and the number dropped."""
    from datasets import Dataset

    rows, dropped = [], 0
    for rec in records:
        enc = encode_record(tokenizer, rec, max_length)
        if enc is None:
            dropped += 1
        else:
            rows.append(enc)
    if not rows:
        raise TrainingError("no record fits in max_length")
    return Dataset.from_list(rows), dropped
