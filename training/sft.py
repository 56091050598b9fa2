"""Shared supervised fine-tuning machinery for the critic and the generator (TRL + PEFT LoRA).

* :func:`load_base` and :func:`add_reflection_tokens` come from :mod:`langchain_selfrag.hf`
  (re-exported here);
* :func:`encode_record` tokenizes a ``{instruction, input, output}`` record into ``input_ids`` and a
  ``completion_mask`` (prompt and ``no_loss_spans`` are 0);
* :class:`SelfRAGCollator` pads and builds labels, masking **each** ``<paragraph>…</paragraph>``
  span on its own (the authors masked from the first ``<paragraph>`` to the last ``</paragraph>``);
* :func:`train_sft` runs TRL's ``SFTTrainer`` with a PEFT LoRA adapter whose
  ``trainable_token_indices`` are the reflection-token rows; resumable; writes a loss curve.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_selfrag import tokens as T
from langchain_selfrag.hf import ModelSetupError, add_reflection_tokens, load_base, reflection_token_ids  # noqa: F401
from langchain_selfrag.prompts import format_prompt

IGNORE_INDEX = -100
META_FILE = "selfrag_training.json"
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


#: Setup failures of the library (``langchain_selfrag.hf``) and of these recipes share one type.
TrainingError = ModelSetupError


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
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
    tokenizer's own end-of-sequence id. ``record["no_loss_spans"]`` (character spans of
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
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
        mask.append(1)
    if max_length is not None and len(ids) > max_length:
        if len(prompt_ids) >= max_length:
            return None
        ids, mask = ids[:max_length], mask[:max_length]
    return {"input_ids": ids, "completion_mask": mask}


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
    """Right-pads ``input_ids`` and builds ``labels``: completion tokens outside evidence spans."""

    pad_token_id: int
    paragraph_start_id: int
    paragraph_end_id: int
    pad_to_multiple_of: int | None = None

    def labels_for(self, ids: Sequence[int], completion_mask: Sequence[int]) -> list[int]:
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


def load_records(path: str | os.PathLike) -> list[dict]:
    """Records of a ``{instruction, input, output}`` JSONL file (extra fields kept)."""
    from .qa_data import read_jsonl

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


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------
@dataclass
class SFTRunConfig:
    """Everything one SFT run needs; the critic and generator recipes fill it from their CLIs."""

    base_model: str
    train_file: str
    output_dir: str
    eval_file: str | None = None
    max_length: int = 512
    epochs: float = 1.0
    max_steps: int = -1
    batch_size: int = 8
    grad_accum: int = 1
    learning_rate: float = 5e-4
    token_learning_rate: float | None = None
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: tuple[str, ...] = DEFAULT_TARGET_MODULES
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    bf16: str = "auto"
    seed: int = 0
    save_steps: int = 200
    logging_steps: int = 10
    threads: int | None = None
    resume: bool = True
    limit: int | None = None
    gradient_checkpointing: bool = False
    max_minutes: float | None = None
    init_adapter: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _use_bf16(flag: str) -> bool:
    import torch

    if flag in ("1", "true", "yes", "on"):
        return True
    if flag in ("0", "false", "no", "off"):
        return False
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return True  # CPU autocast to bf16: about 1.5-2x faster for LoRA on recent x86 CPUs


def lora_config(model, token_ids: Sequence[int], cfg: SFTRunConfig):
    """LoRA on the attention/MLP projections + trainable rows for the reflection tokens."""
    from peft import LoraConfig

    emb_name = _module_name(model, model.get_input_embeddings())
    trainable: dict[str, list[int]] = {emb_name: list(token_ids)}
    out = model.get_output_embeddings()
    if out is not None and out.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        trainable[_module_name(model, out)] = list(token_ids)
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    targets = [t for t in cfg.target_modules if t in names]
    if not targets:
        raise TrainingError(f"none of the LoRA target modules {cfg.target_modules} exist in the model")
    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        trainable_token_indices=trainable,
        task_type="CAUSAL_LM",
    )


def _module_name(model, module) -> str:
    for name, mod in model.named_modules():
        if mod is module:
            return name.rsplit(".", 1)[-1]
    raise TrainingError("embedding module not found in the model")


def _time_budget_callback(minutes: float):
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        """Stops training (and saves) once ``minutes`` of wall-clock time have passed."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.time()

        def on_step_end(self, args, state, control, **kwargs):
            if time.time() - self.start > minutes * 60:
                control.should_training_stop = True
                control.should_save = True
            return control

    return TimeBudget()


def _loss_callback(output_dir: Path):
    from transformers import TrainerCallback

    class LossCurve(TrainerCallback):
        """Writes ``loss_history.json`` and ``loss_curve.png`` at every save and at the end."""

        def _write(self, state):
            write_loss_curve(state.log_history, output_dir)

        def on_save(self, args, state, control, **kwargs):
            self._write(state)

        def on_train_end(self, args, state, control, **kwargs):
            self._write(state)

    return LossCurve()


