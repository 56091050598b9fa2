"""docs/chat-models.md's quickstart, run as written against llama.cpp's OpenAI server on loopback serving
Qwen2.5-Coder-1.5B-Instruct: through ``SelfRAGChain``, ``selfrag ask --chat-model`` and the LangGraph server.

The page's shell block that starts the server is replaced by the fixture (a free port, not 8080); the
variables it exports are set for the blocks that follow. Blocks marked ``<!-- docs-test: skip (...) -->``
need something this machine lacks (an Ollama server) and are not run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import SERVE_PYTHON, free_port, running, serve_has

pytestmark = pytest.mark.slow
pytest.importorskip("langchain_openai", reason="needs the openai extra")
pytest.importorskip("llama_cpp.server", reason="needs the server extra")

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "chat-models.md"
MY_DOCS = {
    "travik.txt": "Mount Travik is 4123 metres tall. Ilsa Brenner first climbed it in 1911.\n",
    "zorblat.md": "# Zorblat\n\nEvery March the town of Quenby holds the Zorblat festival.\n",
    "kessar.txt": "Coins of the Kessari empire were struck from tin and cobalt.\n",
}
_BLOCK = re.compile(r"(?:<!-- docs-test: (?P<mark>[^>]*?) -->\n)?```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)


def page_blocks() -> list[tuple[str, str, str]]:
    """``(language, mark, code)`` of each fenced block of the page, in order."""
    return [(m["lang"], (m["mark"] or "").strip(), m["code"]) for m in _BLOCK.finditer(PAGE.read_text(encoding="utf-8"))]


def test_the_page_has_the_blocks_this_test_runs() -> None:
    langs = [(lang, mark.split(" ")[0]) for lang, mark, _ in page_blocks()]
    assert langs[:2] == [("bash", "server"), ("python", "")]
    assert ("bash", "server") in langs[2:] and ("python", "skip") in langs


@pytest.fixture(scope="module")
def qwen15b() -> Path:
    from langchain_selfrag.bundled import BundleError
    from langchain_selfrag.bundled.bases import base_gguf_path

    try:
        return base_gguf_path("qwen2.5-coder-1.5b-instruct")
    except BundleError as exc:
        pytest.fail(f"the test extra installs the qwen15b parts: {exc}")


@pytest.fixture(scope="module")
def server_env(qwen15b: Path, tmp_path_factory) -> Iterator[dict[str, str]]:
    """llama.cpp's server for the 1.5B on a free port, and the environment the page's first block exports."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    threads = os.environ.get("SELFRAG_THREADS", "2")
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(qwen15b), "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", "4096", "--n_threads", threads, "--n_threads_batch", threads]
    exports = re.search(r"^export (.*)$", page_blocks()[0][2], re.M)
    assert exports, "the page's server block exports the client's variables"
    env = dict(pair.split("=", 1) for pair in exports.group(1).split())
    env["OPENAI_BASE_URL"] = url
    with running(cmd, f"{url}/models", tmp_path_factory.mktemp("qwen-server") / "server.log", name="llama_cpp.server"):
        yield {**os.environ, **env, "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("quickstart")
    (folder / "my_docs").mkdir()
    for name, text in MY_DOCS.items():
        (folder / "my_docs" / name).write_text(text)
    return folder


@pytest.fixture(scope="module")
def python_run(server_env: dict[str, str], workdir: Path) -> subprocess.CompletedProcess:
    code = page_blocks()[1][2]
    return subprocess.run([sys.executable, "-c", code], cwd=workdir, env=server_env, capture_output=True, text=True,
                          timeout=900)


def test_the_python_quickstart_answers_with_its_citation_and_abstains_with_its_reason(python_run) -> None:
    assert python_run.returncode == 0, python_run.stderr[-3000:]
    answer, abstention = python_run.stdout.strip().splitlines()[-2:]
    assert "Brenner" in answer and "['travik.txt']" in answer, python_run.stdout
    assert abstention.startswith("True ") and "judged relevant" in abstention, python_run.stdout


def test_the_command_line_block_answers_from_the_same_store(python_run, server_env: dict[str, str], workdir: Path) -> None:
    assert python_run.returncode == 0
    block = next(code for lang, mark, code in page_blocks()[2:] if lang == "bash" and mark.startswith("server"))
    selfrag = Path(sys.executable).with_name("selfrag")
    env = {**server_env, "PATH": f"{selfrag.parent}{os.pathsep}{server_env.get('PATH', '')}"}
    done = subprocess.run(["bash", "-e", "-c", block], cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Brenner" in done.stdout and "travik.txt" in done.stdout, done.stdout


def test_the_langgraph_server_runs_the_graph_over_the_chat_model(python_run, server_env: dict[str, str],
                                                               workdir: Path, tmp_path: Path) -> None:
    """``langgraph dev`` over graphs/langgraph.json, the chat model named in the run's JSON context: the answer
    and its citation come back through the server."""
    assert python_run.returncode == 0
    exe = shutil.which("langgraph", path=str(Path(SERVE_PYTHON).parent))
    if exe is None or not serve_has("langgraph_api") or not serve_has("langchain_openai"):
        pytest.skip("langgraph-cli[inmem] and langchain-openai are not installed in the serve venv (make test builds it)")
    from langgraph_sdk import get_sync_client

    port = free_port()
    env = {**server_env, "SELFRAG_STORE": str(workdir / ".selfrag" / "store"), "SELFRAG_CACHE_DIR": str(tmp_path / "cache"),
           "ANONYMIZED_TELEMETRY": "False", "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false"}
    env.pop("SELFRAG_MODEL", None)
    url = f"http://127.0.0.1:{port}"
    cmd = [exe, "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port), "--config", "langgraph.json"]
    with running(cmd, url + "/ok", tmp_path / "server.log", name="langgraph dev", cwd=ROOT / "graphs", env=env):
        client = get_sync_client(url=url, api_key=None)
        context = {"chat_model": "openai:qwen2.5-coder-1.5b-instruct", "base_url": server_env["OPENAI_BASE_URL"], "k": 2}
        out = client.runs.wait(None, "selfrag", input={"question": "Who first climbed Mount Travik?"},
                               config={"recursion_limit": 64}, context=context)
        assert out["abstained"] is False and "Brenner" in out["answer"], out
        assert [c["metadata"]["source"] for c in out["citations"]] == ["travik.txt"]
        # the server runs the graph the chain runs: its abstention over this chat model is the Python block's
        # second question above; an abstention through the server is test_langgraph_server.py's (the small model)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").glob("*.gguf"))  # no bundled model built
