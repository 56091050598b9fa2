"""Reflection head on a frozen base: teach a base the 15 reflection tokens by fitting only their output
rows (and the end-of-sequence row), so that the base reads and writes exactly as before.

A LoRA run changes how the base reads; on two CPU cores a short one made Qwen2.5-Coder-0.5B read far
worse than it does untrained (cookbook/EXPERIMENTS.md). Here the base stays as it is: one forward
pass over the training records gives its last hidden states where a token is trained
(:mod:`training.core.head_features`), and the rows are the minimum of the same next-token loss SFT
minimises, which with everything else frozen is convex (:mod:`training.core.head_fit`). The input
rows of the reflection tokens keep their start (the mean of the rows of their pieces). The result is
a PEFT trainable-tokens adapter that ``pack``, the GGUF merge and transformers all take.

Example::

    python -m training.reflection_head --base-model qwen2.5-coder-0.5b-instruct \\
        --train-file runs/qwen/data/all.jsonl --output-dir runs/qwen/head --limit 3000
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from langchain_selfrag.prompt_layouts import CONFIG_KEY, SINGLE_PROMPT_LAYOUTS

from .core.config import META_FILE, TrainingError, trained_layout
from .core.jsonl import DataFormatError


def train_head(base_model: str, train_file: str, output_dir: str, *, limit: int | None = None, max_length: int = 256,
               extra_negatives: int = 8, l2_grid: Sequence[float] = (1e-3, 1e-2, 1e-1, 1.0), holdout: float = 0.1,
               batch_size: int = 8, threads: int | None = None, seed: int = 0, prompt_layout: str | None = None,
               bf16: str = "auto", input_row: str | None = None) -> dict:
    """Extract features, choose the L2 weight on a held-out tenth of the records (by the loss where a
    fitted token is next), refit on all records, write the adapter; returns its metadata."""
    from langchain_selfrag import tokens as T

    from .core.adapters import prepare_model
    from .core.collate import SelfRAGCollator
    from .core.head_fit import fit_rows, heldout_report
    from .core.head_features import extract_features
    from .core.records import encode_record, laid_out_records, load_records
    from .trainers.common import _use_bf16, set_threads

    set_threads(threads)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    prompt_layout = trained_layout(prompt_layout, base_model)
    rows = laid_out_records(load_records(train_file)[: limit or None], prompt_layout)
    model, tokenizer, ids = prepare_model(base_model)
    model.eval()
    eos = tokenizer.eos_token_id
    if eos is None:
        raise TrainingError(f"{base_model} has no end-of-sequence token to fit")
    fitted = [ids[t] for t in T.REFLECTION_TOKENS] + [int(eos)]
    if input_row is not None:
        set_input_rows(model, tokenizer, [ids[t] for t in T.REFLECTION_TOKENS], input_row)
    encoded = [e for e in (encode_record(tokenizer, r, max_length) for r in rows) if e is not None]
    collator = SelfRAGCollator(tokenizer.pad_token_id, ids[T.PARAGRAPH_START], ids[T.PARAGRAPH_END])
    started = time.monotonic()
    features = extract_features(model, encoded, collator, fitted, out / "features", extra_negatives=extra_negatives,
                                batch_size=batch_size, seed=seed, bf16=_use_bf16(bf16),
                                settings={"input_row": input_row} if input_row is not None else None)
    extract_s = time.monotonic() - started
    head = model.get_output_embeddings().weight.detach()
    init = head[fitted].float().numpy()
    rng = np.random.default_rng(seed)
    records = np.unique(features.record)
    held = set(rng.choice(records, size=max(1, int(len(records) * holdout)), replace=False).tolist())
    is_held = np.isin(features.record, list(held))
    names = [*T.REFLECTION_TOKENS, "<eos>"]
    fit_part, held_part = features.subset(~is_held), features.subset(is_held)
    choice = [{"l2": l2, **heldout_report(held_part, fit_rows(fit_part, init, l2=l2), names)} for l2 in l2_grid]
    # chosen by the loss where a reflection token (or end of sequence) is next: elsewhere the loss is
    # nearly all the frozen base's own, which no choice changes
    best = min(choice, key=lambda c: c["fitted_loss"])
    started = time.monotonic()
    rows_final = fit_rows(features, init, l2=best["l2"])
    fit_s = time.monotonic() - started
    adapter = out / "adapter"
    embed = model.get_input_embeddings().weight.detach()[fitted].float().numpy()
    write_head_adapter(adapter, fitted, embed, rows_final, model)
    tokenizer.save_pretrained(str(adapter))
    meta = {
        "base_model": str(base_model),
        "method": "reflection_head",
        CONFIG_KEY: prompt_layout,
        "config": {"train_file": str(train_file), "limit": limit, "max_length": max_length,
                   "extra_negatives": extra_negatives, "prompt_layout": prompt_layout, "l2_grid": list(l2_grid), "holdout": holdout, "seed": seed},
        "reflection_token_ids": ids,
        "fitted_ids": fitted,
        "examples": len(encoded),
        "dropped_too_long": len(rows) - len(encoded),
        "positions": len(features),
        "l2": best["l2"],
        "heldout": choice,
        "seconds": round(extract_s + fit_s, 1),
        "seconds_features": round(extract_s, 1),
        "bf16_features": _use_bf16(bf16),
        "input_row": input_row,
    }
    (adapter / META_FILE).write_text(json.dumps(meta, indent=1))
    return meta


def set_input_rows(model, tokenizer, token_ids: Sequence[int], text: str) -> None:
    """Give ``token_ids`` the input row of ``text`` (one token of the base): what the frozen base reads where a
    reflection token was written. The mean of a token's pieces, the default, reads to the base as a word it
    half knows: after ``[Relevant]`` so made, Qwen2.5-Coder went on as if the answer's first token were written
    already ("issa Brenner" for "Ilsa Brenner"); read as a line break, the answer starts as it would untrained."""
    import torch

    found = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(found) != 1:
        raise TrainingError(f"--input-row {text!r} is {len(found)} tokens of the base, not one")
    weight = model.get_input_embeddings().weight
    with torch.no_grad():
        weight[list(token_ids)] = weight[found[0]].clone()


def write_head_adapter(folder: Path, fitted: Sequence[int], embed_rows: np.ndarray, head_rows: np.ndarray, model) -> None:
    """A PEFT trainable-tokens adapter: the input rows (as they start) and the fitted output rows."""
    import torch
    from peft import TrainableTokensConfig
    from safetensors.torch import save_file

    from .core.adapters import module_path

    folder.mkdir(parents=True, exist_ok=True)
    emb_name = module_path(model, model.get_input_embeddings())
    head_name = module_path(model, model.get_output_embeddings())
    tensors = {f"base_model.model.{emb_name}.trainable_tokens_delta": torch.from_numpy(np.ascontiguousarray(embed_rows)),
               f"base_model.model.{head_name}.trainable_tokens_delta": torch.from_numpy(np.ascontiguousarray(head_rows))}
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    TrainableTokensConfig(target_modules=[emb_name.rsplit(".", 1)[-1], head_name.rsplit(".", 1)[-1]],
                          token_indices=[int(i) for i in fitted], inference_mode=True).save_pretrained(str(folder))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.reflection_head", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-model", required=True, help="HF directory, .gguf file or a known base name")
    ap.add_argument("--train-file", required=True, help="JSONL of {instruction, input, output} records")
    ap.add_argument("--output-dir", required=True, help="features/ (resumable) and adapter/")
    ap.add_argument("--limit", type=int, help="use only the first N records")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--extra-negatives", type=int, default=8,
                    help="unlabelled positions per record where no reflection token may fire")
    ap.add_argument("--l2", default="1e-3,1e-2,1e-1,1", help="L2 weights to choose from on held-out records")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input-row", metavar="TEXT",
                    help="the input row every reflection token takes: that of TEXT, one token of the base (e.g. a line "
                         "break); default: the mean of the token's pieces")
    ap.add_argument("--bf16", default="auto", choices=["auto", "true", "false"],
                    help="forward passes under bf16 autocast (auto: where the CPU computes bf16 in hardware, or a GPU)")
    ap.add_argument("--prompt-layout", choices=SINGLE_PROMPT_LAYOUTS,
                    help="the prompt layout to fit in, recorded in the adapter (chatml: the base's chat layout); "
                         "default: the one the base records, else paper")
    args = ap.parse_args(argv)
    try:
        meta = train_head(args.base_model, args.train_file, args.output_dir, limit=args.limit, max_length=args.max_length,
                          extra_negatives=args.extra_negatives, l2_grid=[float(x) for x in args.l2.split(",")],
                          batch_size=args.batch_size, threads=args.threads, seed=args.seed,
                          prompt_layout=args.prompt_layout, bf16=args.bf16, input_row=args.input_row)
    except (TrainingError, DataFormatError) as exc:
        ap.exit(2, f"error: {exc}\n")
    print(json.dumps({k: meta[k] for k in ("examples", "positions", "l2", "seconds")} | {"adapter": str(Path(args.output_dir) / "adapter")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