def write_loss_curve(log_history: Sequence[Mapping[str, Any]], output_dir: str | os.PathLike) -> Path | None:
    """Plot training (and eval) loss against step; returns the PNG path (None without losses)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    train = [(h["step"], h["loss"]) for h in log_history if "loss" in h and "step" in h]
    evals = [(h["step"], h["eval_loss"]) for h in log_history if "eval_loss" in h]
    (out / "loss_history.json").write_text(json.dumps({"train": train, "eval": evals}, indent=1))
    if not train:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(*zip(*train), label="train loss")
    if evals:
        ax.plot(*zip(*evals), "o-", label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "loss_curve.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


@dataclass
class SFTResult:
    output_dir: Path
    adapter_dir: Path
    steps: int
    train_loss: float | None
    seconds: float
    tokens_seen: int
    dropped: int
    token_ids: dict[str, int]


def prepare_model(base_model: str, *, add_tokens: bool = True):
    """Load the base and add the reflection tokens: ``(model, tokenizer, token ids)``."""
    model, tokenizer = load_base(base_model)
    ids = add_reflection_tokens(model, tokenizer) if add_tokens else {}
    return model, tokenizer, ids


def train_sft(cfg: SFTRunConfig, *, records: Sequence[Mapping[str, Any]] | None = None, callbacks=()) -> SFTResult:
    """Fine-tune ``cfg.base_model`` on ``cfg.train_file`` (or ``records``) with LoRA + token rows.

    Checkpoints go to ``output_dir/checkpoint-*`` every ``save_steps``; a rerun with the same
    ``output_dir`` resumes from the last one. The final adapter (LoRA + reflection-token rows),
    the tokenizer and ``selfrag_training.json`` go to ``output_dir/adapter``.
    """
    import torch
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # only settable once per process, before any parallel work
            pass
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = list(records) if records is not None else load_records(cfg.train_file)
    if cfg.limit:
        rows = rows[: cfg.limit]
    model, tokenizer, ids = prepare_model(cfg.base_model)
    train_ds, dropped = tokenize_records(tokenizer, rows, cfg.max_length)
    eval_ds = None
    if cfg.eval_file:
        eval_ds, _ = tokenize_records(tokenizer, load_records(cfg.eval_file), cfg.max_length)
    collator = SelfRAGCollator(tokenizer.pad_token_id, ids[T.PARAGRAPH_START], ids[T.PARAGRAPH_END])
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
        callbacks=[_loss_callback(out), *([_time_budget_callback(cfg.max_minutes)] if cfg.max_minutes else []), *callbacks],
    )
    if cfg.token_learning_rate:
        _set_token_lr(trainer, cfg.token_learning_rate)
    last = get_last_checkpoint(str(out)) if cfg.resume and any(out.glob("checkpoint-*")) else None
    start = time.time()
    result = trainer.train(resume_from_checkpoint=last)
    seconds = time.time() - start
    adapter_dir = out / "adapter"
    earlier = _earlier_seconds(adapter_dir) if last else 0.0
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


def _earlier_seconds(adapter_dir: Path) -> float:
    """Training seconds of the finished run this one resumes (0 when it left no adapter)."""
    try:
        meta = json.loads((adapter_dir / META_FILE).read_text())
    except (OSError, ValueError):
        return 0.0
    return float(meta.get("seconds_total", meta.get("seconds", 0.0)))


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


def trainer_arguments(cfg: SFTRunConfig, config_cls, output_dir: Path) -> dict[str, Any]:
    """Trainer arguments shared by the SFT, DPO and RLOO configs (``config_cls``: the TRL config class)."""
    import torch

    return dict(
        output_dir=str(output_dir),
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=cfg.warmup_ratio,
        weight_decay=cfg.weight_decay,
        logging_steps=cfg.logging_steps,
        save_steps=cfg.save_steps,
        save_total_limit=2,
        bf16=_use_bf16(cfg.bf16),
        fp16=False,
        **_checkpointing_kwarg(config_cls, cfg.gradient_checkpointing),
        use_cpu=not torch.cuda.is_available(),
        report_to="none",
        seed=cfg.seed,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )


def _checkpointing_kwarg(config_cls, enabled: bool) -> dict[str, bool]:
    """``activation_checkpointing`` on recent transformers, ``gradient_checkpointing`` before."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(config_cls)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": enabled}


def _set_token_lr(trainer, lr: float) -> None:
    """Give the trainable reflection-token rows their own learning rate (they start from scratch)."""
    import torch

    model = trainer.model
    token_params = [p for n, p in model.named_parameters() if p.requires_grad and "trainable_tokens" in n]
    other = [p for n, p in model.named_parameters() if p.requires_grad and "trainable_tokens" not in n]
    trainer.optimizer = torch.optim.AdamW(
        [{"params": other, "lr": trainer.args.learning_rate}, {"params": token_params, "lr": lr}],
        weight_decay=trainer.args.weight_decay,
    )


def load_trained(adapter_dir: str | os.PathLike, *, base_model: str | None = None, merge: bool = True):
    """Rebuild a trained model: base + reflection tokens + adapter (merged by default)."""
    from peft import PeftModel

    adapter = Path(adapter_dir)
    meta_path = adapter / META_FILE
    if not meta_path.is_file():
        raise TrainingError(f"{adapter} is not a training output (no {META_FILE})")
    meta = json.loads(meta_path.read_text())
    base = base_model or meta["base_model"]
    model, tokenizer, ids = prepare_model(base)
    if ids != {k: int(v) for k, v in meta["reflection_token_ids"].items()}:
        raise TrainingError("reflection-token ids of the rebuilt base differ from training; wrong base model?")
    peft_model = PeftModel.from_pretrained(model, str(adapter))
    model = peft_model.merge_and_unload() if merge else peft_model
    return model, tokenizer, meta
