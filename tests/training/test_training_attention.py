"""Training keeps PyTorch's cuDNN attention off: its backward gives NaN gradients on H100/H200 for
batches padded to 64 mod 128 tokens on Qwen2.5 (a LoRA run of Qwen2.5-Coder-0.5B went NaN at the
first batch of 192 tokens). No model is needed: a stand-in trainer records the switch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from training.core.config import SFTRunConfig  # noqa: E402
from training.trainers.common import cudnn_attention_off, train_resuming  # noqa: E402


class RecordingTrainer:
    """What ``train_resuming`` uses of a Trainer; ``train`` notes whether cuDNN attention is on."""

    def __init__(self, fail: bool = False):
        self.model = torch.nn.Linear(2, 2)
        self.fail = fail
        self.cudnn_during_train: list[bool] = []
        self.callbacks: list = []

    def add_callback(self, callback) -> None:
        self.callbacks.append(callback)

    def is_world_process_zero(self) -> bool:
        return True

    def train(self, resume_from_checkpoint=None):
        self.cudnn_during_train.append(torch.backends.cuda.cudnn_sdp_enabled())
        if self.fail:
            raise RuntimeError("training failed")
        return SimpleNamespace(training_loss=0.0)


@pytest.fixture
def cudnn_on():
    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    torch.backends.cuda.enable_cudnn_sdp(True)


def _cfg(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"instruction": "Say hi.", "output": "hi"}\n')
    return SFTRunConfig(base_model="unused", train_file=str(data), output_dir=str(tmp_path / "run"))


def test_training_runs_without_cudnn_attention_and_restores_it_after(tmp_path, cudnn_on):
    trainer = RecordingTrainer()
    train_resuming(trainer, _cfg(tmp_path), tmp_path / "run")
    assert trainer.cudnn_during_train == [False]
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_a_failed_training_still_restores_cudnn_attention(tmp_path, cudnn_on):
    trainer = RecordingTrainer(fail=True)
    with pytest.raises(RuntimeError, match="training failed"):
        train_resuming(trainer, _cfg(tmp_path), tmp_path / "run")
    assert trainer.cudnn_during_train == [False]
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_cudnn_attention_off_leaves_an_already_disabled_backend_disabled(cudnn_on):
    torch.backends.cuda.enable_cudnn_sdp(False)
    with cudnn_attention_off():
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert not torch.backends.cuda.cudnn_sdp_enabled()
