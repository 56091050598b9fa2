"""``selfrag calibrate`` as a user runs it: on their own store, with the bundled model's file, the
calibration written beside the model and read by every chain over that file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from langchain_selfrag.abstention import AbstentionCalibration, sidecar_path
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.lm import load_reflection_lm
from langchain_selfrag.retrieval import open_store

from .test_cli import in_process, selfrag

DOCS = {
    "fastcsv.md": "# fastcsv\n\nfastcsv is a library for reading CSV files quickly.\n\n```\npip install fastcsv\n```\n\n"
                  "fastcsv supports Python 3.9 and newer. It is released under the MIT License.\n",
    "orrin_dam.txt": "The Orrin Dam holds back the river Tesk above the town of Harlby. It was completed in 1961 by the "
                     "engineer Ada Lowe. Its reservoir holds 40 megalitres of water.\n",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``DOCS`` written to a folder and indexed by ``selfrag index``, once for the file (calibrate only reads it)."""
    root = tmp_path_factory.mktemp("calibrate-cli")
    folder = root / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text)
    assert selfrag("index", str(folder), "--store", str(root / "store"), "--quiet").returncode == 0
    return root / "store"


@pytest.mark.slow
def test_calibrate_writes_beside_the_model_and_chains_use_it(tmp_path: Path, store: Path, bundled_gguf: Path) -> None:
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
    # fitted for quoted sentences, the form is kept in the calibration and by the next fit without the flag (on
    # fewer questions: the form does not depend on how many)
    for flags in (("--answer-form", "sentence"), ()):
        done = selfrag("calibrate", "--store", str(store), "--model", str(model), "--answerable", "2",
                       "--near-miss", "1", "--off-topic", "1", "--quiet", *flags)
        assert done.returncode == 0, done.stderr
        assert "answers judged as: sentence" in done.stdout
        assert AbstentionCalibration.load(path).answer_form == "sentence"
    assert SelfRAGChain(load_reflection_lm(str(model)), open_store(store)).config.answer_form == "sentence"


@pytest.mark.slow
def test_calibrate_refuses_an_empty_store_and_a_question_file_without_answers(tmp_path: Path, store: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # by selfrag's main in this process (each interpreter costs seconds of imports; the test above runs the command)
    code, err = in_process(capsys, "calibrate", "--store", str(tmp_path / "missing"))
    assert code == 2 and err.startswith("selfrag: error:") and "Traceback" not in err
    code, err = in_process(capsys, "calibrate", "--store", str(tmp_path / "missing"), "--judge",
                           str(tmp_path / "judge.gguf"))
    assert code == 2 and "--judge was removed" in err and "Traceback" not in err
    bad = tmp_path / "q.jsonl"
    bad.write_text(json.dumps({"question": "What is the capital of France?"}) + "\n")
    code, err = in_process(capsys, "calibrate", "--store", str(store), "--questions", str(bad))
    assert code == 2 and "no answerable question" in err
