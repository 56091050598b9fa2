"""A quiet first run: our own progress bar and the answer, no third-party bars, warnings or llama.cpp log."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_selfrag import quiet

#: The bundled model the first run builds (the small one: seconds to build)
SMALL = "selfrag-smollm2-135m"

#: What transformers, peft and llama.cpp printed around our bar before (first `make demo`, issue 23).
NOISE = ("Converting and de-quantizing", "Loading weights", "FutureWarning", "Warning", "warnings.warn",
         "llama_context", "n_ctx_seq", "llama_model_loader")


@pytest.fixture
def llama_log_state():
    saved = dict(quiet._llama_state)
    level = logging.getLogger("llama-cpp-python").level
    yield
    quiet._llama_state.update(saved)
    logging.getLogger("llama-cpp-python").setLevel(level)


def test_llama_log_filter_keeps_errors_and_their_continuations(capsys, llama_log_state) -> None:
    quiet._llama_state["verbose"] = False
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # as Llama(verbose=False) leaves it
    for level, text in ((2, b"info "), (3, b"warn "), (5, b"warn-cont "), (4, b"error "), (5, b"error-cont")):
        quiet._on_llama_log(level, text, None)
    assert capsys.readouterr().err == "error error-cont"


@pytest.mark.parametrize("ours, theirs", [(True, logging.ERROR), (False, logging.DEBUG)])
def test_llama_log_filter_lets_everything_through_when_verbose(capsys, llama_log_state, ours, theirs) -> None:
    """``--verbose`` (ours) or ``Llama(verbose=True)`` (llama-cpp-python's logger at DEBUG)."""
    quiet._llama_state["verbose"] = ours
    logging.getLogger("llama-cpp-python").setLevel(theirs)
    quiet._on_llama_log(3, b"warn", None)
    assert capsys.readouterr().err == "warn"


def test_vocab_only_load_prints_no_context_warning(bundled_gguf, capfd, llama_log_state) -> None:
    """llama-cpp-python 0.3.36 maps ggml's WARN to ERROR, so its own filter printed this line."""
    llama_cpp = pytest.importorskip("llama_cpp")
    quiet.quiet_llama_cpp(verbose=False)
    llama_cpp.Llama(model_path=str(bundled_gguf), vocab_only=True, verbose=False)
    assert "n_ctx_seq" not in capfd.readouterr().err


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, bundled_gguf) -> tuple[dict[str, str], Path]:
    """An environment with an empty model cache, and a store with one indexed document."""
    root = tmp_path_factory.mktemp("first-run")
    (root / "docs").mkdir()
    (root / "docs" / "quillon.md").write_text(
        "The Quillon Observatory sits on Mount Ferrow. It was founded in 1902 by the astronomer Ilse Marrow.\n")
    env = {**os.environ, "SELFRAG_CACHE_DIR": str(root / "cache"), "HF_HUB_OFFLINE": "1"}
    for name in ("SELFRAG_MODEL", "PYTHONWARNINGS"):  # as `make demo` runs it (with the small model, by name:
        # the default's build takes 1.5 minutes; test_torch_free_runtime.py runs the default)
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "langchain_selfrag.cli", "index", str(root / "docs"), "--store",
                           str(root / "store")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not [n for n in NOISE if n in done.stderr], done.stderr
    return env, root / "store"


def _ask(env: dict[str, str], store: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "langchain_selfrag.cli", "ask", "When was the Quillon Observatory "
                           "founded?", "--store", str(store), "--mode", "always", "--k", "1", "--model", SMALL, *extra],
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_first_ask_shows_our_build_bar_and_the_answer_only(first_run) -> None:
    env, store = first_run
    done = _ask(env, store)
    assert done.returncode == 0, done.stderr
    assert f"building {SMALL}" in done.stderr  # the model was built in this run
    assert not [n for n in NOISE if n in done.stderr], done.stderr
    assert "Citations:" in done.stdout and "quillon.md" in done.stdout


@pytest.mark.slow
def test_verbose_brings_third_party_output_back(first_run) -> None:
    env, store = first_run
    done = _ask(env, store, "--verbose")
    assert done.returncode == 0, done.stderr
    assert "llama_" in done.stderr  # llama.cpp's log of the model load
