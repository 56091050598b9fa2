"""Supervised fine-tuning (TRL ``SFTTrainer`` + PEFT LoRA) for the critic, the generator and the best
ReSearch samples.

:func:`train_sft` trains a LoRA adapter whose ``trainable_token_indices`` are the reflection-token
rows, on records encoded by :mod:`training.core.records` and batched by
:class:`~training.core.collate.SelfRAGCollator`; resumable; writes a loss curve.
:func:`train_research_sft` first turns ReSearch data into records (the best sample of each question).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from langchain_selfrag import tokens as T
from langchain_selfrag.prompt_layouts import CONFIG_KEY

from ..core.adapters import lora_config, prepare_model
from ..core.callbacks import write_loss_curve
from ..core.collate import IGNORE_INDEX, SelfRAGCollator
from ..core.config import META_FILE, SFTRunConfig, trained_layout
from ..core.jsonl import write_jsonl
from ..core.records import laid_out_records, load_records, tokenize_records
from .common import run_callbacks, set_threads, train_resuming, trainer_arguments


@dataclass
class SFTResult:
    """What an SFT run produced."""

    output_dir: Path
    adapter_dir: Path
    steps: int
    train_loss: float | None
    seconds: float
    tokens_seen: int
    dropped: int
    token_ids: dict[str, int]


def train_sft(cfg: SFTRunConfig, *, records: Sequence[Mapping[str, Any]] | None = None, callbacks=(),
              reflection_tokens: bool = True) -> SFTResult:
    """Fine-tune ``cfg.base_model`` on ``cfg.train_file`` (or ``records``) with LoRA + token rows.

    ``reflection_tokens=False`` trains LoRA alone, in the base's own vocabulary (a chat model taught
    to answer in words, such as :mod:`training.judge_sft`'s relevance judge).

    Checkpoints go to ``output_dir/checkpoint-*`` every ``save_steps``; a rerun with the same
    ``output_dir`` resumes from the last one. The final adapter (LoRA + reflection-token rows),
    the tokenizer and ``selfrag_training.json`` go to ``output_dir/adapter``.
    """
    from trl import SFTConfig

    set_threads(cfg.threads)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = list(records) if records is not None else load_records(cfg.train_file)
    if cfg.limit:
        rows = rows[: cfg.limit]
    layout = trained_layout(cfg.prompt_layout, cfg.init_adapter, cfg.base_model)
    rows = laid_out_records(rows, layout)
    model, tokenizer, ids = prepare_model(cfg.base_model, add_tokens=reflection_tokens)
    train_ds, dropped = tokenize_records(tokenizer, rows, cfg.max_length)
    if dropped:
        print(f"left out {dropped} of {len(rows)} records whose prompt alone reaches max_length ({cfg.max_length} "
              "tokens): raise --max-length to train on them", file=sys.stderr)
    eval_ds = None
    if cfg.eval_file:
        eval_ds, _ = tokenize_records(tokenizer, laid_out_records(load_records(cfg.eval_file), layout), cfg.max_length)
    collator = SelfRAGCollator(tokenizer.pad_token_id, ids.get(T.PARAGRAPH_START), ids.get(T.PARAGRAPH_END))
    peft_cfg = lora_config(model, sorted(ids.values()), cfg)
    if cfg.init_adapter:
        # continue from an earlier run's adapter (a second training phase): same LoRA and token rows
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(cfg.init_adapter), is_trainable=True)
        peft_cfg = None
    args = SFTConfig(
        **trainer_arguments(cfg, SFTConfig, out),
        eval_strategy="steps" if eval_ds is not None else "no",
        eval_steps=cfg.save_steps if eval_ds is not None else None,
        max_length=cfg.max_length,
        dataset_kwargs={"skip_prepare_dataset": True},
        remove_unused_columns=False,
        train_sampling_strategy="group_by_length",
        ddp_find_unused_parameters=False,  # LoRA + token rows: every trainable parameter gets a gradient
    )
    trainer = _trainer_class()(
        model=model,
        args=args,
        data_collator=collator,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        peft_config=peft_cfg,
        callbacks=run_callbacks(cfg, out, callbacks),
    )
    result, seconds, adapter_dir, earlier, last = train_resuming(trainer, cfg, out)
    n_procs = max(1, int(trainer.args.world_size))
    tokens_seen = int(sum(len(r) for r in train_ds["input_ids"]) * max(cfg.epochs, 0)) if cfg.max_steps < 0 else int(
        trainer.state.global_step * cfg.batch_size * cfg.grad_accum * n_procs
        * (sum(len(r) for r in train_ds["input_ids"]) / len(train_ds))
    )
    if trainer.is_world_process_zero():  # with several processes, one writes the results
        trainer.model.save_pretrained(str(adapter_dir), save_embedding_layers=False)
        tokenizer.save_pretrained(str(adapter_dir))
        meta = {
            "base_model": str(cfg.base_model),
            CONFIG_KEY: layout,
            "config": {k: v for k, v in asdict(cfg).items() if k != "extra"} | dict(cfg.extra),
            "reflection_token_ids": ids,
            "steps": trainer.state.global_step,
            "train_loss": result.training_loss,
            "seconds": round(seconds, 1),
            "seconds_total": round(earlier + seconds, 1),
            "examples": len(train_ds),
            "dropped_too_long": dropped,
            "tokens_seen_approx": tokens_seen,
            "processes": n_procs,
            "bf16": args.bf16,
            "resumed_from": last,
        }
        (adapter_dir / META_FILE).write_text(json.dumps(meta, indent=1))
        write_loss_curve(trainer.state.log_history, out)
    return SFTResult(out, adapter_dir, trainer.state.global_step, result.training_loss, seconds, tokens_seen, dropped, ids)


def completion_loss(model, inputs) -> Any:
    """Mean cross-entropy over the labelled positions, with logits computed only there.

    Most positions of a Self-RAG example (prompt, evidence) carry no label, so only the positions
    whose next token is labelled in some row of the batch go through the LM head
    (``logits_to_keep``). The loss goes through ``model``'s own forward, so a DDP-wrapped model
    synchronises gradients, and the head runs as a module, so PEFT's trainable reflection-token
    rows take part (TRL's fused LM-head loss reads ``lm_head.weight`` directly and would bypass them).
    """
    import torch
    import torch.nn.functional as F

    labels = inputs["labels"]
    target = labels[:, 1:]
    labelled = target != IGNORE_INDEX
    keep = labelled.any(0).nonzero().squeeze(1)  # positions p with a label at p + 1 in some row
    if keep.numel() == 0:  # keep one position so every parameter stays in the graph (DDP)
        keep = torch.zeros(1, dtype=torch.long, device=labels.device)
    logits = model(
        input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"), logits_to_keep=keep, use_cache=False
    ).logits  # (batch, len(keep), vocab)
    chosen = labelled[:, keep]
    if not bool(chosen.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[chosen].float(), target[:, keep][chosen])


def _trainer_class():
    """SFTTrainer whose loss is :func:`completion_loss`."""
    from trl import SFTTrainer

    class ReflectionSFTTrainer(SFTTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.model_accepts_loss_kwargs = False  # the loss is a per-batch mean; let Trainer scale for accumulation

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = completion_loss(model, inputs)
            return (loss, {"loss": loss}) if return_outputs else loss

    return ReflectionSFTTrainer



def write_sft_data(research_file: str, out_file: Path, rho: float | None, limit: int | None = None) -> int:
    """Best-sample SFT records of a ReSearch file, as JSONL; returns how many."""
    from ..restraint.pairs import read_research, sft_records  # restraint pulls in langchain-core; SFT alone does not

    return write_jsonl(out_file, sft_records(read_research(research_file, limit), rho))


def train_research_sft(cfg: SFTRunConfig, rho: float | None = None, *, callbacks=()) -> SFTResult:
    """Convert ``cfg.train_file`` (and ``cfg.eval_file``) from ReSearch data, then ``train_sft``."""
    from ..restraint.pairs import read_research, selection_rule

    out = Path(cfg.output_dir)
    research, research_eval = cfg.train_file, cfg.eval_file
    cfg.train_file = str(out / "research_sft_train.jsonl")
    n = write_sft_data(research, Path(cfg.train_file), rho, cfg.limit)
    rule = selection_rule(read_research(research, cfg.limit))
    if research_eval:
        cfg.eval_file = str(out / "research_sft_eval.jsonl")
        write_sft_data(research_eval, Path(cfg.eval_file), rho)
    cfg.extra = dict(cfg.extra) | {"method": "research_sft", "research_data": str(research), "questions": n,
                                   "rho": rho, "selection": rule}
    return train_sft(cfg, callbacks=callbacks)
