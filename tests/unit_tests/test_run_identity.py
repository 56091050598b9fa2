"""A rerun resumes only its own run: the identity an output folder records, and the refusal when it differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.core.config import SFTRunConfig, TrainingError
from training.core.run_identity import (
    IDENTITY_FILE,
    check_resume,
    identity_differences,
    run_identity,
    write_identity,
)


def config(tmp_path: Path, text: str = '{"instruction": "q", "output": "a"}\n', **changes) -> SFTRunConfig:
    train = tmp_path / "train.jsonl"
    train.write_text(text)
    return SFTRunConfig(base_model="base", train_file=str(train), output_dir=str(tmp_path / "out"), **changes)


def test_how_long_a_run_goes_on_may_change_but_not_its_data_or_optimizer(tmp_path: Path) -> None:
    first = run_identity(config(tmp_path))
    assert run_identity(config(tmp_path, max_steps=50, max_minutes=3.0, threads=2, save_steps=7)) == first
    assert identity_differences(first, run_identity(config(tmp_path, learning_rate=1e-4))) == [
        "learning_rate: 0.0005 -> 0.0001"]
    assert identity_differences(first, run_identity(config(tmp_path, text='{"instruction": "other"}\n'))) == [
        "train_file (its content)"]


def test_a_resume_of_another_run_is_refused_with_the_remedy(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    write_identity(out, run_identity(config(tmp_path)))
    assert json.loads((out / IDENTITY_FILE).read_text())["learning_rate"] == 0.0005
    check_resume(out, run_identity(config(tmp_path, max_steps=9)), "out/checkpoint-4")
    assert "resuming from out/checkpoint-4" in capsys.readouterr().err
    with pytest.raises(TrainingError, match=r"another run.*train_file \(its content\).*--no-resume"):
        check_resume(out, run_identity(config(tmp_path, text="{}\n")), "out/checkpoint-4")


def test_a_folder_from_before_identities_resumes_and_says_it_could_not_check(tmp_path: Path, capsys) -> None:
    check_resume(tmp_path, run_identity(config(tmp_path)), "checkpoint-2")
    assert "recorded no identity" in capsys.readouterr().err
