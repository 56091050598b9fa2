"""SFT loss through a (DDP-)wrapped model, and two CPU processes (gloo) against one process."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

import torch.distributed as dist
import torch.nn.functional as F

from langchain_selfrag import tokens as T
from training.core.adapters import lora_config, prepare_model
from training.core.collate import IGNORE_INDEX, SelfRAGCollator
from training.core.config import SFTRunConfig
from training.core.records import encode_record
from training.trainers.sft import completion_loss

ROOT = Path(__file__).resolve().parents[2]
#: Two gloo processes against one process over 4 steps, fp32: measured worst difference 1e-6
#: (4e-6 at lr 5e-4; summation order of the gradient all-reduce). With the gradient sync disabled
#: (a no-op DDP comm hook) steps 3-4 moved by 0.95 and 1.66.
DDP_TOL = 1e-4

needs_gloo = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo is not available"
)


def records(n: int, seed: int = 0) -> list[dict]:
    """``n`` different records of identical token length and label count (byte-level tokenizer)."""
    rng = random.Random(seed)

    def word(k: int) -> str:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(k))

    return [
        {
            "instruction": f"Question {i}: {word(20)}",
            "input": "",
            "output": f"{T.RETRIEVAL}{T.PARAGRAPH_START}{word(8)}\n{word(30)}{T.PARAGRAPH_END}{T.RELEVANT}"
            f"{word(24)}{T.FULLY_SUPPORTED}{T.UTILITY[3]}</s>",
        }
        for i in range(n)
    ]


def reference_loss(peft_model, batch):
    """The loss computed the pre-DDP way: hidden states of the inner model, head on labelled rows."""
    base = peft_model.get_base_model()
    hidden = base.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    target = batch["labels"][:, 1:]
    selected = target != IGNORE_INDEX
    logits = base.get_output_embeddings()(hidden[:, :-1][selected])
    return F.cross_entropy(logits.float(), target[selected])


@pytest.fixture()
def peft_batch(tiny_model_dir):
    """A LoRA + token-rows model with non-zero adapter weights, and a padded batch of two records."""
    from peft import get_peft_model

    torch.manual_seed(0)
    model, tok, ids = prepare_model(str(tiny_model_dir))
    cfg = SFTRunConfig(base_model=str(tiny_model_dir), train_file="-", output_dir="-", lora_dropout=0.0)
    peft_model = get_peft_model(model, lora_config(model, sorted(ids.values()), cfg))
    with torch.no_grad():  # make LoRA and the trainable reflection-token rows matter
        for name, p in peft_model.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    short, long_ = records(2)
    long_ = dict(long_, output=long_["output"].replace(T.UTILITY[3], "more words here" + T.UTILITY[3]))
    collate = SelfRAGCollator(tok.pad_token_id, ids[T.PARAGRAPH_START], ids[T.PARAGRAPH_END])
    batch = collate([encode_record(tok, short), encode_record(tok, long_)])
    assert (batch["attention_mask"][0] == 0).any()  # the rows differ in length: padding is exercised
    peft_model.train()
    return peft_model, batch


def grads_of(model, loss) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_completion_loss_equals_the_full_hidden_state_reference(peft_batch):
    model, batch = peft_batch
    ref = reference_loss(model, batch)
    ref_grads = grads_of(model, ref)
    loss = completion_loss(model, batch)
    assert loss.item() == pytest.approx(ref.item(), abs=1e-6)
    grads = grads_of(model, loss)
    assert any("trainable_tokens" in n for n in grads) and any("lora_B" in n for n in grads)
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], rtol=1e-5, atol=1e-7, msg=name)


@needs_gloo
def test_completion_loss_through_ddp_wrapper(peft_batch, tmp_path):
    model, batch = peft_batch
    ref = reference_loss(model, batch).item()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        wrapped = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
        loss = completion_loss(wrapped, batch)
        loss.backward()  # through DDP's reducer
        assert loss.item() == pytest.approx(ref, abs=1e-6)
        # a batch without labels still reaches every trainable parameter (a rank must not stall DDP)
        wrapped.zero_grad()
        empty = dict(batch, labels=torch.full_like(batch["labels"], IGNORE_INDEX))
        zero = completion_loss(wrapped, empty)
        zero.backward()
        assert zero.item() == 0.0
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    finally:
        dist.destroy_process_group()


def _run(cmd: list[str], out: Path) -> list[tuple[int, float]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", SELFRAG_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [(int(s), float(v)) for s, v in json.loads((out / "loss_history.json").read_text())["train"]]


@pytest.mark.slow
@needs_gloo
def test_two_gloo_processes_match_one_process(tiny_model_dir, tmp_path):
    rows = records(8)
    _, tok, ids = prepare_model(str(tiny_model_dir))
    collate = SelfRAGCollator(tok.pad_token_id, ids[T.PARAGRAPH_START], ids[T.PARAGRAPH_END])
    enc = [encode_record(tok, r) for r in rows]
    labels = [sum(x != IGNORE_INDEX for x in collate.labels_for(e["input_ids"], e["completion_mask"])) for e in enc]
    # equal lengths and label counts: the mean of the per-process means is the global mean
    assert len({len(e["input_ids"]) for e in enc}) == 1 and len(set(labels)) == 1
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    flags = "--max-steps 4 --logging-steps 1 --save-steps 100 --lr 1e-2 --lora-dropout 0 --bf16 false --threads 1"
    common = ["-m", "training.generator_sft", "--base-model", str(tiny_model_dir), "--train-file", str(train)]
    common += [*flags.split(), "--no-resume"]
    single = _run(
        [sys.executable, *common, "--output-dir", str(tmp_path / "one"), "--batch-size", "2"], tmp_path / "one"
    )
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    multi = _run([*torchrun, *common, "--output-dir", str(tmp_path / "two"), "--batch-size", "1"], tmp_path / "two")
    print("one process:", single, "\ntwo processes:", multi)
    assert [s for s, _ in single] == [s for s, _ in multi] == [1, 2, 3, 4]
    assert len({round(v, 3) for _, v in single}) == 4  # the batches and the updates change the loss
    worst = max(abs(a - b) for (_, a), (_, b) in zip(single, multi))
    assert worst < DDP_TOL, (single, multi)
