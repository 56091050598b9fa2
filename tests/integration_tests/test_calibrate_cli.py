"""``selfrag calibrate`` as a user runs it: on their own store, with the bundled model's file, the
calibration written beside the model and read by every chain over that file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from langchain_selfrag.abstention import AbstentionCalibration, sidecar_path
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.lm import ReaderCriticLM, RelevanceJudge, load_reflection_lm
from langchain_selfrag.retrieval import open_store

from .test_cli import selfrag

DOCS = {
    "fastcsv.md": "# fastcsv\n\nfastcsv is a library for reading CSV files quickly.\n\n```\npip install fastcsv\n```\n\n"
                  "fastcsv supports Python 3.9 and newer. It is released under the MIT License.\n",
    "orrin_dam.txt": "The Orrin Dam holds back the river Tesk above the town of Harlby. It was completed in 1961 by the "
                     "engineer Ada Lowe. Its reservoir holds 40 megalitres of water.\n",
}


def indexed_store(tmp_path: Path) -> Path:
    """``DOCS`` written to a folder and indexed by ``selfrag index`` into a store under ``tmp_path``."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text)
    store = tmp_path / "store"
    assert selfrag("index", str(folder), "--store", str(store), "--quiet").returncode == 0
    return store


@pytest.mark.slow
def test_calibrate_writes_beside_the_model_and_chains_use_it(tmp_path: Path, bundled_gguf: Path) -> None:
    store = indexed_store(tmp_path)
    model = tmp_path / "my-model.gguf"  # a copy: the user's own model file, with no calibration yet
    shutil.copyfile(bundled_gguf, model)
    done = selfrag("calibrate", "--store", str(store), "--model", str(model), "--off-topic", "3", "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    path = sidecar_path(model)
    assert Path(out["path"]) == path and path.is_file()
    cal = AbstentionCalibration.load(path)
    assert cal.model == "my-model.gguf" and set(cal.expected["handled"]) <= {"answerable", "near_miss", "off_topic"}
    assert 0.0 <= cal.expected["coverage"] <= 1.0
    chain = SelfRAGChain(load_reflection_lm(str(model)), open_store(store))
    assert (chain.config.abstain_isrel, chain.config.abstain_issup) == (cal.abstain_isrel, cal.abstain_issup)
    assert cal.answer_form == "generated" == chain.config.answer_form  # a model of its own: its own words
    # fitted for quoted sentences, the form is kept in the calibration and by the next fit without the flag
    for flags in (("--answer-form", "sentence"), ()):
        done = selfrag("calibrate", "--store", str(store), "--model", str(model), "--off-topic", "3", "--quiet", *flags)
        assert done.returncode == 0, done.stderr
        assert "answers judged as: sentence" in done.stdout
        assert AbstentionCalibration.load(path).answer_form == "sentence"
    assert SelfRAGChain(load_reflection_lm(str(model)), open_store(store)).config.answer_form == "sentence"


@pytest.mark.slow
def test_calibrate_a_reader_pair_writes_beside_the_judge(tmp_path: Path, bundled_gguf: Path, smollm2_gguf: Path) -> None:
    """--reader/--judge: the pair is calibrated and its bars go beside the judge's file, which is where
    a ReaderCriticLM with that judge reads them."""
    store = indexed_store(tmp_path)
    judge = tmp_path / "judge.gguf"  # a copy, so the shared test model gets no sidecar
    shutil.copyfile(smollm2_gguf, judge)
    done = selfrag("calibrate", "--store", str(store), "--model", str(bundled_gguf), "--reader", str(smollm2_gguf),
                   "--judge", str(judge), "--off-topic", "3", "--answerable", "3", "--near-miss", "3", "--json",
                   "--quiet")
    assert done.returncode == 0, done.stderr
    path = sidecar_path(judge)
    assert Path(json.loads(done.stdout)["path"]) == path and not sidecar_path(smollm2_gguf).exists()
    cal = AbstentionCalibration.load(path)
    assert cal.model == "judge.gguf"
    lm = ReaderCriticLM(load_reflection_lm(str(bundled_gguf)), load_reflection_lm(str(smollm2_gguf)),
                        judge=RelevanceJudge(load_reflection_lm(str(judge))))
    chain = SelfRAGChain(lm, open_store(store))
    assert (chain.config.abstain_isrel, chain.config.abstain_issup) == (cal.abstain_isrel, cal.abstain_issup)
    lm.close()


@pytest.mark.slow
def test_calibrate_refuses_an_empty_store_and_a_question_file_without_answers(tmp_path: Path) -> None:
    done = selfrag("calibrate", "--store", str(tmp_path / "missing"))
    assert done.returncode == 2 and done.stderr.startswith("selfrag: error:") and "Traceback" not in done.stderr
    done = selfrag("calibrate", "--store", str(tmp_path / "missing"), "--judge", str(tmp_path / "judge.gguf"))
    assert done.returncode == 2 and done.stderr.startswith("selfrag: error:") and "--reader" in done.stderr
    bad = tmp_path / "q.jsonl"
    bad.write_text(json.dumps({"question": "What is the capital of France?"}) + "\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("The Orrin Dam holds back the river Tesk.\n")
    assert selfrag("index", str(tmp_path / "docs"), "--store", str(tmp_path / "s"), "--quiet").returncode == 0
    done = selfrag("calibrate", "--store", str(tmp_path / "s"), "--questions", str(bad))
    assert done.returncode == 2 and "no answerable question" in done.stderr
