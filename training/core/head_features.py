"""What a frozen base sees where a Self-RAG record is trained: its last hidden state (after the final
norm) at each position whose next token is labelled, and at a few unlabelled ones, with the
log-sum-exp of the base's own output rows there and the target's logit.

These are all a fit of the reflection-token output rows needs (:mod:`training.core.head_fit`): with
the base frozen, the hidden states do not depend on those rows, so one forward pass over the data
serves every fit. Stored in shards, so an interrupted extraction resumes.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .collate import IGNORE_INDEX, SelfRAGCollator
from .config import TrainingError

#: Arrays of one shard file, in the order they are concatenated.
FIELDS = ("hidden", "lse_fixed", "target", "target_logit", "weight", "record")


@dataclass
class HeadFeatures:
    """Positions of training records as the frozen base sees them.

    ``target`` is the index of the position's next token among the fitted rows, or -1 when the next
    token is one of the base's own (its logit is then ``target_logit``). ``lse_fixed`` is the
    log-sum-exp of every output row that is not fitted. ``record`` numbers the record a position is from.
    """

    hidden: np.ndarray
    lse_fixed: np.ndarray
    target: np.ndarray
    target_logit: np.ndarray
    weight: np.ndarray
    record: np.ndarray

    def __len__(self) -> int:
        return int(self.target.shape[0])

    def subset(self, mask: np.ndarray) -> HeadFeatures:
        return HeadFeatures(*(getattr(self, f)[mask] for f in FIELDS))

    @classmethod
    def concat(cls, parts: Sequence[HeadFeatures]) -> HeadFeatures:
        if not parts:
            raise ValueError("no feature shards")
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in FIELDS))


def chosen_positions(ids: Sequence[int], labels: Sequence[int], fitted: Collection[int], extra: int,
                     rng: random.Random) -> list[tuple[int, int, float]]:
    """``(position, next token, weight)`` to read: every position whose next token is labelled, and up to
    ``extra`` positions whose next token is not labelled and is not a fitted token (negatives from the
    prompt and the evidence: a fitted row must not fire in the middle of ordinary text)."""
    labelled = [(p, labels[p + 1], 1.0) for p in range(len(ids) - 1) if labels[p + 1] != IGNORE_INDEX]
    free = [p for p in range(len(ids) - 1) if labels[p + 1] == IGNORE_INDEX and ids[p + 1] not in fitted]
    picked = rng.sample(free, min(extra, len(free)))
    return labelled + [(p, ids[p + 1], 1.0) for p in sorted(picked)]


def extract_features(model, encoded: Sequence[Mapping[str, Any]], collator: SelfRAGCollator, fitted_ids: Sequence[int],
                     out_dir: str | Path, *, extra_negatives: int = 8, batch_size: int = 8, shard_size: int = 256,
                     seed: int = 0, progress: Callable[[str], None] = print, bf16: bool = False,
                     settings: Mapping[str, Any] | None = None) -> HeadFeatures:
    """Features of ``encoded`` records (``input_ids`` and ``completion_mask``) under the frozen ``model``.

    Shards of ``shard_size`` records go to ``out_dir/shard-NNNNN.npz``; existing shards are read, not
    recomputed (a rerun after an interruption resumes). ``fitted_ids`` are the output rows the fit will set.
    ``bf16``: the forward passes under bf16 autocast (faster on a CPU that computes bf16 in hardware; the
    features are kept in float32). ``settings``: more of what the features depend on (the input rows given to the
    reflection tokens), checked on a resume as the data are.
    """
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fitted = [int(i) for i in fitted_ids]
    _claim(out, {"records": len(encoded), "data_sha256": _fingerprint(encoded), "fitted_ids": fitted,
                 "extra_negatives": extra_negatives, "shard_size": shard_size, "seed": seed, **(settings or {})})
    head = model.get_output_embeddings().weight.detach()
    fixed = torch.ones(head.shape[0], dtype=torch.bool)
    fixed[fitted] = False
    column = {tid: k for k, tid in enumerate(fitted)}
    shards, started, done = [], time.monotonic(), 0
    for first in range(0, len(encoded), shard_size):
        path = out / f"shard-{first // shard_size:05d}.npz"
        if path.is_file():
            shards.append(_read_shard(path))
            continue
        rows = encoded[first : first + shard_size]
        rng = random.Random(seed * 1_000_003 + first)
        parts: dict[str, list] = {f: [] for f in FIELDS}
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]["input_ids"]))  # similar lengths batch together
        for start in range(0, len(order), batch_size):
            batch = [rows[i] for i in order[start : start + batch_size]]
            enc = collator(batch)
            with torch.no_grad(), torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=bf16):
                hidden = model.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                                     use_cache=False).last_hidden_state
            for b, i in enumerate(order[start : start + batch_size]):
                ids, labels = enc["input_ids"][b].tolist(), enc["labels"][b].tolist()
                n = int(enc["attention_mask"][b].sum())
                picks = chosen_positions(ids[:n], labels[:n], column.keys(), extra_negatives, rng)
                if not picks:
                    continue
                h = hidden[b, [p for p, _, _ in picks]].float()
                with torch.no_grad():
                    logits = h @ head.T.float()
                    lse = torch.logsumexp(logits[:, fixed], dim=1)
                for k, (_, tid, w) in enumerate(picks):
                    parts["target"].append(column.get(tid, -1))
                    parts["target_logit"].append(float(logits[k, tid]) if tid not in column else 0.0)
                    parts["weight"].append(w)
                    parts["record"].append(first + i)
                parts["hidden"].append(h.numpy())
                parts["lse_fixed"].append(lse.numpy())
        shard = HeadFeatures(
            hidden=np.concatenate(parts["hidden"]).astype(np.float32),
            lse_fixed=np.concatenate(parts["lse_fixed"]).astype(np.float32),
            target=np.asarray(parts["target"], dtype=np.int32),
            target_logit=np.asarray(parts["target_logit"], dtype=np.float32),
            weight=np.asarray(parts["weight"], dtype=np.float32),
            record=np.asarray(parts["record"], dtype=np.int32),
        )
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, **{f: getattr(shard, f) for f in FIELDS})
        tmp.replace(path)
        shards.append(shard)
        done += len(rows)
        rate = done / max(time.monotonic() - started, 1e-9)
        left = len(encoded) - first - len(rows)
        progress(f"features: {first + len(rows)}/{len(encoded)} records, {rate:.2f} records/s, "
                 f"about {left / max(rate, 1e-9) / 60:.0f} min left")
    return HeadFeatures.concat(shards)


def _fingerprint(encoded: Sequence[Mapping[str, Any]]) -> str:
    digest = hashlib.sha256()
    for rec in encoded:
        digest.update(np.asarray(rec["input_ids"], dtype=np.int64).tobytes())
        digest.update(np.asarray(rec.get("completion_mask") or (), dtype=np.int8).tobytes() + b"|")
    return digest.hexdigest()


def _claim(out: Path, settings: dict) -> None:
    """Write the folder's settings, or check that its shards were made with these (a resume)."""
    path = out / "features.json"
    if path.is_file():
        earlier = json.loads(path.read_text())
        if earlier != settings:
            changed = sorted(k for k in settings if earlier.get(k) != settings[k])
            raise TrainingError(f"{out} holds features of other records or settings ({', '.join(changed)} differ): "
                                "use another output folder")
        return
    if any(out.glob("shard-*.npz")):
        raise TrainingError(f"{out} holds feature shards without their settings file: use another output folder")
    path.write_text(json.dumps(settings, indent=1))


def _read_shard(path: Path) -> HeadFeatures:
    with np.load(path) as data:
        return HeadFeatures(*(data[f] for f in FIELDS))
