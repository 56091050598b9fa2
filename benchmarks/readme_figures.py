"""The README's measured figures, rendered from the results files that shipped scripts wrote.

Each figure passage of ``README.md`` sits between ``<!-- figures:NAME ... -->`` and
``<!-- /figures:NAME -->``; its text is :data:`BLOCKS`\\ ``[NAME]`` applied to the files it names
(``benchmarks/results/*.json``, written by the benchmarks' ``--json``, and the model card's
``eval_full.json``, written by ``cookbook/selfrag_smollm2/evaluate.py``). A single figure inside a
sentence is written ``<!-- figure FILE#KEY.PATH:FORMAT -->VALUE<!-- /figure -->``: VALUE is the
entry KEY.PATH (dict keys or list indices, dot-separated) of FILE (repository-relative, under
``benchmarks/results/`` or ``langchain_selfrag/models/``) formatted with FORMAT (e.g. ``.3f``).
Nothing in a block or an inline figure is typed by hand:

    python -m benchmarks.readme_figures --check   # exit 1 and list the blocks that differ from their files
    python -m benchmarks.readme_figures --write   # re-render every block in README.md

Outside the blocks the README carries no figures: :func:`stray_figures` finds percentages and numbers
with two or more decimals there (``tests/unit_tests/test_readme_figures.py`` keeps it so).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.record import RESULTS_DIR, ROOT, load

README = ROOT / "README.md"
MODEL_CARD = ROOT / "langchain_selfrag" / "models" / "selfrag-smollm2-135m"
INLINE = re.compile(r"<!-- figure (?P<spec>\S+) -->(?P<value>[^<\n]*)<!-- /figure -->")
SHIPPED = (RESULTS_DIR, MODEL_CARD.parent)
BLOCK = re.compile(r"<!-- figures:(?P<name>[\w-]+)[^\n]*?-->\n(?P<body>.*?)\n<!-- /figures:(?P=name) -->", re.S)


def result(name: str) -> dict[str, Any]:
    """``benchmarks/results/NAME.json``, checked for its machine fields."""
    return load(RESULTS_DIR / f"{name}.json")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def when(data: dict[str, Any]) -> str:
    """``2026-11-24 06:30 UTC`` from a results file's ``date``."""
    return datetime.strptime(data["date"], "%Y-%m-%dT%H:%M:%SZ").strftime("%Y-%m-%d %H:%M UTC")


def machine(data: dict[str, Any]) -> str:
    """Where and under what load a results file was measured, in words."""
    m = data["machine"]
    start, end = m["load_average_start"][0], m["load_average_end"][0]
    busy = ", busy with other jobs" if max(start, end) >= m["cores"] else ""
    return (f"{m['cpu']} ({m['cores']} cores; 1-minute load average {start:.2f} at the start and {end:.2f} "
            f"at the end{busy})")


def threads(n: int | None) -> str:
    return "llama.cpp's default threads" if not n else f"{n} llama.cpp thread{'s' if n > 1 else ''}"


def pct(hits: int, n: int) -> str:
    return f"{100 * hits / n:.1f}%"


def render_retrieval_recall() -> str:
    data = result("retrieval_recall")
    card = json.loads((MODEL_CARD / "eval_full.json").read_text())
    held, train = data["figures"]["heldout_articles"], data["figures"]["train_articles"]

    def recalls(part: dict[str, Any], depth: str) -> list[str]:
        return [pct(part["hits"][name][depth], part["questions"]) for name in ("hybrid", "bm25", "dense")]

    h5, h1, t5 = recalls(held, "top5"), recalls(held, "top1"), recalls(train, "top5")
    chain = card["chain"]
    return (
        f"On the {held['questions']} answerable questions of the held-out articles of the bundled model's SQuAD "
        f"evaluation, BM25 + the MiniLM store put a gold passage in the top 5 for {h5[0]} of questions, against "
        f"{h5[1]} for BM25 and {h5[2]} for MiniLM alone (in the top 1: {h1[0]}, {h1[1]}, {h1[2]}); on the "
        f"{train['questions']} questions of its training articles, where the retriever was chosen, in the top 5: "
        f"{t5[0]}, {t5[1]}, {t5[2]} (`{rel(RESULTS_DIR / 'retrieval_recall.json')}`, measured {when(data)} by "
        f"`{data['command']}`). With BM25, the bundled model's Self-RAG answer matches a gold answer on "
        f"{chain['matched']} of its {chain['n']} answerable held-out questions ({chain['match']:.3f}; "
        f"`{rel(MODEL_CARD / 'eval_full.json')}`, written by `cookbook/selfrag_smollm2/evaluate.py`)."
    )


