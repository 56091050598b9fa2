"""The ``selfrag`` command as a user runs it: index the demo corpus, ask with --json, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.documents import Document

from langchain_selfrag.cli import build_parser, format_result, result_to_json
from langchain_selfrag.retrieval import iter_files

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "corpus"  # what make demo indexes


def selfrag(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    return subprocess.run([sys.executable, "-m", "langchain_selfrag.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """The demo corpus indexed by ``selfrag index`` once for the file (ask only reads it), and that run."""
    store = tmp_path_factory.mktemp("cli") / "store"
    return store, selfrag("index", str(CORPUS), "--store", str(store))


@pytest.mark.slow
def test_index_then_ask_json(demo_store: tuple[Path, subprocess.CompletedProcess], smollm2_gguf: Path) -> None:
    store, done = demo_store
    assert done.returncode == 0, done.stderr
    n_docs = len(iter_files(CORPUS))
    assert f"indexed {n_docs} file(s)" in done.stdout and "indexing" in done.stderr  # progress bar on stderr
    done = selfrag("ask", "What does the IsSup token measure?", "--store", str(store), "--model", str(smollm2_gguf),
                   "--mode", "always", "--k", "2", "--max-new-tokens", "6", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for key in ("answer", "abstained", "retrieved", "citations", "trace"):
        assert key in out
    assert out["retrieved"] is True and len(out["passages"]) == 2
    assert all({"source", "text"} <= set(c) for c in out["citations"])
    assert len(out["trace"]) == 2
    assert all({"isrel", "issup", "isuse", "score"} <= set(t) for t in out["trace"])



def test_missing_store_is_a_one_line_error(tmp_path: Path) -> None:
    done = selfrag("ask", "q", "--store", str(tmp_path / "none"), "--model", str(tmp_path / "m.gguf"))
    assert done.returncode == 2
    assert done.stderr.startswith("selfrag: error:") and "selfrag index" in done.stderr
    assert "Traceback" not in done.stderr


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``selfrag ARGS`` run by ``main`` in this process (a subprocess costs seconds of imports; the test above runs
    one): the exit status, argparse's included, and stderr."""
    from langchain_selfrag.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def test_bad_input_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = in_process(capsys, "ask", "q", "--mode", "never", "--model", str(tmp_path / "missing.gguf"))
    assert code == 2 and "Traceback" not in err and "missing.gguf" in err
    code, err = in_process(capsys, "ask", "q", "--judge", str(tmp_path / "judge.gguf"))
    assert code == 2 and "--judge was removed" in err and "--chat-model" in err and "Traceback" not in err
    code, err = in_process(capsys, "ask", "q", "--reader", "qwen2.5-coder-0.5b-instruct")
    assert code == 2 and "--reader was removed" in err and "ChatReflectionLM(model, writer=...)" in err
    assert err.count("error:") == 1
    code, err = in_process(capsys, "index", str(tmp_path / "nowhere"), "--store", str(tmp_path / "s"))
    assert code == 2 and "no such file" in err
    code, err = in_process(capsys, "ask", "q", "--threshold", "3", "--mode", "never")
    assert code == 2 and "threshold" in err


def test_every_mode_is_reachable_from_the_parser() -> None:
    parser = build_parser()
    args = parser.parse_args(["ask", "q", "--mode", "always", "--long", "--hard-constraints", "--closed-set",
                              "--abstain-isrel", "0.5", "--abstain-issup", "0.4", "--beam-width", "3",
                              "--max-segments", "4", "--option", "yes", "--option", "no"])
    from langchain_selfrag.cli import _settings

    assert _settings(args) == {"mode": "always", "long_form": True, "hard_constraints": True, "closed_set": True,
                               "abstain_isrel": 0.5, "abstain_issup": 0.4, "beam_width": 3, "max_segments": 4}
    assert _settings(parser.parse_args(["ask", "q"])) == {}


