"""The lexical biography judge (pure, by hand) and the measure of every judge against the hand-labelled
claims shipped in tests/data/bio_claims.jsonl (with the passages they are judged against)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.documents import Document

from langchain_selfrag.evaluation.bio.judges import (
    OverlapJudge,
    claim_terms,
    is_about,
    overlap_support,
)
from langchain_selfrag.evaluation.bio.judges.agreement import (
    LabelError,
    agreement,
    agreement_table,
    counts,
    load_labelled,
    main,
    parse_labelled,
)
from langchain_selfrag.fakes import FakeReflectionLM

LABELS = Path(__file__).resolve().parents[1] / "data" / "bio_claims.jsonl"

ADA = [
    Document(page_content="Ada Quill (born 12 May 1901 in Leeds) was an English painter. She studied in Paris. "
                          "She won sixteen prizes.", metadata={"title": "Ada Quill"}),
    Document(page_content="Ada Bloom was born in Paris in 1950.", metadata={"title": "Ada Bloom"}),
]


# -- the lexical judge by hand -------------------------------------------------------------------
def test_claim_terms_split_numbers_names_and_content_words() -> None:
    terms = claim_terms("Ada Quill was born in Leeds on 12 May 1901 and won sixteen prizes.", "Ada Quill")
    assert terms.numbers == {"12", "1901", "16"}
    assert terms.names == {"leed", "may"}  # capitalised, not the entity's name, folded (Leeds -> leed)
    assert claim_terms("Ada Quill may have painted.", "Ada Quill").content == {"paint"}  # "may" the verb: a stopword
    assert terms.content == {"born", "won", "prize"}  # stopwords and the name left out; plural folded
    assert claim_terms("Ada Quill was drafted in the 47th round.", "Ada Quill").numbers == {"47"}
    assert claim_terms("Ada Quill was thirty-five.", "Ada Quill").numbers == {"35"}
    assert claim_terms("John Morris won.", "John Morris (curler)").content == {"won"}


def test_overlap_support_by_hand() -> None:
    # all numbers and names in one window, 2 of 2 content words ("born", "painter" -> born, painter)
    assert overlap_support("Ada Quill was born in Leeds in 1901.", "Ada Quill", ADA) == 1.0
    # a number no window holds: 0, whatever else matches
    assert overlap_support("Ada Quill was born in Leeds in 1911.", "Ada Quill", ADA) == 0.0
    # one sentence at a time: "Paris" is only in "She studied in Paris.", without "born" -> 0 ...
    assert overlap_support("Ada Quill was born in Paris.", "Ada Quill", ADA, window=1) == 0.0
    # ... but Ada Bloom's passage says "born in Paris": it counts only when every passage does
    assert overlap_support("Ada Quill was born in Paris.", "Ada Quill", ADA, window=1, own_passages=False) == 1.0
    # two sentences at a time join "(born ..." of sentence 1 and "Paris" of sentence 2: a known false positive
    assert overlap_support("Ada Quill was born in Paris.", "Ada Quill", ADA, window=2) == 1.0
    # content words: 1 of 2 ("studied" yes, "sculpture" no) in the window that holds "Paris"
    assert overlap_support("Ada Quill studied sculpture in Paris.", "Ada Quill", ADA) == pytest.approx(0.5)
    # a one-sentence window cannot join "painter" (sentence 1) and "Paris" (sentence 2)
    joined = "Ada Quill was a painter who studied in Paris."
    assert overlap_support(joined, "Ada Quill", ADA, window=2) == 1.0
    assert overlap_support(joined, "Ada Quill", ADA, window=1) == pytest.approx(0.5)  # "studied" but no "painter"
    assert overlap_support("Ada Quill.", "Ada Quill", ADA) == 0.0  # no term at all
    assert overlap_support("Ada Quill was a painter.", "Ada Quill", []) == 0.0
    assert is_about("Ada Quill", ADA[0]) and not is_about("Ada Quill", ADA[1])
    assert is_about("Ada Quill", Document(page_content="Ada Quill was here."))  # no title: the text decides


def test_overlap_judge_thresholds_support() -> None:
    judge = OverlapJudge()
    assert judge("Ada Quill", ["Ada Quill was born in Leeds in 1901.", "Ada Quill studied sculpture in Paris.",
                               "Ada Quill won sixteen prizes."], ADA) == [True, False, True]
    assert OverlapJudge(threshold=0.4)("Ada Quill", ["Ada Quill studied sculpture in Paris."], ADA) == [True]
    assert judge("Nobody", ["Nobody was a painter."], []) == [False]
    assert judge.name == "overlap-w2-gt0.5" and "independent of every model" in judge.description
    assert OverlapJudge(own_passages=False).name.endswith("-any")
    with pytest.raises(ValueError):
        OverlapJudge(threshold=1.0)
    with pytest.raises(ValueError):
        OverlapJudge(window=0)


# -- the labelled claims -------------------------------------------------------------------------
def test_the_labelled_claims_stand_on_their_own() -> None:
    claims = load_labelled(LABELS)
    assert len(claims) >= 100
    assert {c.split for c in claims} == {"validation", "test"}
    assert len({c.entity for c in claims}) >= 20
    for split in ("validation", "test"):
        labels = [c.label for c in claims if c.split == split]
        assert 0.3 < sum(labels) / len(labels) < 0.7  # both labels well represented in each split
    for c in claims:
        assert c.passages and c.reason and c.entity in c.claim  # each claim names its entity
        assert any(is_about(c.entity, d) for d in c.passages)
        if c.label:
            assert c.reason.startswith("stated")
        else:
            assert "altered" in c.reason or "not in the passages" in c.reason
    assert sum("not in the passages" in c.reason for c in claims) >= 5


def test_parse_labelled_rejects_bad_records() -> None:
    good = {"entity": "Ada Quill", "split": "test", "passages": [{"title": "Ada Quill", "text": "x"}],
            "claims": [{"claim": "Ada Quill was a painter.", "label": True, "reason": "stated"}]}
    assert parse_labelled(good)[0].label is True
    for bad, msg in [({**good, "entity": ""}, "entity"), ({**good, "split": "train"}, "split"),
                     ({**good, "passages": "x"}, "passages"), ({**good, "claims": []}, "claims"),
                     ({**good, "claims": [{"claim": "x", "label": "yes"}]}, "label")]:
        with pytest.raises(LabelError, match=msg):
            parse_labelled(bad)


def test_counts_by_hand() -> None:
    c = counts([True, True, False, False, True], [True, False, False, True, None])
    assert (c["true_positive"], c["false_negative"], c["true_negative"], c["false_positive"]) == (1, 1, 1, 1)
    assert c["agree"] == 2 and c["accuracy"] == pytest.approx(0.4) and c["unjudged"] == 1
    assert c["recall_true"] == pytest.approx(1 / 3) and c["recall_false"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        counts([True], [])


def test_every_judge_is_measured_against_the_labels(tmp_path: Path, capsys) -> None:
    claims = load_labelled(LABELS)
    lexical = agreement(OverlapJudge(), claims)
    assert lexical["all"]["n"] == len(claims) and lexical["all"]["unjudged"] == 0
    assert lexical["validation"]["n"] + lexical["test"]["n"] == len(claims)
    assert lexical["all"]["accuracy"] > 0.85  # the lexical judge agrees with careful labels on plain restatements
    always = agreement(lambda entity, cs, ps: [True] * len(cs), claims)
    assert always["all"]["accuracy"] == pytest.approx(sum(c.label for c in claims) / len(claims))
    table = agreement_table([lexical, always])
    assert table[0].startswith("| judge |") and len(table) == 4
    # the command line: the lexical judge, IsSup of a (fake) reflection model and a (rule) chat judge
    out = tmp_path / "agreement.json"
    rule = lambda prompt: "True"
    assert main(["--claims", str(LABELS), "--out", str(out), "--model", "fake.gguf"], lm=FakeReflectionLM(),
                chat=rule) == 0
    rows = json.loads(out.read_text())["judges"]
    assert [r["judge"] for r in rows][:2] == ["overlap-w2-gt0.5", "issup-gt0.5"] and rows[2]["judge"].startswith("chat")
    assert rows[0]["all"] == lexical["all"]
    assert "| overlap-w2-gt0.5 |" in capsys.readouterr().out
    assert main(["--claims", str(tmp_path / "missing.jsonl")]) == 2
