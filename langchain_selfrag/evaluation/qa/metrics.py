"""Evaluation metrics as pure functions of predictions and gold data.

Answer metrics follow the SQuAD normalisation (lower case, no punctuation, no articles, single
spaces). ``match`` is the Self-RAG paper's short-form metric: a prediction is correct when any
gold answer occurs in it. Aggregates return ``None`` when nothing could be measured, so a report
never shows a made-up 0.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation and articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when any (normalised, non-empty) gold answer is a substring of the normalised prediction.

    As in the paper (plain substring containment), but after SQuAD normalisation of both sides.
    """
    pred = normalize_answer(prediction)
    return float(any((g := normalize_answer(gold)) and g in pred for gold in golds))


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """Max exact match over gold answers; with no gold answers, 1.0 iff the prediction is empty."""
    pred = normalize_answer(prediction)
    if not golds:
        return float(pred == "")
    return max(float(pred == normalize_answer(g)) for g in golds)


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token-level F1 of one prediction against one gold answer."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


#: Token F1 with a gold sentence at which an answer reads as that sentence: an explanation, not a span
#: (``benchmarks/project_docs.py`` and the trust suite's how-to, explanation and instruction questions).
EXPLAINED_F1 = 0.5


def explanation_f1(prediction: str, sentences: Sequence[str], *, together: bool = True) -> float:
    """Token F1 of an answer with the gold sentences that explain: the best over each sentence alone and,
    with ``together`` and several sentences, over all of them joined in their order (an answer may give
    them all). 0.0 without sentences."""
    golds = [s for s in sentences if s.strip()]
    if together and len(golds) > 1:
        golds.append(" ".join(golds))
    return max((token_f1(prediction, s) for s in golds), default=0.0)


def f1(prediction: str, golds: Sequence[str]) -> float:
    """Max token F1 over gold answers; with no gold answers, 1.0 iff the prediction is empty."""
    if not golds:
        return float(normalize_answer(prediction) == "")
    return max(token_f1(prediction, g) for g in golds)


_LABEL_PREFIX = re.compile(r"^\W*\(?([A-Za-z0-9])\)?(?:[\s:.)\-]|$)")


def choose_option(prediction: str, options: Mapping[str, str]) -> str | None:
    """Map a free-text prediction to an option label (None when it names none).

    In order: the option whose text the prediction contains (longest first), then a leading
    label (``"B"``, ``"(B)"``, ``"B: ..."``), then the option with the best token F1 above 0.
    Text comes first so that an answer like "A blue whale" is not read as label A.
    """
    text = prediction.strip()
    norm = f" {normalize_answer(text)} "
    for label, option in sorted(options.items(), key=lambda kv: -len(kv[1])):
        o = normalize_answer(option)
        if o and f" {o} " in norm:
            return label
    found = _LABEL_PREFIX.match(text)
    if found:
        for label in options:
            if label.upper() == found.group(1).upper():
                return label
    best, best_f1 = None, 0.0
    for label, option in options.items():
        score = token_f1(text, option)
        if score > best_f1:
            best, best_f1 = label, score
    return best


def accuracy(predicted: Sequence[str | None], gold: Sequence[str]) -> float | None:
    """Fraction of closed-set predictions equal to the gold label."""
    if len(predicted) != len(gold):
        raise ValueError("predicted and gold must have the same length")
    if not gold:
        return None
    return sum(p is not None and p == g for p, g in zip(predicted, gold)) / len(gold)


def abstention_precision_recall(
    abstained: Sequence[bool], answerable: Sequence[bool]
) -> tuple[float | None, float | None]:
    """Precision: abstentions on unanswerable questions / abstentions.
    Recall: unanswerable questions abstained on / unanswerable questions."""
    if len(abstained) != len(answerable):
        raise ValueError("abstained and answerable must have the same length")
    hits = sum(a and not ok for a, ok in zip(abstained, answerable))
    n_abstained = sum(bool(a) for a in abstained)
    n_unanswerable = sum(not ok for ok in answerable)
    precision = hits / n_abstained if n_abstained else None
    recall = hits / n_unanswerable if n_unanswerable else None
    return precision, recall


def retrieval_frequency(retrieved: Sequence[bool]) -> float | None:
    """Fraction of queries for which retrieval happened."""
    return sum(bool(r) for r in retrieved) / len(retrieved) if retrieved else None


def citation_scores_issup(
    segments: Sequence[Sequence[tuple[bool, float | None]]], threshold: float = 0.5
) -> tuple[float | None, float | None]:
    """Citation precision and recall judged by the model's own IsSup.

    ``segments`` holds, per answered query, one ``(cited, issup)`` pair per answer segment.
    A segment counts as supported by its citation when it cites a passage and its IsSup score
    is at least ``threshold`` (1 = fully, 0.5 = partially supported). Recall: supported segments
    / segments, averaged over queries. Precision: supported citations / citations, averaged over
    queries with at least one citation.
    """
    recalls, precisions = [], []
    for query in segments:
        if not query:
            continue
        supported = [cited and s is not None and s >= threshold for cited, s in query]
        recalls.append(sum(supported) / len(query))
        n_cited = sum(bool(cited) for cited, _ in query)
        if n_cited:
            precisions.append(sum(supported) / n_cited)
    return mean(precisions), mean(recalls)


def citation_scores_gold(
    cited_texts: Sequence[Sequence[str]], golds: Sequence[Sequence[str]]
) -> tuple[float | None, float | None]:
    """Citation precision and recall judged by gold answers.

    Per answered query with gold answers: a cited passage supports the answer when it contains a
    gold answer (normalised). Precision: supporting citations / citations (queries with
    citations). Recall: share of queries with at least one supporting citation.
    """
    if len(cited_texts) != len(golds):
        raise ValueError("cited_texts and golds must have the same length")
    recalls, precisions = [], []
    for texts, gold in zip(cited_texts, golds):
        if not gold:
            continue
        hits = [match(t, gold) for t in texts]
        recalls.append(float(any(hits)))
        if texts:
            precisions.append(sum(hits) / len(texts))
    return mean(precisions), mean(recalls)


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation, like ``numpy.percentile``."""
    data = sorted(values)
    if not data:
        return None
    if not 0 <= q <= 100:
        raise ValueError("q must lie in [0, 100]")
    pos = (len(data) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def latency_summary(seconds: Sequence[float]) -> dict[str, float | None]:
    """Mean, median and 95th percentile of per-query latencies in seconds."""
    return {
        "latency_mean_s": mean(seconds),
        "latency_p50_s": percentile(seconds, 50),
        "latency_p95_s": percentile(seconds, 95),
    }


def mean(values: Iterable[float]) -> float | None:
    data = list(values)
    return sum(data) / len(data) if data else None
