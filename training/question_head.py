"""Question head: a frozen chat model that replies to Self-RAG's questions with the 15 reflection tokens.

A chat model asked "Does the passage state the answer to the question? Answer Yes or No." in its own
layout already judges well untrained (Qwen2.5-Coder-1.5B: near misses of package documentation at AUC
0.84-0.90). This makes that a Self-RAG model of the ``chatml-questions`` layout
(:class:`~langchain_selfrag.lm.question_layout.QuestionLayoutLM`) without changing the base:

* every reflection token gets the output row of the word its group's question is answered with
  (``[Retrieval]`` / ``[Relevant]`` / ``[Fully supported]``: ``Yes``; ``[Utility:4]``: ``4``; ...),
  so untrained it reads exactly as the chat model's words do;
* IsRel is then fitted: a logistic head on the final hidden state at the IsRel question's last token
  (:mod:`training.relevance_head`: labelled pairs of a Self-RAG training file, starting from the
  ``Yes`` minus ``No`` direction) becomes ``[Relevant]`` minus ``[Irrelevant]``; its bias rides on the
  direction every final hidden state shares (their mean), which a row can hold and a bias cannot
  (:func:`without_bias`).

The tokens are replies, never answer text: :class:`~langchain_selfrag.lm.question_layout.QuestionLayoutLM`
bans them while the model writes (a row that copies ``Yes`` would otherwise tie with it).

The result is a PEFT trainable-tokens adapter (token rows only) recording the ``chatml-questions``
layout, which the GGUF merge (``langchain_selfrag.bundled.build_gguf``) and transformers take.
The features are the relevance head's, cached by prompt: a stopped run resumes, a new draw reuses them.

Example::

    python -m training.question_head --base-model qwen2.5-coder-1.5b-instruct \\
        --train-file runs/qwen/data/all.jsonl --output-dir runs/qhead/q15 --limit 400
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from .core.config import META_FILE, TrainingError


def shared_direction(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The unit direction of the mean final hidden state, and every row's projection on it."""
    mean = h.astype(np.float64).mean(0)
    unit = mean / np.linalg.norm(mean)
    return unit, h.astype(np.float64) @ unit


def without_bias(h: np.ndarray, labels: np.ndarray, weights: np.ndarray, bias: float, unit: np.ndarray,
                 *, iters: int = 50) -> np.ndarray:
    """Weights with no bias that score the pairs as well as ``weights · h + bias``: ``a * weights + c * unit``,
    ``a`` and ``c`` refitted by logistic regression on ``h`` (starting from ``a = 1`` and ``c`` the bias
    over the mean projection on ``unit``). A row can hold this; an output matrix has no bias."""
    h = h.astype(np.float64)
    x = np.stack([h @ weights.astype(np.float64), h @ unit], axis=1)
    y = labels.astype(np.float64)
    ac = np.array([1.0, bias / float(x[:, 1].mean())])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-(x @ ac)))
        grad = x.T @ (p - y) / len(y)
        hess = (x * (p * (1 - p))[:, None]).T @ x / len(y) + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        ac -= step
        if np.abs(step).max() < 1e-10:
            break
    return ac[0] * weights.astype(np.float64) + ac[1] * unit


