"""Relevance head: teach a frozen chat model when a passage states the answer.

A chat model asked the IsRel question ("Does the passage state the answer to the question?",
:class:`~langchain_selfrag.questions.ReflectionQuestions`) gives its ``Yes`` share as IsRel. Untrained,
Qwen2.5-Coder-1.5B says Yes to many of SQuAD 2.0's unanswerable questions, which swap one name or date
of a question the passage does answer. Here the model stays frozen: its final hidden state at the
question's last token
(the vector its ``Yes`` and ``No`` logits are read from) is computed once per labelled
(question, passage) pair, and a logistic head is fitted to it, starting from the untrained judge's own
direction (``Yes`` row minus ``No`` row), which stays unpenalised. The pairs are the IsRel labels of a
Self-RAG training file (``[Retrieval]<paragraph>title\\npassage</paragraph>[Relevant]``), sampled by
variant. Features are cached by prompt, so an interrupted run resumes and a new draw reuses them.

Example::

    python -m training.relevance_head --judge-model qwen2.5-coder-1.5b-instruct \\
        --train-file runs/qwen/data/all.jsonl --output-dir runs/relevance-head --limit 1200
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from langchain_selfrag import tokens as T
from langchain_selfrag.questions import ReflectionQuestions, Turn, in_chatml

from .core.config import TrainingError
from .core.relevance_head import RelevanceHead

_EVIDENCE = re.compile(r"\[Retrieval\]<paragraph>(.*?)</paragraph>(\[Relevant\]|\[Irrelevant\])", re.S)

#: How often each variant of the Self-RAG training file is drawn (relative; others: 1). The pairs that
#: look answerable and are not (SQuAD 2.0's unanswerable questions, documentation near misses) and
#: their answerable twins come first.
VARIANT_WEIGHTS: Mapping[str, float] = {
    "squad_unanswerable_more": 3.0, "squad_unanswerable": 1.5, "squad_pair_relevant": 2.5,
    "doc_near_miss": 2.0, "doc_relevant": 2.0, "gap_stated": 1.0, "gap_unstated": 1.0,
    "doc_other_document": 0.5, "doc_explain": 0.5, "doc_explain_same_document": 0.3, "off_topic": 0.5,
    "issup_negative": 0.5, "retrieval": 0.5, "squad_relevant_sentence": 0.3,
}


def judge_pairs(rows: Iterable[Mapping], *, seed: int = 0,
                weights: Mapping[str, float] = VARIANT_WEIGHTS) -> list[dict]:
    """(question, title, passage, label, variant) of each IsRel label in Self-RAG training rows, in a
    weighted random order (any prefix is a sample drawn by ``weights``); label 1 is ``[Relevant]``."""
    rng = random.Random(seed)
    pairs = []
    for row in rows:
        for match in _EVIDENCE.finditer(row.get("output", "")):
            title, _, passage = match.group(1).partition("\n")
            variant = row.get("variant") or "unnamed"
            weight = weights.get(variant, 1.0)
            if weight <= 0 or not passage.strip():
                continue
            key = -math.log(1.0 - rng.random()) / weight  # Efraimidis-Spirakis: smaller keys first
            pairs.append({"question": row["instruction"], "title": title, "passage": passage,
                          "label": int(match.group(2) == "[Relevant]"), "variant": variant, "_key": key})
    pairs.sort(key=lambda p: p.pop("_key"))
    return pairs


def _feature_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def cached_features(folder: Path) -> dict[str, np.ndarray]:
    """Every hidden state cached under ``folder``, by the hash of its prompt's text (a chunk ``NNNNNN.npy``
    counts once its ``NNNNNN.keys.json`` is written beside it)."""
    rows: dict[str, np.ndarray] = {}
    for keys_path in sorted(folder.glob("*.keys.json")):
        block = np.load(keys_path.with_name(keys_path.name.removesuffix(".keys.json") + ".npy"))
        keys = json.loads(keys_path.read_text(encoding="utf-8"))
        if len(keys) == len(block):
            rows.update(zip(keys, block))
    return rows


def pair_turn(pair: Mapping) -> Turn:
    """The turn a labelled (question, title, passage) pair asks about: nothing written yet."""
    return Turn(pair["question"], "", pair.get("title") or None, pair["passage"])


def isrel_prompt(turn: Turn, questions: ReflectionQuestions | None = None) -> str:
    """The IsRel question about ``turn`` in ChatML, byte for byte as a chat model of this package's backends
    (``selfrag-qwen2.5-coder-1.5b`` among them) is asked it."""
    return in_chatml((questions or ReflectionQuestions()).ask(T.Kind.ISREL, turn))


def isrel_words(questions: ReflectionQuestions) -> tuple[str, str]:
    """The words that answer the IsRel question: (relevant, irrelevant)."""
    by_token = {tok: word for word, tok in questions.answer_words[T.Kind.ISREL].items()}
    return by_token[T.RELEVANT], by_token[T.IRRELEVANT]


def pair_prompts(prompt, pairs: Sequence[Mapping]) -> list[str]:
    """The prompt (``prompt(turn)``: :func:`isrel_prompt`, say) of each (question, title, passage) pair."""
    return [prompt(pair_turn(p)) for p in pairs]


def extract(states, prompt, pairs: Sequence[Mapping], folder: Path, *, chunk: int = 50) -> np.ndarray:
    """Hidden states of the prompt of each pair. They are cached in chunk files under ``folder`` by
    the prompt's text, so a stopped run resumes and a run drawing other pairs computes only the new ones."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = pair_prompts(prompt, pairs)
    keys = [_feature_key(t) for t in texts]
    rows = cached_features(folder)
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    missing = [i for key, i in first.items() if key not in rows]  # each uncached prompt once
    started, done = time.monotonic(), 0
    n_files = len(list(folder.glob("*.keys.json")))
    for start in range(0, len(missing), chunk):
        part = missing[start : start + chunk]
        block = states.last_hidden([texts[i] for i in part])
        name = f"{n_files:06d}"
        np.save(folder / f"{name}.npy", block)
        (folder / f"{name}.keys.json").write_text(json.dumps([keys[i] for i in part]), encoding="utf-8")
        rows.update((keys[i], row) for i, row in zip(part, block))
        n_files, done = n_files + 1, done + len(part)
        rate = done / (time.monotonic() - started)
        print(f"features {done}/{len(missing)} new ({rate:.2f} pairs/s; {len(pairs) - len(missing)} cached)",
              file=sys.stderr, flush=True)
    return np.stack([rows[k] for k in keys]) if keys else np.zeros((0, 0), dtype=np.float32)