def spread(times: list[float]) -> str:
    """``12.3-45.6``: the fastest and the slowest of a benchmark's rounds."""
    return f"{min(times):.1f}-{max(times):.1f}"


CRITIQUE_FILES = ("critique_speed", "critique_speed_q8_0")


def render_critique_speed() -> str:
    lines = []
    for name in CRITIQUE_FILES:
        data = result(name)
        f, s = data["figures"], data["settings"]
        r = f["ratios"]
        lines.append(
            f"`{data['command']}` (`{rel(RESULTS_DIR / (name + '.json'))}`; measured {when(data)} on {machine(data)}; "
            f"{threads(s['threads'])}; model `{f['model']}`; {f['inputs']}, passages of "
            f"{min(f['passage_tokens'])}-{max(f['passage_tokens'])} tokens, up to {f['new_tokens']} new tokens each "
            f"({f['generated_tokens']['plain']} in all from plain generation); "
            f"medians of {s['repeats']} rounds, the anchor of {min(s['anchor_repeats'], s['repeats'])}; one round took "
            f"{spread(f['times_s']['ours'])} s for our pass and {spread(f['times_s']['plain'])} s for plain generation): "
            f"`speedup_vs_full_vocab` {r['speedup_vs_full_vocab']:.2f}, "
            f"`overhead_vs_plain` {r['overhead_vs_plain']:.3f}, "
            f"`batched_vs_sequential_plain` {r['batched_vs_sequential_plain']:.3f}, "
            f"`prefill_floor_vs_sequential_plain` {r['prefill_floor_vs_sequential_plain']:.3f}, "
            f"`anchor_vs_plain` {r['anchor_vs_plain']:.2f}."
        )
    return "\n\n".join(lines)


THROUGHPUT_FILES = ("throughput", "throughput_never")


