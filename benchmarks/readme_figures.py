"""The measured figures of the README, CONTRIBUTING.md, docs/ and the cookbook's log of experiments, rendered from
the results files that shipped scripts wrote.

Each figure passage of a page (:func:`pages`: ``README.md``, ``CONTRIBUTING.md``, every ``docs/*.md`` and
``cookbook/EXPERIMENTS.md``) sits between ``<!-- figures:NAME ... -->`` and ``<!-- /figures:NAME -->``; its
text is :data:`BLOCKS`\\ ``[NAME]`` applied to the files it names (``benchmarks/results/*.json``, written by the
benchmarks' ``--json``, and the model card's ``eval_full.json``, written by ``cookbook/selfrag_smollm2/evaluate.py``).
Every block stands on some page. A single figure inside a sentence is written
``<!-- figure FILE#KEY.PATH:FORMAT -->VALUE<!-- /figure -->``: VALUE is the entry KEY.PATH (dict keys or
list indices, dot-separated) of FILE (repository-relative, under ``benchmarks/results/`` or
``langchain_selfrag/models/``) formatted with FORMAT (e.g. ``.3f``). So that a page stays readable in an
editor, a page names the figure by a short key instead, ``<!-- figure KEY -->VALUE<!-- /figure -->``:
``GROUP.NAME`` in :data:`FIGURES` (``benchmarks/figures.toml``), whose table ``GROUP`` gives the ``file`` and
its entry ``NAME`` the ``KEY.PATH:FORMAT``. Nothing in a block or an inline figure is typed by hand:

    python -m benchmarks.readme_figures --check   # exit 1 and list the figures that differ from their files
    python -m benchmarks.readme_figures --write   # re-render every figure of every page

Outside the blocks the user pages carry no figures: :func:`stray_figures` finds percentages and numbers with
two or more decimals there (``tests/unit_tests/test_readme_figures.py`` keeps it so). The log of experiments
(:data:`LOG`) also quotes figures of runs whose files are not in the repository, so it is left out of that check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.record import RESULTS_DIR, ROOT, load

README = ROOT / "README.md"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
DOCS = ROOT / "docs"
#: The cookbook's log of experiments that did not ship: its figures are rendered too, but it may quote figures of
#: runs whose results are not in the repository (no stray-figure check).
LOG = ROOT / "cookbook" / "EXPERIMENTS.md"
#: The short keys of the pages' inline figures: ``[GROUP]`` tables, ``file = PATH`` and ``NAME = "KEY.PATH:FORMAT"``
#: entries.
FIGURES_FILE = Path(__file__).resolve().with_name("figures.toml")
MODEL_CARD = ROOT / "langchain_selfrag" / "models" / "selfrag-smollm2-135m"
INLINE = re.compile(r"<!-- figure (?P<spec>\S+) -->(?P<value>[^<\n]*)<!-- /figure -->")
SHIPPED = (RESULTS_DIR, MODEL_CARD.parent)
BLOCK = re.compile(r"<!-- figures:(?P<name>[\w-]+)[^\n]*?-->\n(?P<body>.*?)\n<!-- /figures:(?P=name) -->", re.S)


def pages() -> list[Path]:
    """The pages whose figures are rendered: README.md, CONTRIBUTING.md, docs/*.md, the log of experiments and
    the model cards not rendered by a recipe of their own (v4's is: ``cookbook/selfrag_smollm2/card``)."""
    cards = [p for p in sorted(MODEL_CARD.parent.glob("*/README.md")) if p.parent != MODEL_CARD]
    return [p for p in (README, CONTRIBUTING, *sorted(DOCS.glob("*.md")), LOG, *cards) if p.is_file()]


def figure_keys(text: str | None = None) -> dict[str, str]:
    """Every short figure key of ``benchmarks/figures.toml`` (or of ``text``, a TOML text), ``GROUP.NAME`` ->
    ``FILE#KEY.PATH:FORMAT``."""
    data = tomllib.loads(FIGURES_FILE.read_text() if text is None else text)
    keys = {}
    for group, entries in data.items():
        if "file" not in entries:
            raise ValueError(f"{FIGURES_FILE.name}: [{group}] names no file")
        for name, path in entries.items():
            if name != "file":
                keys[f"{group}.{name}"] = f"{entries['file']}#{path}"
    return keys


FIGURES = figure_keys()