def load_features(folder: Path, prompt, pairs: Sequence[Mapping]) -> np.ndarray:
    """The cached hidden states of ``pairs`` (:func:`extract` computed them); a clear error for any missing."""
    rows = cached_features(folder)
    keys = [_feature_key(t) for t in pair_prompts(prompt, pairs)]
    missing = sum(k not in rows for k in keys)
    if missing:
        raise TrainingError(f"{missing} of {len(keys)} pairs have no features under {folder}: run the extraction")
    return np.stack([rows[k] for k in keys])


def answer_direction(model_path: Path, yes_id: int, no_id: int) -> np.ndarray:
    """The output matrix's ``Yes`` row minus its ``No`` row, read from the GGUF (the untrained judge's
    log-odds are the hidden state times this)."""
    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(str(model_path))
    tensors = {t.name: t for t in reader.tensors}
    matrix = tensors.get("output.weight") or tensors.get("token_embd.weight")
    if matrix is None:
        raise TrainingError(f"{model_path} has no output matrix")
    rows = dequantize(np.asarray(matrix.data[[yes_id, no_id]]), matrix.tensor_type).astype(np.float64)
    return rows[0] - rows[1]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float, *, free: int = 1, iters: int = 50) -> np.ndarray:
    """Weights (bias last) of an L2-penalised logistic regression by Newton steps; the first ``free``
    columns and the bias are not penalised. Mean log loss plus ``l2/2 * |w|^2``."""
    n, d = x.shape
    a = np.hstack([x, np.ones((n, 1))])
    w = np.zeros(d + 1)
    penalty = np.full(d + 1, l2)
    penalty[:free] = 0.0
    penalty[-1] = 0.0
    for _ in range(iters):
        p = _sigmoid(a @ w)
        grad = a.T @ (p - y) / n + penalty * w
        hess = (a * (p * (1 - p))[:, None]).T @ a / n + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties count half)."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


def design(h: np.ndarray, direction: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Columns of the fit: the untrained judge's log-odds, then the standardised hidden state."""
    return np.hstack([(h @ direction)[:, None], (h - mean) / scale])


def fit_head(h: np.ndarray, labels: np.ndarray, groups: Sequence[str], direction: np.ndarray, *,
             l2_grid: Sequence[float] = (1e-2, 3e-2, 1e-1, 3e-1, 1.0, 3.0, 10.0), folds: int = 5,
             seed: int = 0) -> tuple[np.ndarray, float, dict]:
    """Raw-space weights and bias of the head, the L2 weight chosen by grouped cross-validation (a
    question's pairs stay in one fold) on mean log loss, and the report of that choice."""
    y = labels.astype(np.float64)
    h = h.astype(np.float64)
    mean, scale = h.mean(0), h.std(0) + 1e-6
    x = design(h, direction, mean, scale)
    names = sorted(set(groups))
    random.Random(seed).shuffle(names)
    fold_of = {g: i % folds for i, g in enumerate(names)}
    fold = np.array([fold_of[g] for g in groups])
    report: dict = {"untrained_auc": auc(labels, x[:, 0]), "cv": {}}
    best = None
    held_out: dict[float, np.ndarray] = {}
    for l2 in l2_grid:
        scores = np.zeros(len(y))
        for k in range(folds):
            train, test = fold != k, fold == k
            w = fit_logistic(x[train], y[train], l2)
            scores[test] = np.hstack([x[test], np.ones((test.sum(), 1))]) @ w
        held_out[l2] = scores
        p = np.clip(_sigmoid(scores), 1e-6, 1 - 1e-6)
        loss = float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
        report["cv"][str(l2)] = {"log_loss": round(loss, 4), "auc": round(auc(labels, scores), 4)}
        if best is None or loss < best[1]:
            best = (l2, loss)
    l2 = best[0]
    w = fit_logistic(x, y, l2)
    weights = w[0] * direction + w[1:-1] / scale
    bias = float(w[-1] - (w[1:-1] / scale) @ mean)
    report["l2"] = l2
    report["held_out_scores"] = held_out[l2]
    return weights, bias, report


#: Pairs that look alike and differ in whether the passage states the answer: (relevant variants,
#: irrelevant variants) of the Self-RAG training file, reported apart.
CONTRASTS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "squad_unanswerable": (("squad_pair_relevant", "squad_relevant", "isrel_positive"),
                           ("squad_unanswerable_more", "squad_unanswerable")),
    "doc_near_miss": (("doc_relevant", "doc_explain"), ("doc_near_miss", "doc_same_document", "doc_explain_same_document")),
    "invented_gap": (("gap_stated",), ("gap_unstated",)),
}