def throughput_table(data: dict[str, Any]) -> str:
    rows = data["figures"]["rows"]
    out = ["| mode | QPS | p50 s | p95 s | TTFT p50 s | QPS × sequential | answers = sequential |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        ttft = f"{row['ttft_p50_s']:.2f}" if row["ttft_p50_s"] is not None else "-"
        out.append(f"| {row['mode']} | {row['qps']:.3f} | {row['p50_s']:.2f} | {row['p95_s']:.2f} | {ttft} | "
                   f"{row['qps_ratio_vs_sequential']:.2f} | {row['answers_same_as_sequential']}/{row['queries']} |")
    return "\n".join(out)


def render_throughput() -> str:
    parts = []
    for name in THROUGHPUT_FILES:
        data = result(name)
        s = data["settings"]
        corpus = Path(s["corpus"])  # repository-relative when inside the checkout (record.in_repo)
        corpus_name = corpus.name if corpus.is_absolute() else corpus.as_posix() + "/"
        parts.append(
            f"`{data['command']}` (`{rel(RESULTS_DIR / (name + '.json'))}`; measured {when(data)} on {machine(data)}; "
            f"model `{data['figures']['model']}`, {threads(s['threads'])}; {s['queries']} questions over `{corpus_name}`, "
            f"k={s['k']}, mode {s['mode']}, {s['max_new_tokens']} new tokens per segment):\n\n"
            + throughput_table(data)
        )
    return "\n\n".join(parts)


def render_embeddings() -> str:
    data = result("embeddings")
    f = data["figures"]
    rows = ["| backend | threads | batch | chunks/s | GFLOP/s | of the GEMM rate |", "|---|---:|---:|---:|---:|---:|"]
    for r in f["onnx"].values():
        rows.append(f"| ONNX Runtime (default) | {r['threads']} | {r['batch_size']} | {r['chunks_per_s']:.1f} | "
                    f"{r['gflops']:.1f} | {r['of_gemm']:.2f} |")
    st = f.get("sentence_transformers")
    if st:
        rows.append(f"| sentence-transformers (torch) | {max(data['settings']['threads'])} | 32 | "
                    f"{st['chunks_per_s']:.1f} | {st['gflops']:.1f} | - |")
    gemm = ", ".join(f"{v:.1f} GFLOP/s with {k} thread{'s' if k != '1' else ''}" for k, v in f["gemm_gflops"].items())
    parity = (f"; the two backends' vectors agree to a minimum cosine similarity of {f['cosine_min']:.7f} over the "
              f"{f['chunks']} chunks (mean {f['cosine_mean']:.7f}), and the best ONNX Runtime setting is "
              f"{f['speedup_vs_sentence_transformers']:.2f}x sentence-transformers' speed") if st else ""
    ops = result("embeddings_ops")
    shares = ", ".join(f"{op} {pct(round(share * 1000), 1000)}" for op, share in ops["figures"]["op_share"].items())
    return (f"`{data['command']}` (`{rel(RESULTS_DIR / 'embeddings.json')}`; measured {when(data)} on {machine(data)}; "
            f"{f['chunks']} real chunks of {f['mean_tokens']:.0f} tokens on average, {f['gflop_per_chunk']:.2f} GFLOP "
            f"each; numpy's BLAS reaches {gemm} on a projection-shaped GEMM{parity}):\n\n" + "\n".join(rows)
            + f"\n\nWhere ONNX Runtime's kernel time goes (`{ops['command']}`, `{rel(RESULTS_DIR / 'embeddings_ops.json')}`, "
            f"{ops['settings']['threads']} thread, batch {ops['settings']['batch_size']}): {shares}.")


def render_index_scale() -> str:
    data = result("index_scale")
    f = data["figures"]
    rows = ["| corpus | chunks | files | indexing s | chunks/s | embedding share | peak memory MB | store MB | "
            "retrieval ms (p50 / p95) | search ms | chain s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in f["runs"]:
        if r["replayed"]:
            time_s = f"{r['time_projected_s']:.0f} ({r['index_s']:.0f} measured + embedding at {r['embed_s_per_chunk'] * 1000:.0f} ms/chunk)"
            share = "-"
        else:
            time_s = f"{r['index_s']:.0f}"
            share = f"{r['embed_s'] / r['index_s']:.2f}"
        chain = f"{r['chain_s_median']:.2f}" if "chain_s_median" in r else "-"
        rows.append(f"| {r['corpus']} | {r['chunks']} | {r['files']} | {time_s} | {r['chunks_per_s']:.1f} | {share} | "
                    f"{r['peak_rss_mb']:.0f} | {r['disk_mb']:.1f} | {r['retrieval_ms_median']:.1f} / "
                    f"{r['retrieval_ms_p95']:.1f} | {r['search_ms_median']:.1f} | {chain} |")
    ratios = "; ".join(f"{key.split('_')[0]}: {value:.2f}" for key, value in f.items() if key.endswith("_vs_smallest"))
    s = data["settings"]
    return (f"`{data['command']}` (`{rel(RESULTS_DIR / 'index_scale.json')}`, plot `{rel(RESULTS_DIR / 'index_scale.png')}`; "
            f"measured {when(data)} on {machine(data)}; $SELFRAG_THREADS={s['threads']}; the real corpus on this "
            f"machine holds {f['real_corpus_chunks']} chunks; runs above {s['embed_up_to']} chunks replay vectors "
            f"instead of embedding, and their time adds the embedding time per chunk measured at the largest "
            f"embedded size; chain: the bundled model, mode always, k=5, median of {s['chain_questions']} "
            f"questions):\n\n" + "\n".join(rows) + f"\n\nRetrieval latency at the largest size against the "
            f"smallest (median): {ratios}.")


def _rate(part: dict[str, Any] | None) -> str:
    if not part or not part.get("n"):
        return "-"
    mark = "" if "holds" not in part else (" (bar met)" if part["holds"] else " (bar missed)")
    return f"{part['right']}/{part['n']}{mark}"


def _value(fig: dict[str, Any] | None) -> str:
    value = (fig or {}).get("value")
    return "-" if value is None else f"{value:.2f}"


def trust_table(summary: dict[str, Any]) -> str:
    """One row per kind of text: each part's share handled right, then the selective-QA figures."""
    out = ["| kind of text | answerable: right, cited | … right before abstention | near miss: abstained | "
           "off topic: abstained | noise only: abstained | coverage | selective accuracy | F1_RG | AURC |",
           "|---|---|---|---|---|---|---:|---:|---:|---:|"]
    for kind, entry in summary["kinds"].items():
        parts, sel = entry["parts"], entry["selective"]
        near = parts.get("near_miss") or parts.get("unanswerable")
        out.append(f"| {kind} | {_rate(parts.get('answerable'))} | {_rate(entry.get('reader_ceiling'))} | {_rate(near)} | "
                   f"{_rate(parts.get('off_topic'))} | {_rate(parts.get('noise_only'))} | "
                   f"{_value(sel['coverage'])} | {_value(sel['selective_accuracy'])} | {_value(sel['f1_rg'])} | "
                   f"{_value(sel['aurc'])} |")
    return "\n".join(out)


def render_trust() -> str:
    data = result("trust_suite")
    f, s = data["figures"], data["settings"]
    squad = f["kinds"].get("squad")
    extra = ""
    if squad:
        only, noise = squad["answerable_only"], squad["parts"].get("noise_only") or {}
        extra = (f"\n\nOn the SQuAD articles' answerable questions the chain answers {_value(only['coverage'])} of "
                 f"them with selective accuracy {_value(only['selective_accuracy'])} "
                 f"({only['selective_accuracy_at_0.6']:.2f} when its confidence keeps the surest 0.6 of them), "
                 f"and it rejects {noise.get('right')} of {noise.get('n')} noise-only runs.")
    model = Path(f.get("model") or s.get("model") or "?").name
    return (f"`{data['command']}` (`{rel(RESULTS_DIR / 'trust_suite.json')}`, plot "
            f"`{rel(RESULTS_DIR / 'trust_suite.png')}`; measured {when(data)} on "
            f"{machine(data)}; model `{model}`, the {s['split']} part, chosen for nothing):\n\n"
            + trust_table(f) + extra)


#: block name -> renderer
BLOCKS: dict[str, Callable[[], str]] = {
    "retrieval_recall": render_retrieval_recall,
    "critique_speed": render_critique_speed,
    "throughput": render_throughput,
    "embeddings": render_embeddings,
    "index_scale": render_index_scale,
    "trust": render_trust,
}


def inline_figure(spec: str) -> str:
    """The text of one inline figure ``FILE#KEY.PATH[:FORMAT]`` (ValueError when the spec is bad)."""
    file, _, key = spec.partition("#")
    key, _, fmt = key.partition(":")
    path = (ROOT / file).resolve()
    if not key or not any(path.is_relative_to(folder) for folder in SHIPPED):
        raise ValueError(f"inline figure {spec!r}: needs FILE#KEY with FILE under benchmarks/results/ or "
                         "langchain_selfrag/models/")
    value: Any = json.loads(path.read_text())
    for part in key.split("."):
        try:
            value = value[int(part)] if isinstance(value, list) else value[part]
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"inline figure {spec!r}: {file} has no {key}") from exc
    return format(value, fmt)


def blocks_in(text: str) -> dict[str, str]:
    """The figure blocks of a README text, name -> body."""
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def check(text: str) -> list[str]:
    """What in the README text differs from its files (empty when every block matches)."""
    found = blocks_in(text)
    problems = [f"unknown figures block {name!r}" for name in found if name not in BLOCKS]
    for name, render in BLOCKS.items():
        if name not in found:
            problems.append(f"README has no figures:{name} block")
        elif found[name] != (want := render()):
            diff = next((i for i, (a, b) in enumerate(zip(found[name], want)) if a != b),
                        min(len(found[name]), len(want)))
            problems.append(f"figures:{name} differs from its files at character {diff}: README has "
                            f"{found[name][max(0, diff - 40):diff + 40]!r}, the files give {want[max(0, diff - 40):diff + 40]!r}")
    for m in INLINE.finditer(text):
        try:
            want = inline_figure(m["spec"])
        except (OSError, ValueError) as exc:
            problems.append(str(exc))
            continue
        if m["value"] != want:
            problems.append(f"figure {m['spec']}: README has {m['value']!r}, the file gives {want!r}")
    return problems


def rendered(text: str) -> str:
    """The README text with every known block re-rendered from its files."""
    missing = [name for name in BLOCKS if name not in blocks_in(text)]
    if missing:
        raise ValueError(f"README has no block for {', '.join(missing)}: add <!-- figures:NAME --> ... "
                         "<!-- /figures:NAME --> markers first")

    def fill(m: re.Match[str]) -> str:
        if m["name"] not in BLOCKS:
            return m[0]
        start, end = m.start("body") - m.start(), m.end("body") - m.start()
        return m[0][:start] + BLOCKS[m["name"]]() + m[0][end:]

    text = BLOCK.sub(fill, text)
    return INLINE.sub(lambda m: m[0].replace(f"-->{m['value']}<!--", f"-->{inline_figure(m['spec'])}<!--", 1), text)


FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`(?:[^`\n]|\n(?![ \t]*\n))*`")  # a code span ends at a blank line
VERSION = re.compile(r"\b(?:Python|torch|llama-cpp-python|llama\.cpp)\s?\d+(?:\.\d+)+\+?|[=<>]=\s?\d+(?:\.\d+)+")
PERCENT = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?%")
DECIMALS = re.compile(r"(?<![\w.])\d+\.\d{2,}(?![\w.])")


def stray_figures(text: str) -> list[str]:
    """Percentages and numbers with two or more decimals outside figure blocks, inline figures, code,
    comments and version numbers."""
    prose = BLOCK.sub("", text)
    prose = INLINE.sub("", prose)
    prose = VERSION.sub("", prose)
    prose = FENCE.sub("", prose)
    prose = re.sub(r"<!--.*?-->", "", prose, flags=re.S)
    prose = INLINE_CODE.sub("", prose)
    return PERCENT.findall(prose) + DECIMALS.findall(prose)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="exit 1 when README.md differs from its files")
    group.add_argument("--write", action="store_true", help="re-render the figure blocks of README.md")
    parser.add_argument("--readme", default=str(README))
    args = parser.parse_args(argv)
    path = Path(args.readme)
    text = path.read_text()
    if args.write:
        new = rendered(text)
        if new != text:
            path.write_text(new)
        print(f"{path}: {'updated' if new != text else 'already up to date'}")
        return 0
    problems = check(text) + [f"figure outside a figures block: {x!r}" for x in stray_figures(text)]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