def command(data: dict[str, Any]) -> str:
    """A results file's command line, its scratch and data folders (``--out``, ``--data``, ``--workdir``) shown
    as ``DIR`` and the scratch file of ``--fit-calibration`` as ``FILE``: where a run kept its records is no
    part of what it measured."""
    line = re.sub(r"(--(?:out|data|workdir)[ =])\S+", r"\1DIR", data["command"])
    return re.sub(r"(--fit-calibration[ =])\S+", r"\1FILE", line)


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
        f"`{command(data)}`). With BM25, the bundled model's Self-RAG answer matches a gold answer on "
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
            f"`{command(data)}` (`{rel(RESULTS_DIR / (name + '.json'))}`; measured {when(data)} on {machine(data)}; "
            f"{threads(s['threads'])}; model `{f['model']}`; {f['inputs'].removesuffix(' (shared/data)')}, passages of "
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
            f"`{command(data)}` (`{rel(RESULTS_DIR / (name + '.json'))}`; measured {when(data)} on {machine(data)}; "
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
    return (f"`{command(data)}` (`{rel(RESULTS_DIR / 'embeddings.json')}`; measured {when(data)} on {machine(data)}; "
            f"{f['chunks']} real chunks of {f['mean_tokens']:.0f} tokens on average, {f['gflop_per_chunk']:.2f} GFLOP "
            f"each; numpy's BLAS reaches {gemm} on a projection-shaped GEMM{parity}):\n\n" + "\n".join(rows)
            + f"\n\nWhere ONNX Runtime's kernel time goes (`{command(ops)}`, `{rel(RESULTS_DIR / 'embeddings_ops.json')}`, "
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
    return (f"`{command(data)}` (`{rel(RESULTS_DIR / 'index_scale.json')}`, plot `{rel(RESULTS_DIR / 'index_scale.png')}`; "
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
    return (f"`{command(data)}` (`{rel(RESULTS_DIR / 'trust_suite.json')}`, plot "
            f"`{rel(RESULTS_DIR / 'trust_suite.png')}`; measured {when(data)} on "
            f"{machine(data)}; model `{model}`, the {s['split']} part, chosen for nothing):\n\n"
            + trust_table(f) + extra)


def family(prefix: str) -> list[str]:
    """The results files ``benchmarks/results/PREFIX*.json``, by name (a block that renders each of them)."""
    return sorted(p.stem for p in RESULTS_DIR.glob(f"{prefix}*.json"))


#: Results files of candidate models that did not ship: their rows stand in the log of experiments (the blocks
#: ``*_candidates``), the shipped configuration's on the user pages.
CANDIDATES = frozenset({"project_docs_x2", "backend_agreement_qwen_pilot", "model_cost_qwen_pilot"})


def shipped(names: list[str]) -> list[str]:
    return [n for n in names if n not in CANDIDATES]


def candidates(names: list[str]) -> list[str]:
    return [n for n in names if n in CANDIDATES]


def render_project_docs(names: list[str] | None = None) -> str:
    """One row per run of ``benchmarks/project_docs.py``: how its answers about the demo corpus went."""
    rows = ["| results file | model | settings | explained | abstained | answered without the source | "
            "cited, not its sentence | near misses abstained |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for name in family("project_docs") if names is None else names:
        data = result(name)
        f, s = data["figures"], data["settings"]
        ans, near = f["answerable"], f["near_miss"]
        settings = ", ".join([*(["`--paper`"] if s.get("paper") else []),
                              *([f"`--answer-form {s['answer_form']}`"] if s.get("answer_form") else [])]) or "defaults"
        rows.append(f"| `{rel(RESULTS_DIR / (name + '.json'))}` | `{f['model']}` | {settings} | "
                    f"{ans['explained']}/{ans['n']} | {ans['abstained']} | {ans['answered_without_the_source']} | "
                    f"{ans['cited_but_not_its_sentence']} | {near['abstained']}/{near['n']} |")
    return "\n".join(rows)


def render_trust_compare() -> str:
    """One row per run of ``benchmarks/trust_compare.py``: run B against run A, kind by kind."""
    kinds = ("docs", "news", "invented", "squad")
    rows = ["| results file | A | B | " + " | ".join(kinds) + " |", "|---|---|---|" + "---|" * len(kinds)]
    for name in family("trust_compare_"):
        data = result(name)
        s, found = data["settings"], data["figures"]["kinds"]
        verdicts = " | ".join(found[k]["verdict"] if k in found else "-" for k in kinds)
        rows.append(f"| `{rel(RESULTS_DIR / (name + '.json'))}` | `{Path(s['a']).name}` | `{Path(s['b']).name}` | "
                    f"{verdicts} |")
    return "\n".join(rows)


def render_backend_agreement(names: list[str] | None = None) -> str:
    """One row per run of ``benchmarks/backend_agreement.py``: worst probability gap per pair of backends."""
    rows = ["| results file | model | pair | Retrieve | IsRel | IsSup | IsUse |", "|---|---|---|---:|---:|---:|---:|"]
    for name in family("backend_agreement") if names is None else names:
        data = result(name)
        model = Path(data["settings"]["gguf"]).name
        for pair, worst in data["figures"]["worst_abs_difference"].items():
            cells = " | ".join(f"{worst[k]:.1e}" for k in ("retrieve", "isrel", "issup", "isuse"))
            pair_name = pair.replace("_vs_", " / ")
            rows.append(f"| `{rel(RESULTS_DIR / (name + '.json'))}` | `{model}` | {pair_name} | {cells} |")
    return "\n".join(rows)


def model_seconds(split: dict[str, float] | None) -> str:
    """``critic 9.2 s, reader 15.7 s ... (46.8 s)``: a ``demo_model_s`` figure, or ``-``."""
    if not split:
        return "-"
    parts = ", ".join(f"{role} {s:.1f} s" for role, s in split.items() if role != "ask_s")
    return f"{parts} (of {split['ask_s']:.1f} s)"


def render_model_cost(names: list[str] | None = None) -> str:
    """One row per model of each run of ``benchmarks/model_cost.py`` (a reader pair: model + reader + judge):
    build, demo question, memory, throughput, and where the demo question's time goes (``--breakdown``)."""
    rows = ["| results file | model | CPU, k | build | GGUF | demo question | its peak RSS | abstained | "
            "sequential q/s (p50) | asked again, loaded: seconds per model | passages read ahead, then asked |",
            "|---|---|---|---:|---:|---:|---:|---|---:|---|---|"]
    for name in family("model_cost") if names is None else names:
        data = result(name)
        machine = data["machine"]
        features = f" ({' '.join(machine['cpu_features']) or 'no AVX2'})" if "cpu_features" in machine else ""
        where = f"{machine['cpu'].split(' Processor')[0]}{features}, {data['settings'].get('k') or 5}"
        for m in data["figures"]["models"]:
            seq = next((r for r in (m.get("throughput") or {}).get("rows", []) if r["concurrency"] == 1), None)
            speed = f"{seq['qps']:.2f} ({seq['p50_s']:.1f} s)" if seq else "-"
            model = " + ".join(f"`{x}`" for x in (m["model"], m.get("reader"), m.get("judge")) if x)
            rows.append(f"| `{rel(RESULTS_DIR / (name + '.json'))}` | {model} | {where} | {m['build_s']:.1f} s | "
                        f"{m['gguf_mb']:.0f} MB | {m['demo_s']:.1f} s | {m['demo_peak_rss_mb']} MB | "
                        f"{'yes' if m['demo_abstained'] else 'no'} | {speed} | {model_seconds(m.get('demo_model_s'))} | "
                        f"{read_ahead_cell(m)} |")
    return "\n".join(rows)


def read_ahead_cell(m: dict[str, Any]) -> str:
    """``32 in 118 s (138 MB); ask 8.4 s``: ``model_cost.py --read-ahead``'s figures, or ``-``."""
    if "read_ahead_s" not in m:
        return "-"
    warm = m.get("demo_model_warm_s", {}).get("ask_s")
    ask = f"ask {warm:.1f} s" if warm is not None else f"demo question {m['demo_warm_s']:.1f} s"
    return f"{m['read_ahead_passages']} in {m['read_ahead_s']} s ({m['prefix_states_mb']:.0f} MB); {ask}"


def render_format_reading() -> str:
    """One row per run of ``benchmarks/format_reading.py``: gold-window answers found per prompt layout."""
    forms = ("selfrag", "chat", "chat_selfrag")
    rows = ["| results file | model | reflection tokens banned | " + " | ".join(f"`{f}`" for f in forms) + " |",
            "|---|---|---|" + "---:|" * len(forms)]
    for name in family("format_reading"):
        data = result(name)
        f, s = data["figures"], data["settings"]
        cells = " | ".join(f"{f['forms'][k]['right']}/{f['questions']}" if k in f["forms"] else "-" for k in forms)
        rows.append(f"| `{rel(RESULTS_DIR / (name + '.json'))}` | `{Path(s['model']).name}` | "
                    f"{'yes' if s['ban_reflection'] else 'no'} | {cells} |")
    return "\n".join(rows)


#: The trust suite's kinds of text, in words.
KIND_NAMES = {"docs": "package READMEs from PyPI", "news": "invented news reports", "invented": "invented fact sheets",
              "squad": "held-out SQuAD articles"}


#: The default model's run of the trust suite's test part (the README's summary) and how the README names it.
DEFAULT_MODEL_TRUST = ("trust_suite_lora15a_test", "`selfrag-qwen2.5-coder-1.5b` (evaluated as `{file}`: its bundle build "
                       "agrees, `agreement.json` of its card)")


def render_trust_summary(name: str = DEFAULT_MODEL_TRUST[0], label: str = DEFAULT_MODEL_TRUST[1]) -> str:
    """The README's short form of the trust block: per kind of text, each part's share handled right."""
    data = result(name)
    f, s = data["figures"], data["settings"]
    model = label.format(file=Path(f.get("model") or s.get("model") or "?").name)
    rows = ["| text it was not trained on | answerable: right and cited | near miss or unanswerable: abstained | "
            "off topic: abstained | noise only: abstained |", "|---|---|---|---|---|"]

    def count(part: dict[str, Any] | None) -> str:
        return f"{part['right']}/{part['n']}" if part and part.get("n") else "-"

    for kind, entry in f["kinds"].items():
        parts = entry["parts"]
        rows.append(f"| {KIND_NAMES.get(kind, kind)} | {count(parts.get('answerable'))} | "
                    f"{count(parts.get('near_miss') or parts.get('unanswerable'))} | {count(parts.get('off_topic'))} | "
                    f"{count(parts.get('noise_only'))} |")
    return (f"Model {model} through `SelfRAGChain` with its defaults, on the {s['split']} part of "
            f"`benchmarks/trust_suite.py` (chosen for nothing; `{rel(RESULTS_DIR / (name + '.json'))}`, "
            f"measured {when(data)}):\n\n" + "\n".join(rows))


#: The chat-model page's comparison: (results file, system), the same validation questions (docs, and SQuAD with
#: --n-squad 40 and seed 0) asked of each.
CHAT_MODEL_RUNS = (("trust_suite_chat_q15_val", "Qwen2.5-Coder-1.5B-Instruct as a chat model (`ChatReflectionLM`)"),
                   ("trust_suite_v4_val_docs_squad40", "the bundled Self-RAG model"),
                   ("trust_suite_reader_judge_val", "the three models (0.5B reader, 1.5B judge, bundled critic; retired in 0.1)"))


def render_chat_model_trust() -> str:
    """The trust suite's validation docs and SQuAD questions, per system: each part handled right at the system's
    own bars, and how well its best IsRel separates answerable questions from the rest (AUC, bars aside)."""
    rows = ["| system | results file | docs answerable: right, cited | docs near miss: abstained | docs AUC | "
            "SQuAD answerable: right, cited | SQuAD unanswerable: abstained | SQuAD AUC | seconds a question |",
            "|---|---|---|---|---:|---|---|---:|---:|"]
    fitted = ""
    for name, system in CHAT_MODEL_RUNS:
        data = result(name)
        kinds = data["figures"]["kinds"]
        docs, squad = kinds.get("docs", {}), kinds.get("squad", {})
        auc = lambda kind, part: _value({"value": kind.get("relevance_separation", {}).get(part, {}).get("auc")})
        timed = data["figures"].get("seconds_per_question") or {}
        seconds = f"{timed['mean']:.1f} ({timed['n']} timed)" if timed.get("mean") is not None else "-"
        rows.append(f"| {system} | `{rel(RESULTS_DIR / (name + '.json'))}` | "
                    f"{_rate(docs.get('parts', {}).get('answerable'))} | {_rate(docs.get('parts', {}).get('near_miss'))} | "
                    f"{auc(docs, 'near_miss')} | {_rate(squad.get('parts', {}).get('answerable'))} | "
                    f"{_rate(squad.get('parts', {}).get('unanswerable'))} | {auc(squad, 'unanswerable')} | {seconds} |")
        at = data["figures"].get("at_fitted_bars")
        if name == CHAT_MODEL_RUNS[0][0] and at:
            parts = at["kinds"]
            count = lambda kind, part: (lambda p: f"{p['right']}/{p['n']}" if p else "-")(parts.get(kind, {}).get(part))
            fitted = (f"\n\nWith bars fitted on these same questions (IsRel {at['abstain_isrel']:g}, IsSup "
                      f"{at['abstain_issup']:g}; in-sample, so an upper bound of what `selfrag calibrate` on your documents "
                      f"gives) the chat model answers {count('docs', 'answerable')} docs questions right and abstains on "
                      f"{count('docs', 'near_miss')} near misses; on SQuAD {count('squad', 'answerable')} right and "
                      f"{count('squad', 'unanswerable')} abstained.")
    head = result(CHAT_MODEL_RUNS[0][0])
    return (f"`{command(head)}` (measured {when(head)} on {machine(head)}; the other rows from their results "
            "files, the same questions):\n\n" + "\n".join(rows) + fitted)


def _handled(figure: dict[str, Any]) -> str:
    parts = figure["parts"]
    cell = lambda p: (lambda e: f"{e['right']}/{e['n']}" if e else "-")(parts.get(p))
    return f"{cell('answerable')}, {cell('near_miss')}" + (" (bars met)" if figure.get("meets") else "")


def render_chat_model_bars() -> str:
    """The bars shipped for chat models without a calibration of their own, and on each chat model's test part
    those fitted without it beside the generic bars and its own validation fit."""
    data = result("chat_model_bars")
    f = data["figures"]
    bars = f["pooled_bars"]
    rows = ["| chat model | bars fitted without it (IsRel, IsSup): answerable right, near misses abstained | "
            "shipped bars | generic bars (0.5, 0.25) | its own validation bars |", "|---|---|---|---|---|"]
    for model, entry in f["per_model"].items():
        t = entry.get("test")
        if not t:
            continue
        own, out = t["own_validation"], t["left_out"]
        rows.append(f"| `{model}` | ({out['abstain_isrel']:g}, {out['abstain_issup']:g}): {_handled(out)} | "
                    f"{_handled(t['pooled'])} | {_handled(t['generic'])} | "
                    f"({own['abstain_isrel']:g}, {own['abstain_issup']:g}): {_handled(own)} |")
    b = f["bars"]
    return (f"`{command(data)}` (`{rel(RESULTS_DIR / 'chat_model_bars.json')}`, plot "
            f"`{rel(RESULTS_DIR / 'chat_model_bars.png')}`; measured {when(data)} on {machine(data)}): the shipped "
            f"bars are IsRel >= {bars['abstain_isrel']:g} and IsSup >= {bars['abstain_issup']:g}, fitted on the "
            f"validation part of {len(f['models'])} chat models pooled. On the test part (docs), per model: "
            f"answerable questions right and cited, near misses abstained; \"bars met\" where near misses abstained "
            f">= {b['near_miss']:g} and answerable right >= {b['answerable']:g}:\n\n" + "\n".join(rows))


DOCS_RETRIEVAL = ("docs_retrieval_validation", "docs_retrieval_test")


def render_docs_retrieval() -> str:
    """Recall of the answer's chunk per index, on the trust suite's docs kind (both parts), at the shipped chunk size."""
    rows = ["| part | questions | index | top 1 | top 5 | top 10 | MRR |", "|---|---|---|---|---|---|---|"]
    names = {"store/dense": "embeddings alone (before)", "lexical/headed": "lexical index alone",
             "store/hybrid": "fused (shipped)"}
    runs = []
    for name in DOCS_RETRIEVAL:
        data = result(name)
        f = data["figures"]
        size = f["sizes"]["800"]
        for key, label in names.items():
            a = size[key]["all"]
            rows.append(f"| {f['split']} | {f['questions']} | {label} | {a['r@1']:.3f} | {a['r@5']:.3f} | "
                        f"{a['r@10']:.3f} | {a['mrr']:.3f} |")
        runs.append(f"`{command(data)}` ({when(data)})")
    return ("\n".join(rows) + "\n\nChunks of 800 characters (`selfrag index`'s default), the validation part "
            "choosing and the test part only measured; " + "; ".join(runs) + f", on {machine(result(DOCS_RETRIEVAL[0]))}. "
            "The questions were written from the documents' text and share its words, which favours the lexical "
            "side: fusion keeps the embeddings for questions worded otherwise.")


DOCS_LOSS = (("trust_suite_docs_val_default_retrieval", "validation", "embeddings alone"),
             ("trust_suite_docs_val_hybrid_retrieval", "validation", "embeddings and BM25 fused"),
             ("trust_suite_docs_val_requoted", "validation", "fused, and answers quoted as now"),
             ("trust_suite_docs_val_headed", "validation", "as above, each passage read under its heading"),
             ("trust_suite_docs_test_hybrid_retrieval", "test", "embeddings and BM25 fused"),
             ("trust_suite_docs_test_requoted", "test", "fused, and answers quoted as now"),
             ("trust_suite_docs_test_headed", "test", "as above, each passage read under its heading"))


def render_docs_loss() -> str:
    """The default model's loss table on the trust suite's docs parts, by the store's retrieval and answer form."""
    rows = ["| part | store searched by, answers | answerable right | wrong kept | lost at retrieval | at judgement | "
            "at reading | at support | gold chunk read | near misses abstained | off-topic abstained |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    runs = []
    for name, part, label in DOCS_LOSS:
        loss = result(name)["figures"]["loss"]["docs"]
        a, nm, off = loss["answerable"], loss["near_miss"], loss.get("off_topic")
        off_topic = f"{off['abstained']}/{off['n']}" if off else "–"
        rows.append(f"| {part} | {label} | {a['right']}/{a['n']} | {a['wrong_kept']} | {a['retrieval']} | "
                    f"{a['judgement']} | {a['reading']} | {a['support']} | {a['gold_read']} | {nm['abstained']}/{nm['n']} | "
                    f"{off_topic} |")
        runs.append(f"`{rel(RESULTS_DIR / (name + '.json'))}`")
    return ("\n".join(rows) + f"\n\nThe default model at its shipped bars, {', '.join(runs)} (summaries of the "
            "suite's records; –: the run asked no off-topic question; measured on "
            + machine(result(DOCS_LOSS[0][0])) + ").")


#: block name -> renderer
BLOCKS: dict[str, Callable[[], str]] = {
    "retrieval_recall": render_retrieval_recall,
    "critique_speed": render_critique_speed,
    "throughput": render_throughput,
    "embeddings": render_embeddings,
    "index_scale": render_index_scale,
    "trust": render_trust,
    "trust_summary": render_trust_summary,
    "project_docs": lambda: render_project_docs(shipped(family("project_docs"))),
    "project_docs_candidates": lambda: render_project_docs(candidates(family("project_docs"))),
    "trust_compare": render_trust_compare,
    "backend_agreement": lambda: render_backend_agreement(shipped(family("backend_agreement"))),
    "backend_agreement_candidates": lambda: render_backend_agreement(candidates(family("backend_agreement"))),
    "model_cost": lambda: render_model_cost(shipped(family("model_cost"))),
    "model_cost_candidates": lambda: render_model_cost(candidates(family("model_cost"))),
    "format_reading": render_format_reading,
    "chat_model_trust": render_chat_model_trust,
    "chat_model_bars": render_chat_model_bars,
    "docs_retrieval": render_docs_retrieval,
    "docs_loss": render_docs_loss,
}


def block_files() -> set[str]:
    """The results files (by name) that the blocks of :data:`BLOCKS` are rendered from."""
    return {*CRITIQUE_FILES, *THROUGHPUT_FILES, "retrieval_recall", "embeddings", "embeddings_ops", "index_scale",
            "trust_suite", DEFAULT_MODEL_TRUST[0], *family("project_docs"), *family("trust_compare_"), *family("backend_agreement"),
            *family("model_cost"), *family("format_reading"), *(name for name, _ in CHAT_MODEL_RUNS),
            "chat_model_bars", *DOCS_RETRIEVAL, *(name for name, _, _ in DOCS_LOSS)}


def figure_spec(spec: str) -> str:
    """``FILE#KEY.PATH[:FORMAT]`` of an inline figure's spec: itself, or what its short key stands for
    (ValueError for an unknown key)."""
    if "#" in spec:
        return spec
    if spec not in FIGURES:
        raise ValueError(f"inline figure {spec!r}: no such key in benchmarks/{FIGURES_FILE.name}")
    return FIGURES[spec]


def inline_figure(spec: str) -> str:
    """The text of one inline figure ``FILE#KEY.PATH[:FORMAT]`` or short key (ValueError when the spec is bad)."""
    file, _, key = figure_spec(spec).partition("#")
    key, _, fmt = key.partition(":")
    path = (ROOT / file).resolve()
    if not key or not any(path.is_relative_to(folder) for folder in SHIPPED):
        raise ValueError(f"inline figure {spec!r}: needs FILE#KEY with FILE under benchmarks/results/ or "
                         "langchain_selfrag/models/")
    value: Any = json.loads(path.read_text())
    parts = key.split(".")
    while parts:
        part = parts.pop(0)
        while isinstance(value, dict) and part not in value and parts:  # a key with a dot: "..._at_0.6"
            part += "." + parts.pop(0)
        try:
            value = value[int(part)] if isinstance(value, list) else value[part]
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"inline figure {spec!r}: {file} has no {key}") from exc
    return format(value, fmt)


def inline_figures(text: str) -> list[re.Match[str]]:
    """The inline figures of a page's text, leaving out those shown as code (in backticks or a fenced block)."""
    fences = [m.span() for m in FENCE.finditer(text)]
    prose = FENCE.sub(lambda m: " " * len(m[0]), text)
    code = fences + [m.span() for m in INLINE_CODE.finditer(prose)]
    return [m for m in INLINE.finditer(text) if not any(start <= m.start() < end for start, end in code)]


def blocks_in(text: str) -> dict[str, str]:
    """The figure blocks of a page's text, name -> body."""
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def check(text: str) -> list[str]:
    """What in a page's text differs from its files (empty when every block and inline figure matches)."""
    found = blocks_in(text)
    problems = [f"unknown figures block {name!r}" for name in found if name not in BLOCKS]
    for name, body in found.items():
        if name in BLOCKS and body != (want := BLOCKS[name]()):
            diff = next((i for i, (a, b) in enumerate(zip(body, want)) if a != b), min(len(body), len(want)))
            near = slice(max(0, diff - 40), diff + 40)
            problems.append(f"figures:{name} differs from its files at character {diff}: the page has "
                            f"{body[near]!r}, the files give {want[near]!r}")
    for m in inline_figures(text):
        try:
            want = inline_figure(m["spec"])
        except (OSError, ValueError) as exc:
            problems.append(str(exc))
            continue
        if m["value"] != want:
            problems.append(f"figure {m['spec']}: the page has {m['value']!r}, the file gives {want!r}")
    return problems


def check_pages(texts: Mapping[str, str]) -> list[str]:
    """What differs from its files on any page (page name -> text), each figure outside a block, and each block
    of :data:`BLOCKS` that no page has."""
    problems = [f"{name}: {problem}" for name, text in texts.items()
                for problem in [*check(text), *(f"figure outside a figures block: {x!r}" for x in
                                                ([] if name == rel(LOG) else stray_figures(text)))]]
    placed = {block for text in texts.values() for block in blocks_in(text)}
    problems += [f"no page has a figures:{name} block" for name in BLOCKS if name not in placed]
    return problems


def rendered(text: str) -> str:
    """A page's text with every known block and inline figure re-rendered from its files."""

    def fill(m: re.Match[str]) -> str:
        if m["name"] not in BLOCKS:
            return m[0]
        start, end = m.start("body") - m.start(), m.end("body") - m.start()
        return m[0][:start] + BLOCKS[m["name"]]() + m[0][end:]

    text = BLOCK.sub(fill, text)
    out, last = [], 0
    for m in inline_figures(text):
        out += [text[last:m.start()], m[0].replace(f"-->{m['value']}<!--", f"-->{inline_figure(m['spec'])}<!--", 1)]
        last = m.end()
    return "".join([*out, text[last:]])


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
    group.add_argument("--check", action="store_true", help="exit 1 when a page differs from its files")
    group.add_argument("--write", action="store_true", help="re-render the figures of every page")
    parser.add_argument("--page", action="append", help="only this page (repeatable; default: every page)")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.page] if args.page else pages()
    texts = {rel(p.resolve()) if p.resolve().is_relative_to(ROOT) else str(p): p.read_text() for p in paths}
    if args.write:
        for path, (name, text) in zip(paths, texts.items()):
            new = rendered(text)
            if new != text:
                path.write_text(new)
            print(f"{name}: {'updated' if new != text else 'already up to date'}")
        return 0
    problems = check_pages(texts)
    if args.page:  # a block may stand on a page that was not asked for
        problems = [p for p in problems if not p.startswith("no page has")]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