def contrast_scores(variants: Sequence[str], labels: np.ndarray, scores: Mapping[str, np.ndarray]) -> dict:
    """AUC of each named scoring on each of :data:`CONTRASTS` whose two sides the pairs hold."""
    variants = np.asarray(variants)
    out = {}
    for name, (yes, no) in CONTRASTS.items():
        keep = np.isin(variants, yes + no)
        if keep.sum() and len(set(labels[keep])) == 2:
            out[name] = {"pairs": int(keep.sum())} | {k: round(auc(labels[keep], s[keep]), 4) for k, s in scores.items()}
    return out


def contrast_aucs(variants: Sequence[str], labels: np.ndarray, untrained: np.ndarray, trained: np.ndarray) -> dict:
    """AUC of the untrained judge and of the head (held-out scores) on each of :data:`CONTRASTS`."""
    return contrast_scores(variants, labels, {"untrained_auc": untrained, "head_auc": trained})


def train_relevance_head(judge_model: str, train_file: str, output_dir: str, *, limit: int = 1200, seed: int = 0,
                         threads: int | None = None, extract_only: bool = False) -> dict:
    """Extract (or resume), fit and write ``relevance_head.json`` under ``output_dir``; returns its report."""
    from langchain_selfrag.graph.context import model_path
    from langchain_selfrag.jsonl import iter_jsonl
    from langchain_selfrag.bundled.bases import is_base_name
    from langchain_selfrag.bundled.parts import file_sha256

    from .core.hidden_states import LlamaCppHiddenStates

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = Path(model_path(judge_model))
    pairs = judge_pairs((r for _, r in iter_jsonl(train_file)), seed=seed)[:limit]
    if not pairs:
        raise TrainingError(f"{train_file} holds no [Retrieval]<paragraph>...</paragraph>[Relevant|Irrelevant] labels")
    (out / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    questions = ReflectionQuestions()
    states = LlamaCppHiddenStates(path, n_threads=threads)
    h = extract(states, isrel_prompt, pairs, out / "features")
    if extract_only:
        return {"pairs": len(pairs)}
    yes, no = isrel_words(questions)
    yes_id, no_id = (states.tokenize(w, add_bos=False) for w in (yes, no))
    if len(yes_id) != 1 or len(no_id) != 1:
        raise TrainingError(f"{yes!r} / {no!r} are not single tokens of {path.name}")
    direction = answer_direction(path, yes_id[0], no_id[0])
    labels = np.array([p["label"] for p in pairs])
    weights, bias, report = fit_head(h, labels, [p["question"] for p in pairs], direction, seed=seed)
    held_out = report.pop("held_out_scores")
    report["contrasts"] = contrast_aucs([p["variant"] for p in pairs], labels, h.astype(np.float64) @ direction, held_out)
    report.update(pairs=len(pairs), variants=dict(Counter(p["variant"] for p in pairs)),
                  relevant=int(labels.sum()), train_file=str(train_file))
    head = RelevanceHead(weights=weights.astype(np.float32), bias=bias, model_sha256=file_sha256(path),
                         model_name=judge_model if is_base_name(judge_model) else str(path.resolve()), ask=questions.isrel, system=questions.system, report=report)
    head.save(out / "relevance_head.json")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.relevance_head", description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge-model", required=True, help="a bundled model's name or a GGUF path")
    parser.add_argument("--train-file", required=True, help="Self-RAG training JSONL with IsRel labels")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--limit", type=int, default=1200, help="labelled pairs to use (default 1200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--extract-only", action="store_true", help="compute and cache the features, fit nothing")
    args = parser.parse_args(argv)
    try:
        report = train_relevance_head(args.judge_model, args.train_file, args.output_dir, limit=args.limit,
                                      seed=args.seed, threads=args.threads, extract_only=args.extract_only)
    except (TrainingError, FileNotFoundError, ValueError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
