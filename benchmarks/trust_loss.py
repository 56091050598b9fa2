"""Where each answer of the trust suite is lost: pure functions of its records (``trust_suite.py``).

A *gold chunk* of an answerable question is a chunk of its gold document whose text holds a gold
answer (:func:`holds_answer`: the suite's ``match``, SQuAD-normalised containment). Each record
carries the 1-based ranks of the gold chunks among the K passages the chain read
(``gold_ranks_read``: empty when none was read, or no retrieval happened), the rank of the first
among the top :data:`STORE_DEPTH` that a similarity search of the question returns from the same
store (``gold_rank_store``, None when absent), and the abstention bars the run used (``bars``,
``closed_book``). Runs record the ranks as they ask; ``trust_suite.py --summarize-only
--reindex-ranks`` adds them to older records (``reindexed_ranks``).

Each answerable question lands in exactly one bucket of :data:`ANSWERABLE_BUCKETS`, checked in this
order (:func:`loss_bucket`; IsRel "under the bar" means under
:func:`~langchain_selfrag.graph.nodes.abstain.relevance_bar` of the run's bars: ``abstain_isrel``, or
0.5 when that is off, the bar that makes a passage count as relevant):

1. ``right``: answered, a gold answer in the answer (for a how-to, explanation or instruction
   question: its gold sentences, :func:`answer_right`) and its document cited;
2. ``wrong_kept``: answered, not right (a wrong answer kept, whatever went wrong before);
3. ``retrieval``: abstained, and nothing was read (the run chose not to retrieve, or found nothing);
4. ``not_ranked``: abstained, and the record has no gold ranks (none recorded, re-indexed, or the
   re-index did not reproduce what the run read): the stage of the loss is unknown;
5. ``retrieval``: abstained, and no gold chunk among the passages read;
6. ``judgement``: abstained, gold chunks read, and each one's IsRel under the bar (it was not used);
7. ``support``: abstained, and the answer the run chose (before abstaining) was right: IsRel met
   the bar, so the IsSup bar refused it;
8. ``reading``: abstained, and no gold chunk judged relevant (IsRel at the bar) has an answer
   written from it that is right;
9. ``judgement``: abstained, a gold chunk judged relevant has a right answer, but the run chose
   another passage's (the critique ranked it below).

A question of a part whose right outcome is an abstention (near miss, off topic, noise only,
unanswerable) is ``abstained`` or ``wrong_kept`` (:data:`ABSTAIN_BUCKETS`).

:func:`rescored` replays a record at other bars (the graph's own :func:`evidence_reason` through
:func:`~langchain_selfrag.evaluation.qa.abstention.would_abstain`): in the suite's one-round
short-form runs the bars decide only whether the chosen answer is given, never which passages are
read, which answers are written or which one is chosen (no rewriter or fallback retriever, so one
retrieval round; ``write_top`` picks by IsRel, not by the bars). A record whose abstention the new
bars do not change keeps its own answer and citations, so at the run's own bars re-scoring gives
the run back; an answer the new bars let through is taken to cite its passage, as the suite's
``reader_ceiling`` counts it (the chain cites a passage only when the model's IsRel token said
[Relevant]; the records keep no token).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_selfrag.config import SelfRAGConfig
from langchain_selfrag.evaluation.qa import abstention as A
from langchain_selfrag.evaluation.qa.metrics import EXPLAINED_F1, explanation_f1, match
from langchain_selfrag.graph.nodes.abstain import ABSTAIN_ANSWER, relevance_bar

#: How deep the store is searched for the first gold chunk (``gold_rank_store``).
STORE_DEPTH = 20
#: Store ranks the table counts up to (the default k, then deeper).
STORE_CUTS = (5, 10, STORE_DEPTH)
#: The buckets of an answerable question, in table order.
ANSWERABLE_BUCKETS = ("right", "wrong_kept", "retrieval", "judgement", "reading", "support", "not_ranked")
#: The buckets of a question whose right outcome is an abstention.
ABSTAIN_BUCKETS = ("abstained", "wrong_kept")


# --- answers and what they are worth ---------------------------------------------------------------

#: Question types whose answer is an explanation, scored against gold sentences (``sentences``) rather
#: than short answers; a question without ``type`` is a factoid.
EXPLAINING_TYPES = ("howto", "explanation", "instruction")


def question_type(r: Mapping[str, Any]) -> str:
    """The record's question type: ``factoid`` unless it says ``howto``, ``explanation`` or ``instruction``."""
    return str(r.get("type") or "factoid")


