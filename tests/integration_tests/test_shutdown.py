"""Nothing is printed at interpreter exit after using the library or the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOISE = ("Exception ignored", "Traceback", "TypeError", "Segmentation fault")


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "SELFRAG_THREADS": "1"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)


def assert_quiet_exit(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    noisy = [line for line in done.stderr.splitlines() if any(word in line for word in NOISE)]
    assert noisy == [], done.stderr[-3000:]


@pytest.mark.slow
def test_llamacpp_api_use_exits_quietly(smollm2_gguf: Path) -> None:
    """The backend, a chain over it and the cached default LM are left for the interpreter to free."""
    code = f"""
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_selfrag.chain import SelfRAGChain
from langchain_selfrag.lm import load_reflection_lm

lm = load_reflection_lm({str(smollm2_gguf)!r}, n_ctx=1024)
lm.candidate_probs(["### Instruction:\\nHi\\n\\n### Response:\\n"], ["[Retrieval]", "[No Retrieval]"])
store = InMemoryVectorStore.from_documents([Document("The Quillon Observatory was founded in 1902.")],
                                           DeterministicFakeEmbedding(size=16))
chain = SelfRAGChain.from_retriever(lm, store, k=1, mode="always", max_new_tokens=4)
print(chain.invoke("When was the Quillon Observatory founded?")["answer"] is not None)
second = load_reflection_lm({str(smollm2_gguf)!r}, n_ctx=512, n_seq_max=1)
second.generate(["Hello"], max_new_tokens=2)
"""
    done = run("-c", code)
    assert_quiet_exit(done)
    assert done.stdout.strip().endswith("True")


@pytest.mark.slow
def test_cli_commands_exit_quietly(tmp_path: Path, smollm2_gguf: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "adane.md").write_text("The river Adane flows through Pellisk. Its ferry landing was built in 1755.\n")
    store = str(tmp_path / "store")
    assert_quiet_exit(run("-m", "langchain_selfrag.cli", "index", str(docs), "--store", store))
    assert_quiet_exit(run("-m", "langchain_selfrag.cli", "ask", "When was the ferry landing built?", "--store", store,
                          "--model", str(smollm2_gguf), "--mode", "always", "--k", "1", "--max-new-tokens", "4",
                          "--json"))


def test_transformers_backend_exits_quietly(tiny_model_dir: Path) -> None:
    code = f"""
from langchain_selfrag.lm import load_reflection_lm
lm = load_reflection_lm({str(tiny_model_dir)!r}, device="cpu")
print(lm.generate(["Hello"], max_new_tokens=2)[0].token_ids is not None)
"""
    assert_quiet_exit(run("-c", code))