def reflection_rows(word_rows: Mapping[str, np.ndarray], isrel_weights: np.ndarray | None,
                    dim: int, *, retrieve_weights: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The output row of each reflection token (:data:`langchain_selfrag.tokens.REFLECTION_TOKENS`).

    ``word_rows``: the base's output row of the word each token answers with (tokens without one, the
    evidence delimiters and ``[Continue to Use Evidence]``, get zeros). ``isrel_weights``: the fitted
    ``[Relevant]`` minus ``[Irrelevant]`` (None keeps the words' rows); ``retrieve_weights`` the same for
    ``[Retrieval]`` minus ``[No Retrieval]``. ``dim``: the rows' width.
    """
    from langchain_selfrag import tokens as T

    rows = {tok: np.asarray(word_rows.get(tok, np.zeros(dim)), dtype=np.float64) for tok in T.REFLECTION_TOKENS}
    for (yes, no), weights in (((T.RELEVANT, T.IRRELEVANT), isrel_weights),
                               ((T.RETRIEVAL, T.NO_RETRIEVAL), retrieve_weights)):
        if weights is not None:
            half = (np.asarray(weights, dtype=np.float64) - (rows[yes] - rows[no])) / 2
            rows[yes], rows[no] = rows[yes] + half, rows[no] - half
    return rows


def retrieve_questions(rows: Iterable[Mapping], n: int, *, seed: int = 0) -> list[dict]:
    """``n`` questions of a Self-RAG training file labelled ``[No Retrieval]`` (label 0) and ``n`` labelled
    ``[Retrieval]`` (label 1), each question once, drawn at random; fewer where the file has fewer."""
    from langchain_selfrag import tokens as T

    by_label: dict[int, dict[str, dict]] = {0: {}, 1: {}}
    for row in rows:
        output, question = str(row.get("output", "")), str(row.get("instruction", ""))
        label = 1 if output.startswith(T.RETRIEVAL) else 0 if output.startswith(T.NO_RETRIEVAL) else None
        if label is not None and question.strip():
            by_label[label].setdefault(question, {"question": question, "title": "", "passage": "", "label": label,
                                                  "variant": str(row.get("variant") or "unnamed")})
    rng = random.Random(seed)
    drawn = []
    for label in (0, 1):
        questions = list(by_label[label].values())
        rng.shuffle(questions)
        drawn += questions[:n]
    return drawn


def retrieve_prompt(turn) -> str:
    """The Retrieve question about ``turn`` as the ``chatml-questions`` layout asks it, rendered in the chat layout."""
    from langchain_selfrag import tokens as T
    from langchain_selfrag.questions import ReflectionQuestions, in_chatml

    return in_chatml(ReflectionQuestions().ask(T.Kind.RETRIEVE, turn))


def fit_retrieve(states, train_file: str, out: Path, n: int, *, seed: int,
                 direction: np.ndarray) -> tuple[np.ndarray, dict]:
    """``[Retrieval]`` minus ``[No Retrieval]`` fitted on the base's final hidden state (``states``) at the Retrieve
    question of ``n`` + ``n`` labelled questions (features cached under ``out/retrieve_features``), starting from
    ``direction`` (the words' rows' difference), its bias folded onto their shared direction; and the fit's report
    (untrained and cross-validated AUC)."""
    from .core.jsonl import read_jsonl
    from .relevance_head import auc, extract, fit_head

    pairs = retrieve_questions(read_jsonl(train_file), n, seed=seed)
    labels = np.array([p["label"] for p in pairs])
    if labels.min() == labels.max():
        raise TrainingError(f"{train_file}: the Retrieve fit needs questions labelled [Retrieval] and [No Retrieval]")
    h = extract(states, retrieve_prompt, pairs, out / "retrieve_features")
    weights, bias, report = fit_head(h, labels, [p["question"] for p in pairs], direction, seed=seed)
    folded = without_bias(h, labels, weights, bias, shared_direction(h)[0])
    held_out = report.pop("held_out_scores")
    report |= {"questions": {"no_retrieval": int((labels == 0).sum()), "retrieval": int((labels == 1).sum())},
               "held_out_auc": round(auc(labels, held_out), 4), "folded_auc": round(auc(labels, h @ folded), 4)}
    return folded, report


def answer_word_ids(tokenize, words: Mapping[str, str]) -> dict[str, int]:
    """The base's first token id of each reflection token's answer word (``tokenize(text) -> ids``)."""
    out = {}
    for tok, word in words.items():
        ids = tokenize(word)
        if not ids:
            raise TrainingError(f"the answer word {word!r} of {tok} is no token of the base")
        out[tok] = ids[0]
    return out


def _vocab_matrices(path: Path):
    """The GGUF's output matrix and its embedding, or (tied) the embedding and None."""
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    if "token_embd.weight" not in tensors:
        raise TrainingError(f"{path} has no token_embd.weight")
    if "output.weight" in tensors:
        return tensors["output.weight"], tensors["token_embd.weight"]
    return tensors["token_embd.weight"], None


def _rows(matrix, ids: Sequence[int]) -> np.ndarray:
    from gguf.quants import dequantize

    return dequantize(np.asarray(matrix.data[list(ids)]), matrix.tensor_type).astype(np.float64)


def write_rows_adapter(folder: Path, token_ids: Sequence[int], head_rows: np.ndarray, embed_rows: np.ndarray | None) -> None:
    """A PEFT trainable-tokens adapter, torch-free: the ``lm_head`` and ``embed_tokens`` rows of ``token_ids``,
    or (``embed_rows`` None: tied embeddings) the ``embed_tokens`` rows alone, which are then ``head_rows``."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {"base_model.model.model.embed_tokens.trainable_tokens_delta":
               np.ascontiguousarray(head_rows if embed_rows is None else embed_rows, np.float32)}
    if embed_rows is not None:
        tensors["base_model.model.lm_head.trainable_tokens_delta"] = np.ascontiguousarray(head_rows, np.float32)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    modules = ["embed_tokens"] if embed_rows is None else ["embed_tokens", "lm_head"]
    config = {"peft_type": "TRAINABLE_TOKENS", "task_type": None, "target_modules": modules,
              "token_indices": [int(i) for i in token_ids], "init_weights": True, "inference_mode": True,
              "base_model_name_or_path": None, "revision": None}
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


def train_question_head(base_model: str, train_file: str | None, output_dir: str, *, limit: int = 400, seed: int = 0,
                        threads: int | None = None, fit_isrel: bool = True, retrieve: int = 0) -> dict:
    """Fit the IsRel head (features cached under ``output_dir``; none with ``fit_isrel=False``) and, with
    ``retrieve`` > 0, Retrieve on that many questions of each label; write the adapter to
    ``output_dir/adapter``; returns its metadata."""
    from langchain_selfrag import tokens as T
    from langchain_selfrag.bundled.bases import is_base_name
    from langchain_selfrag.graph.context import model_path
    from langchain_selfrag.prompt_layouts import CHATML_QUESTIONS, CONFIG_KEY
    from langchain_selfrag.questions import ReflectionQuestions

    from .core.hidden_states import LlamaCppHiddenStates
    from .core.relevance_head import RelevanceHead
    from .relevance_head import isrel_prompt, load_features, train_relevance_head

    started = time.monotonic()
    out = Path(output_dir)
    path = Path(model_path(base_model))
    fitted: dict = {}
    if fit_isrel:  # the features serve the fit alone: an untrained IsRel (the base's own Yes / No) needs none
        report = train_relevance_head(base_model, train_file, str(out), limit=limit, seed=seed, threads=threads)
        head = RelevanceHead.load(out / "relevance_head.json")
        pairs = [json.loads(line) for line in (out / "pairs.jsonl").read_text(encoding="utf-8").splitlines()]
        h = load_features(out / "features", isrel_prompt, pairs)
        unit, projection = shared_direction(h)
        labels = np.array([p["label"] for p in pairs])
        fitted = {"folded": without_bias(h, labels, head.weights, head.bias, unit), "head": head, "h": h,
                  "labels": labels, "projection": projection, "report": report}

    words = {tok: word for group in ReflectionQuestions().answer_words.values() for word, tok in group.items()}
    if retrieve > 0 and not train_file:
        raise TrainingError("the Retrieve fit reads its questions from a training file")
    output, embedding = _vocab_matrices(path)
    n_vocab = int(output.data.shape[0])
    retrieve_weights, retrieve_report = None, None
    states = LlamaCppHiddenStates(path, n_threads=threads)
    try:
        word_ids = answer_word_ids(lambda text: states.tokenize(text, add_bos=False), words)
        newline = states.tokenize("\n", add_bos=False)
        word_rows = dict(zip(word_ids, _rows(output, list(word_ids.values()))))
        if retrieve > 0:
            retrieve_weights, retrieve_report = fit_retrieve(
                states, train_file, out, retrieve, seed=seed,
                direction=word_rows[T.RETRIEVAL] - word_rows[T.NO_RETRIEVAL])
    finally:
        states.close()
    dim = next(iter(word_rows.values())).shape[0]
    rows = reflection_rows(word_rows, fitted.get("folded"), dim, retrieve_weights=retrieve_weights)
    token_ids = {tok: n_vocab + i for i, tok in enumerate(T.REFLECTION_TOKENS)}
    # untied: the input rows are a line break's, never read (the tokens are replies, not context)
    embed = None if embedding is None else np.repeat(_rows(embedding, newline[:1]), len(token_ids), axis=0)
    adapter = out / "adapter"
    write_rows_adapter(adapter, list(token_ids.values()), np.stack([rows[t] for t in token_ids]), embed)

    meta = {
        "base_model": base_model if is_base_name(base_model) else str(path.resolve()),
        "method": "question_head",
        CONFIG_KEY: CHATML_QUESTIONS,
        "reflection_token_ids": token_ids,
        "answer_words": {tok: words[tok] for tok in words},
        "isrel_fitted": bool(fit_isrel),
        "retrieve_fitted": retrieve_report is not None,
    }
    if retrieve_report is not None:
        meta["retrieve"] = retrieve_report
    if fitted:
        h, head, labels, projection = fitted["h"], fitted["head"], fitted["labels"], fitted["projection"]
        scores = {"head": h @ head.weights + head.bias, "rows": h @ (rows[T.RELEVANT] - rows[T.IRRELEVANT])}
        meta |= {"shared_direction": {"mean_projection": round(float(projection.mean()), 4),
                                      "min_over_mean": round(float(projection.min() / projection.mean()), 4),
                                      "max_over_mean": round(float(projection.max() / projection.mean()), 4)},
                 "in_sample_log_loss": {k: round(_log_loss(labels, s), 4) for k, s in scores.items()},
                 "relevance_head": fitted["report"]}
    meta["seconds"] = round(time.monotonic() - started, 1)
    (adapter / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def _log_loss(labels: np.ndarray, logits: np.ndarray) -> float:
    p = np.clip(1 / (1 + np.exp(-logits)), 1e-9, 1 - 1e-9)
    return float(-(labels * np.log(p) + (1 - labels) * np.log(1 - p)).mean())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.question_head", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-model", required=True, help="a known base's name or a GGUF path (a chat model)")
    ap.add_argument("--train-file", help="Self-RAG training JSONL with IsRel labels (not read with --untrained)")
    ap.add_argument("--output-dir", required=True, help="features, relevance_head.json and adapter/ go here")
    ap.add_argument("--limit", type=int, default=400, help="labelled IsRel pairs (default 400)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--fit-retrieve", type=int, default=0, metavar="N",
                    help="also fit Retrieve on N [No Retrieval] and N [Retrieval] questions of --train-file "
                         "(default 0: the answer words' rows)")
    ap.add_argument("--untrained", action="store_true",
                    help="keep the answer words' rows for IsRel too: no fit, no features (a base trained to judge)")
    args = ap.parse_args(argv)
    if not args.train_file and (not args.untrained or args.fit_retrieve):
        ap.error("--train-file is required to fit IsRel or Retrieve (--untrained: the base's own Yes / No for IsRel)")
    try:
        meta = train_question_head(args.base_model, args.train_file, args.output_dir, limit=args.limit, seed=args.seed,
                                   threads=args.threads, fit_isrel=not args.untrained, retrieve=args.fit_retrieve)
    except (TrainingError, FileNotFoundError, ValueError) as exc:
        ap.exit(2, f"{ap.prog}: error: {exc}\n")
    print(json.dumps({k: v for k, v in meta.items() if k != "relevance_head"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