def answer_right(r: Mapping[str, Any], answer: str, cited: Iterable[str]) -> bool:
    """The gold document is cited, and for a factoid a gold answer occurs in the answer (SQuAD
    normalisation); for a how-to, explanation or instruction question the answer's token F1 with its
    gold sentences (any one, or all together) is at least :data:`EXPLAINED_F1`, as ``project_docs.py``
    scores an explanation."""
    if question_type(r) in EXPLAINING_TYPES:
        if not r.get("sentences"):
            raise ValueError(f"{question_type(r)} question {r.get('question')!r} has no gold sentences")
        said = explanation_f1(answer or "", r["sentences"]) >= EXPLAINED_F1
    else:
        said = bool(match(answer or "", r.get("answers") or []))
    return said and (r.get("source") is None or r["source"] in set(cited))


def chosen_candidate(r: Mapping[str, Any]) -> Mapping[str, Any] | None:
    chosen = [t for t in r["trace"] if t.get("chosen")]
    return chosen[0] if chosen else None


def would_be_answer(r: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The answer and citations the run gave, or would have given had it not abstained (the chosen
    candidate of the trace)."""
    if not r["abstained"]:
        return r["answer"], r["cited"]
    cand = chosen_candidate(r)
    if cand is None:
        return "", []
    return candidate_given(cand)


def candidate_given(cand: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The answer and citations one candidate of the trace gives: its answer, its passage's source."""
    return A.entry_answer(cand), [cand["source"]] if cand.get("source") else []


# --- gold chunks and their ranks --------------------------------------------------------------------

def holds_answer(source: str | None, text: str, r: Mapping[str, Any]) -> bool:
    """A chunk (its file name and text) holds the question's answer: a gold answer occurs in its text
    and, when the question names its document, it is a chunk of that document (the one a right answer cites)."""
    return bool(match(text, r.get("answers") or [])) and (r.get("source") is None or source == r["source"])


def gold_ranks(chunks: Sequence[tuple[str | None, str]], r: Mapping[str, Any]) -> list[int]:
    """The 1-based ranks of the chunks (``(source, text)``, best first) that hold the answer."""
    return [i + 1 for i, (source, text) in enumerate(chunks) if holds_answer(source, text, r)]


def rank_fields(read: Sequence[tuple[str | None, str]], store: Sequence[tuple[str | None, str]],
                r: Mapping[str, Any]) -> dict[str, Any]:
    """What a record keeps of where its answer was: the gold ranks among the passages read, and the
    first gold rank among the store's top ``STORE_DEPTH`` (``store``, best first)."""
    in_store = gold_ranks(store[:STORE_DEPTH], r)
    return {"gold_ranks_read": gold_ranks(read, r), "gold_rank_store": in_store[0] if in_store else None,
            "store_depth": STORE_DEPTH}


def has_ranks(r: Mapping[str, Any]) -> bool:
    return isinstance(r.get("gold_ranks_read"), list)


def ranks_from(r: Mapping[str, Any]) -> str:
    """Where a record's gold ranks come from: ``run`` (recorded as it asked), ``reindex``, or why it has none."""
    return r.get("ranks_from") or ("run" if has_ranks(r) else "not recorded")


def _same_passage(t: Mapping[str, Any], hit: tuple[str | None, str]) -> bool:
    """The hit can be the passage a trace entry was written from: the same file, and the hit's text
    holds the entry's quoted sentence (an ``answer`` that is not its generated ``text``) when it has one."""
    quoted = str(t.get("answer") or "")
    return hit[0] == t.get("source") and (quoted.strip() == str(t.get("text") or "").strip()
                                          or bool(match(hit[1], [quoted])))


def _reproduced(entries: Sequence[Mapping[str, Any]], hits: Sequence[tuple[str | None, str]]) -> bool:
    """Each trace entry's passage can be the hit at its place (:func:`_same_passage`)."""
    return all(t["passage"] < len(hits) and _same_passage(t, hits[t["passage"]]) for t in entries)


def reindexed_ranks(r: Mapping[str, Any], hits: Sequence[tuple[str | None, str]]) -> dict[str, Any] | None:
    """:func:`rank_fields` of a record from a fresh search of its question (``hits``: the top
    ``STORE_DEPTH`` of a store indexed as the run's was), or None when the search does not reproduce
    what the run read (:func:`_same_passage` fails for a passage of the trace and the hit at its place).
    The passages read are the hits up to the last passage the trace names (none without retrieval)."""
    read = [t for t in r["trace"] if isinstance(t.get("passage"), int)]
    if not _reproduced(read, hits):
        return None
    n_read = 1 + max((t["passage"] for t in read), default=-1)
    return rank_fields(hits[:n_read], hits, r)


def _quoted_by_the_run(t: Mapping[str, Any]) -> bool:
    """The chain quoted this entry's answer, or would have had a sentence held it: an answer was written and
    its passage judged relevant (p([Relevant]) above one half, as ``citations.cites`` reads it)."""
    return bool(str(t.get("text") or "").strip()) and (t.get("answer") != t.get("text") or (t.get("isrel") or 0) > 0.5)


def requoted(r: Mapping[str, Any], hits: Sequence[tuple[str | None, str]],
             quote: Callable[[str, str, str], str]) -> dict[str, Any] | None:
    """The record had each quoted answer of its trace been ``quote(text, passage, question)`` (the answer form
    as the package gives it now), the passages from a fresh search (``hits``, as for :func:`reindexed_ranks`);
    None when that search does not give a quoted entry's passage at its place. Bars, choice and citations stay
    the run's."""
    quoted = {i for i, t in enumerate(r["trace"]) if isinstance(t.get("passage"), int) and _quoted_by_the_run(t)}
    if not _reproduced([r["trace"][i] for i in sorted(quoted)], hits):
        return None
    trace = [{**t, "answer": quote(str(t["text"]), hits[t["passage"]][1], r["question"])} if i in quoted else dict(t)
             for i, t in enumerate(r["trace"])]
    out = {**r, "trace": trace}
    chosen = chosen_candidate(out)
    if not r["abstained"] and chosen is not None:
        out["answer"] = A.entry_answer(chosen)
    return out


# --- buckets --------------------------------------------------------------------------------------------

def loss_bucket(r: Mapping[str, Any]) -> str:
    """The one bucket of a record (the order of checks is the module's docstring)."""
    given = not r["abstained"]
    if r["part"] != "answerable":
        return "wrong_kept" if given else "abstained"
    if given:
        return "right" if answer_right(r, r["answer"], r["cited"]) else "wrong_kept"
    if not any(isinstance(t.get("passage"), int) for t in r["trace"]):
        return "retrieval"  # nothing was read
    if not has_ranks(r):
        return "not_ranked"
    gold_read = {rank - 1 for rank in r["gold_ranks_read"]}
    if not gold_read:
        return "retrieval"
    gold = [t for t in r["trace"] if t.get("passage") in gold_read and not t.get("dropped")]
    bar = relevance_bar(SelfRAGConfig(**r["bars"]))
    relevant = [t for t in gold if (t.get("isrel") or 0.0) >= bar]
    if not relevant:
        return "judgement"
    if answer_right(r, *would_be_answer(r)):
        return "support"
    if not any(answer_right(r, *candidate_given(t)) for t in relevant):
        return "reading"
    return "judgement"


def _abstains_at(r: Mapping[str, Any], isrel: float, issup: float) -> bool:
    return A.would_abstain(r["signals"], isrel, issup, closed_book=bool(r.get("closed_book", True)))


def rescored(r: Mapping[str, Any], isrel: float, issup: float) -> dict[str, Any]:
    """The record had the run used these bars. An answer the new bars let through is the chosen
    candidate's (:func:`would_be_answer`, citing its passage); a record whose abstention does not
    change keeps its own answer and citations."""
    abstains = _abstains_at(r, isrel, issup)
    out = {**r, "bars": {"abstain_isrel": isrel, "abstain_issup": issup}}
    if abstains == bool(r["abstained"]):
        return out
    if abstains:
        return {**out, "abstained": True, "answer": ABSTAIN_ANSWER, "cited": [],
                "reason": f"re-scored at IsRel >= {isrel:g}, IsSup >= {issup:g}"}
    answer, cited = would_be_answer(r)
    return {**out, "abstained": False, "answer": answer, "cited": cited, "reason": None}


def replay_misses(records: Sequence[Mapping[str, Any]]) -> int:
    """The records whose abstention the replay at their own bars does not reproduce (0 when
    :func:`rescored` replays the chain's rule faithfully on them)."""
    return sum(_abstains_at(r, r["bars"]["abstain_isrel"], r["bars"]["abstain_issup"]) != bool(r["abstained"])
               for r in records)


def _rank_columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Over the answerable questions whose records have gold ranks (``ranked``): how many had a gold
    chunk among the passages read (``gold_read``), and per cut of :data:`STORE_CUTS` how many the store
    ranks there or higher (``store``); None where no record has them (never guessed)."""
    ranked = [r for r in rows if has_ranks(r)]
    in_store = [r.get("gold_rank_store") for r in ranked if "gold_rank_store" in r]
    return {"ranked": len(ranked),
            "gold_read": sum(bool(r["gold_ranks_read"]) for r in ranked) if ranked else None,
            "store": {f"at_{cut}": sum(1 for v in in_store if v is not None and v <= cut) for cut in STORE_CUTS}
            if in_store else None,
            "ranks_from": dict(Counter(ranks_from(r) for r in rows))}


def loss_table(records: Sequence[Mapping[str, Any]], kinds: Sequence[str], parts: Sequence[str]) -> dict[str, Any]:
    """Per kind and part (in the given orders): how many questions fell in each bucket, and for the
    answerable part the gold ranks' columns (:func:`_rank_columns`)."""
    table: dict[str, Any] = {}
    for kind in kinds:
        entry = {}
        for part in parts:
            rows = [r for r in records if r["kind"] == kind and r["part"] == part]
            if not rows:
                continue
            names = ANSWERABLE_BUCKETS if part == "answerable" else ABSTAIN_BUCKETS
            buckets = [loss_bucket(r) for r in rows]
            entry[part] = {"n": len(rows), **{b: buckets.count(b) for b in names},
                           **(_rank_columns(rows) if part == "answerable" else {})}
        if entry:
            table[kind] = entry
    return table


def _of_ranked(value: Any, row: Mapping[str, Any]) -> str:
    if value is None:
        return "not recorded"
    return str(value) if row["ranked"] == row["n"] else f"{value} of {row['ranked']} ranked"


def format_loss_table(table: Mapping[str, Any]) -> list[str]:
    """The table as printed lines (a markdown table): one row per kind and part."""
    head = ["kind", "part", "n", "right", "wrong kept", "lost at retrieval", "at judgement", "at reading",
            "at support", "not ranked", "gold chunk read", f"rank in store <= {' / '.join(map(str, STORE_CUTS))}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for kind, parts in table.items():
        for part, row in parts.items():
            if part == "answerable":
                cells = [str(row[b]) for b in ANSWERABLE_BUCKETS]
                store = row["store"] and " / ".join(str(row["store"][f"at_{c}"]) for c in STORE_CUTS)
                cells += [_of_ranked(row["gold_read"], row), _of_ranked(store, row)]
            else:
                cells = [f"abstained {row['abstained']}", str(row["wrong_kept"])] + [""] * 7
            lines.append("| " + " | ".join([kind, part, str(row["n"]), *cells]) + " |")
    return lines
