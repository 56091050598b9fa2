"""How closely the backends agree on one Self-RAG model: transformers on its Hugging Face folder,
llama.cpp on its GGUF and, with ``--vllm-python``, vLLM serving the same folder on 127.0.0.1.

For each critique group (Retrieve after the question, IsRel after a passage, IsSup after an answer,
IsUse after its support) the reflection-token probabilities are read at prompts built from the demo
corpus (``examples/corpus``: each page's first paragraph, a question on its title, the paragraph's
first sentence as the answer), and the largest absolute difference per pair of backends is printed.

    python benchmarks/backend_agreement.py --hf runs/qwen/hf --gguf runs/qwen/q1.gguf \\
        --vllm-python .venv-vllm/bin/python --json benchmarks/results/backend_agreement_qwen_pilot.json
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.record import Run  # noqa: E402
from langchain_selfrag import prompts as P  # noqa: E402
from langchain_selfrag import tokens as T  # noqa: E402

CORPUS = ROOT / "examples" / "corpus"
#: vLLM's CPU build (docs/scale-out.md): beside the documented ``--max-logprobs 20
#: --enable-prefix-caching``, it needs a fixed KV cache (by default it claims 92% of the NUMA node's
#: memory and refuses to start on a machine that is using some), and gets eager mode (no torch.compile:
#: with a fixed cache it also skips the warm-up pass) and fp32, so that it computes what transformers
#: computes from the same folder. ``tests/integration_tests/test_lm_vllm.py`` serves with these too.
VLLM_FLAGS = ("--max-logprobs", "20", "--enable-prefix-caching", "--dtype", "float32", "--enforce-eager",
              "--kv-cache-memory-bytes", "512M", "--max-model-len", "2048")


def corpus_prompts(corpus: Path = CORPUS, *, max_chars: int = 600) -> dict[T.Kind, list[str]]:
    """One prompt per page and critique group, each ending where that group is read."""
    out: dict[T.Kind, list[str]] = {kind: [] for kind in T.CRITIQUE_KINDS}
    for page in sorted(corpus.glob("*.md")):
        text = page.read_text()
        title = page.stem.replace("-", " ")
        body = next((p for p in re.split(r"\n\s*\n", text) if p.strip() and not p.lstrip().startswith("#")), "")
        passage = " ".join(body.split())[:max_chars]
        answer = re.split(r"(?<=[.!?])\s", passage, maxsplit=1)[0]
        for kind, prompt in P.critique_positions(f"What does the page on {title} say?", title.title(), passage,
                                                 answer).items():
            out[kind].append(prompt)
    return out


def worst_difference(a: list[dict[str, float]], b: list[dict[str, float]]) -> float:
    """Largest |p_a - p_b| over every prompt and candidate."""
    return max(abs(x[c] - y[c]) for x, y in zip(a, b, strict=True) for c in x)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def vllm_server(python: str, hf_dir: Path, log: Path, *, timeout: float = 900.0) -> Iterator[str]:
    """vLLM's OpenAI server for ``hf_dir`` on a free loopback port; yields its ``/v1`` URL, then stops it."""
    port = free_port()
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(hf_dir), "--host", "127.0.0.1",
           "--port", str(port), "--served-model-name", hf_dir.name, *VLLM_FLAGS]
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None:
                    sys.exit(f"vLLM exited with {proc.returncode}; its log: {log}")
                if time.monotonic() > deadline:
                    sys.exit(f"vLLM did not start within {timeout:g} s; its log: {log}")
                time.sleep(1.0)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hf", type=Path, required=True, help="the model's Hugging Face folder (fp32)")
    parser.add_argument("--gguf", type=Path, required=True, help="the same model as a GGUF")
    parser.add_argument("--vllm-python", help="a python with vLLM (`make vllm`'s .venv-vllm/bin/python)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    for path in (args.hf, args.gguf):
        if not path.exists():
            parser.error(f"{path} does not exist")

    from langchain_selfrag.lm import load_reflection_lm

    run = Run("backend_agreement")
    prompts = corpus_prompts()
    backends = {"transformers": load_reflection_lm(str(args.hf), backend="transformers", device="cpu"),
                "llamacpp": load_reflection_lm(str(args.gguf), backend="llamacpp", n_ctx=2048,
                                               n_threads=args.threads)}
    hf_lm, cpp_lm = backends["transformers"], backends["llamacpp"]
    same_tokens = all(hf_lm.tokenize(p, add_bos=True) == cpp_lm.tokenize(p, add_bos=True)
                      for group in prompts.values() for p in group)

    def read(lm) -> dict[str, list[dict[str, float]]]:
        return {kind.value: lm.candidate_probs(prompts[kind], list(T.GROUPS[kind])) for kind in T.CRITIQUE_KINDS}

    probs = {name: read(lm) for name, lm in backends.items()}
    if args.vllm_python:
        log = Path(tempfile.mkdtemp(prefix="vllm-")) / "vllm.log"
        with vllm_server(args.vllm_python, args.hf.resolve(), log) as url:
            remote = load_reflection_lm(url)
            probs["vllm"] = read(remote)
            remote.close()
    names = list(probs)
    pairs = {f"{a}_vs_{b}": {kind: worst_difference(probs[a][kind], probs[b][kind]) for kind in probs[a]}
             for i, a in enumerate(names) for b in names[i + 1:]}
    figures = {"same_tokens": same_tokens, "prompts_per_group": len(prompts[T.Kind.RETRIEVE]),
               "worst_abs_difference": pairs}
    print(f"tokenizations equal (transformers, llama.cpp): {same_tokens}")
    for pair, worst in pairs.items():
        print(f"{pair:28s} " + "  ".join(f"{kind} {value:.2e}" for kind, value in worst.items()))
    if args.json:
        run.write(args.json, {"hf": args.hf, "gguf": args.gguf, "vllm": bool(args.vllm_python),
                              "threads": args.threads}, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
