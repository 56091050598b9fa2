"""Collators: right-padding with labels for SFT, and TRL's preference collator for DPO, both leaving
**each** ``<paragraph>…</paragraph>`` span untrained on its own (the authors masked from the first
``<paragraph>`` to the last ``</paragraph>``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_selfrag import tokens as T

IGNORE_INDEX = -100


def paragraph_mask(ids: Sequence[int], start_id: int, end_id: int) -> list[bool]:
    """True for tokens inside any ``<paragraph> … </paragraph>`` span, delimiters included.

    Each span is closed by its own ``</paragraph>``; text between two spans stays trainable. An
    unclosed ``<paragraph>`` masks to the end of the sequence; a stray ``</paragraph>`` is masked.
    """
    out: list[bool] = []
    inside = False
    for tid in ids:
        if tid == start_id:
            inside = True
            out.append(True)
        elif tid == end_id:
            out.append(True)
            inside = False
        else:
            out.append(inside)
    return out


@dataclass
class SelfRAGCollator:
    """Right-pads ``input_ids`` and builds ``labels``: completion tokens outside evidence spans (every
    completion token when the paragraph ids are None: a vocabulary without the reflection tokens)."""

    pad_token_id: int
    paragraph_start_id: int | None
    paragraph_end_id: int | None
    pad_to_multiple_of: int | None = None

    def labels_for(self, ids: Sequence[int], completion_mask: Sequence[int]) -> list[int]:
        if self.paragraph_start_id is None or self.paragraph_end_id is None:
            masked = [False] * len(ids)
        else:
            masked = paragraph_mask(ids, self.paragraph_start_id, self.paragraph_end_id)
        return [tid if keep and not para else IGNORE_INDEX for tid, keep, para in zip(ids, completion_mask, masked)]

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        if self.pad_to_multiple_of:
            width = int(math.ceil(width / self.pad_to_multiple_of) * self.pad_to_multiple_of)
        ids = torch.full((len(features), width), self.pad_token_id, dtype=torch.long)
        attn = torch.zeros((len(features), width), dtype=torch.long)
        labels = torch.full((len(features), width), IGNORE_INDEX, dtype=torch.long)
        for row, f in enumerate(features):
            seq = list(f["input_ids"])
            cmask = f.get("completion_mask") or [1] * len(seq)
            n = len(seq)
            ids[row, :n] = torch.tensor(seq, dtype=torch.long)
            attn[row, :n] = 1
            labels[row, :n] = torch.tensor(self.labels_for(seq, cmask), dtype=torch.long)
        return {"input_ids": ids, "attention_mask": attn, "labels": labels}



def preference_collator(tokenizer, ids: Mapping[str, int], max_length: int | None):
    """TRL's preference collator with every ``<paragraph>…</paragraph>`` span out of the completion mask."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    start, end = ids.get(T.PARAGRAPH_START), ids.get(T.PARAGRAPH_END)

    class EvidenceMaskedCollator(DataCollatorForPreference):
        def torch_call(self, examples):
            import torch

            out = super().torch_call(examples)
            if start is None or end is None:
                return out
            rows = [paragraph_mask(row.tolist(), start, end) for row in out["input_ids"]]
            out["completion_mask"] = out["completion_mask"].masked_fill(torch.tensor(rows, dtype=torch.bool), 0)
            return out

    return EvidenceMaskedCollator(pad_token_id=tokenizer.pad_token_id, max_length=max_length)