def test_eval_subcommand_is_registered_when_available() -> None:
    try:
        import langchain_selfrag.evaluation.cli  # noqa: F401
    except ImportError:
        pytest.skip("the evaluation package is not importable")
    sub = build_parser()._subparsers._group_actions[0]
    assert {"index", "ask", "eval"} <= set(sub.choices)


def test_human_output_has_answer_citations_and_critique_table() -> None:
    doc = Document("Paris is the capital of France.", metadata={"source": "france.md"})
    out = {"answer": "Paris. [1]", "abstained": False, "abstain_reason": None, "retrieved": True,
           "retrieve_probability": 0.93, "passages": [doc], "citations": [doc],
           "trace": [{"passage": 0, "text": "Paris.", "isrel": 0.9, "issup": 0.8, "isuse": 0.5, "seq_prob": 0.7,
                      "score": 2.65, "dropped": False, "selected": True, "depth": 0}]}
    text = format_result(out)
    assert text.splitlines()[0] == "Paris. [1]"
    assert "[1] france.md: Paris is the capital of France." in text
    assert "p(Retrieval) = 0.93" in text and "selected" in text and "0.90" in text
    assert text.splitlines()[-1].split()[-2:] == ["france.md", "selected"]  # each candidate names its document
    data = result_to_json(out, latency_s=1.0)
    assert data["citations"] == [{"source": "france.md", "title": None, "text": doc.page_content}]
    json.dumps(data)


def bad_corpus(root: Path, *, good: bool = True) -> Path:
    root.mkdir()
    if good:
        (root / "good.md").write_text("# Good\n\nThis file indexes fine.\n")
    (root / "broken.jsonl").write_text('{"text": "fine"}\n{"text": \n')
    (root / "wrong.jsonl").write_text('{"title": "no text field"}\n')
    return root


def test_index_skips_bad_files_and_lists_them(tmp_path: Path) -> None:
    root = bad_corpus(tmp_path / "c")
    done = selfrag("index", str(root), "--store", str(tmp_path / "store"), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "indexed 1 file(s) into 1 chunk(s)" in done.stdout
    assert "skipped 2 file(s):" in done.stderr and "Traceback" not in done.stderr
    assert "Loading weights" not in done.stderr  # --quiet: no bar from loading the embedding model either
    assert f"{root / 'broken.jsonl'}: line 2: invalid JSON" in done.stderr
    assert f"{root / 'wrong.jsonl'}: line 1: expected an object with a 'text' field" in done.stderr


def test_index_strict_fails_on_any_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from langchain_selfrag.cli import main

    root = bad_corpus(tmp_path / "c")
    assert main(["index", str(root), "--store", str(tmp_path / "store"), "--strict", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("selfrag: error: 2 file(s)") and "strict" in err and "broken.jsonl: line 2" in err
    assert not (tmp_path / "store").exists()


def test_index_with_nothing_indexable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from langchain_selfrag.cli import main

    root = bad_corpus(tmp_path / "c", good=False)
    assert main(["index", str(root), "--store", str(tmp_path / "store"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no file under" in err and "could be indexed" in err and "wrong.jsonl: line 1" in err


@pytest.mark.parametrize(("flags", "message"), [
    (["--chunk-size", "0"], "chunk_size must be positive, not 0"),
    (["--chunk-overlap", "-1"], "chunk_overlap must be at least 0, not -1"),
    (["--chunk-size", "100", "--chunk-overlap", "200"], "chunk_overlap (200) must be smaller than chunk_size (100)"),
])
def test_index_refuses_chunk_settings_the_splitter_cannot_take(tmp_path: Path, capsys, flags, message) -> None:
    from langchain_selfrag.cli import main

    root = bad_corpus(tmp_path / "c")
    assert main(["index", str(root), "--store", str(tmp_path / "store"), "--quiet", *flags]) == 2
    assert f"selfrag: error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()  # refused before anything was written
