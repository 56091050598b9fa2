"""Training data: text helpers, loaders, BM25, gold and teacher labellers, Algorithm 3 output format."""

from __future__ import annotations

import json

import pytest

from langchain_selfrag import tokens as T
from training.core.jsonl import DataFormatError, read_jsonl
from training.core.metrics import accuracy, bootstrap_auc_interval, roc_auc
from training.core.text import chunk_sentences, contains_answer, normalize_answer, split_sentences, token_overlap
from training.generator_data import main as generator_data_main
from training.selfrag.algorithm3 import Algorithm3, SourceExample
from training.selfrag.bm25 import BM25Retriever
from training.selfrag.labels import LABELS, Case, GoldLabeller, critic_example, critic_prompt
from training.selfrag.qa_data import Passage, load_instructions, load_selfrag_qa, load_squad, split_articles
from training.selfrag.teacher import TeacherLabeller, parse_label

PARIS = "Paris is the capital of France. It has about two million inhabitants. The Seine flows through it."
BERLIN = "Berlin is the capital of Germany. It is known for its museums. The Spree flows through Berlin."


def squad_file(tmp_path):
    data = {
        "version": "v2.0",
        "data": [
            {
                "title": "Paris",
                "paragraphs": [
                    {
                        "context": PARIS,
                        "qas": [
                            {"id": "q1", "question": "What is the capital of France?", "is_impossible": False,
                             "answers": [{"text": "Paris", "answer_start": 0}]},
                            {"id": "q2", "question": "Which river flows through Paris?", "is_impossible": False,
                             "answers": [{"text": "The Seine", "answer_start": PARIS.index("The Seine")}]},
                            {"id": "q3", "question": "Who founded Paris?", "is_impossible": True, "answers": [],
                             "plausible_answers": [{"text": "Seine", "answer_start": PARIS.index("Seine")}]},
                        ],
                    }
                ],
            },
            {
                "title": "Berlin",
                "paragraphs": [
                    {
                        "context": BERLIN,
                        "qas": [
                            {"id": "q4", "question": "Which river flows through Berlin?", "is_impossible": False,
                             "answers": [{"text": "Spree", "answer_start": BERLIN.index("Spree")}]},
                        ],
                    }
                ],
            },
        ],
    }
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data))
    return path


# -- text --------------------------------------------------------------------------------------
def test_normalize_and_contains_answer():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert contains_answer("It is in Paris, France.", ["paris"])
    assert not contains_answer("Parisian food", ["Paris"])
    assert not contains_answer("anything", [""])
    assert token_overlap("the river Seine", "Seine is long") == pytest.approx(0.5)


def test_split_sentences_keeps_abbreviations_and_initials():
    text = "Dr. Smith met J. R. Doe in the U.S. capital. They talked. Then, at 5 p.m., they left!"
    assert split_sentences(text) == ["Dr. Smith met J. R. Doe in the U.S. capital.", "They talked.",
                                     "Then, at 5 p.m., they left!"]
    assert split_sentences("  ") == []


def test_chunk_sentences_covers_every_sentence_once():
    sents = ["a" * 10, "b" * 10, "c" * 30, "d" * 5]
    ranges = chunk_sentences(sents, 25)
    assert ranges == [(0, 2), (2, 3), (3, 4)]
    with pytest.raises(ValueError):
        chunk_sentences(sents, 0)


# -- loaders -----------------------------------------------------------------------------------
def test_load_squad_chunks_and_gold_passages(tmp_path):
    corpus = load_squad(squad_file(tmp_path), max_passage_chars=40)
    assert corpus.articles == ["Berlin", "Paris"]
    by_id = corpus.by_id()
    q = {q.id: q for q in corpus.questions}
    assert [by_id[g].text for g in q["q1"].gold] == ["Paris is the capital of France."]
    assert [by_id[g].text for g in q["q2"].gold] == ["The Seine flows through it."]
    assert not q["q3"].answerable and q["q3"].plausible_answers == ["Seine"]
    assert all(by_id[g].title == "Berlin" for g in q["q4"].gold)
    assert {p.article for p in corpus.subset(["Paris"]).passages} == {"Paris"}


def test_loaders_reject_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataFormatError):
        load_squad(bad)
    bad.write_text(json.dumps({"no": "data"}))
    with pytest.raises(DataFormatError, match="not SQuAD"):
        load_squad(bad)
    lines = tmp_path / "bad.jsonl"
    lines.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(DataFormatError, match=":2:"):
        list(read_jsonl(lines))
    with pytest.raises(DataFormatError, match="not found"):
        load_instructions(tmp_path / "missing.jsonl")


def test_load_selfrag_qa_and_instructions(tmp_path):
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"question": "Capital of France?", "answers": ["Paris"],
                              "ctxs": [{"title": "Paris", "text": PARIS}, {"title": "Berlin", "text": BERLIN}]}) + "\n")
    items = load_selfrag_qa(qa)
    assert len(items) == 1 and len(items[0].ctxs) == 2 and items[0].gold == [items[0].ctxs[0].id]
    inst = tmp_path / "inst.jsonl"
    inst.write_text(json.dumps({"id": "t", "instruction": "Say hi", "instances": [{"input": "", "output": "hi"}]}) + "\n"
                    + json.dumps({"instruction": "Echo", "input": "x", "output": "x"}) + "\n")
    got = load_instructions(inst)
    assert [(i.instruction, i.input, i.output) for i in got] == [("Say hi", "", "hi"), ("Echo", "x", "x")]


def test_split_articles_is_seeded_and_disjoint():
    names = [f"a{i}" for i in range(10)]
    train, held = split_articles(names, 3, seed=1)
    assert len(held) == 3 and not set(train) & set(held) and sorted(train + held) == sorted(names)
    assert split_articles(names, 3, seed=1) == (train, held)
    with pytest.raises(ValueError):
        split_articles(names, 10)


def test_bm25_ranks_the_matching_passage_first():
    passages = [Passage("1", "Paris", PARIS), Passage("2", "Berlin", BERLIN)]
    bm25 = BM25Retriever(passages)
    assert bm25("Which river flows through Berlin?", 2)[0].id == "2"
    assert bm25("Seine river", 1)[0].id == "1"
    assert bm25("zzz unknown", 3) == []


def test_bm25_scores_follow_the_okapi_formula_with_lucene_idf():
    import math

    passages = [Passage("1", "x", "river river bank"), Passage("2", "y", "bank"), Passage("3", "", "the of")]
    k1, b, avg = 1.5, 0.75, (4 + 2 + 0) / 3  # lengths count title terms and skip stop words

    def term(tf: int, df: int, length: int) -> float:
        return math.log(1 + (3 - df + 0.5) / (df + 0.5)) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))

    got = BM25Retriever(passages).scores("river river bank?")  # a repeated query term counts once
    assert got == pytest.approx({0: term(2, 1, 4) + term(1, 2, 4), 1: term(1, 2, 2)}, rel=1e-12)
    assert BM25Retriever([Passage("1", "", "the of")]).scores("the river") == {}


# -- labels ------------------------------------------------------------------------------------
def test_gold_labeller_rules():
    gold = GoldLabeller()
    paris = Passage("1", "Paris", PARIS)
    berlin = Passage("2", "Berlin", BERLIN)
    cases = [
        Case("retrieve", "Capital of France?", kind="qa", answers=["Paris"]),
        Case("retrieve", "Write a poem", kind="instruction"),
        Case("isrel", "Capital of France?", evidence=paris, answers=["Paris"]),
        Case("isrel", "Capital of France?", evidence=berlin, answers=["Paris"]),
        Case("issup", "q", output="Paris", evidence=paris),
        Case("issup", "q", output="Paris, Lyon", evidence=paris),
        Case("issup", "q", output="Lyon", evidence=paris),
        Case("isuse", "q", output="It is Paris.", answers=["Paris"]),
        Case("isuse", "q", output="Lyon", answers=["Paris"]),
        Case("isuse", "Write a poem", output="Roses...", kind="instruction"),
        Case("retrieve_evidence", "q", output="The Seine flows through it.", evidence=paris),
        Case("retrieve_evidence", "q", output="It rains a lot.", evidence=paris),
    ]
    assert gold.label(cases) == [
        T.RETRIEVAL, T.NO_RETRIEVAL, T.RELEVANT, T.IRRELEVANT,
        T.FULLY_SUPPORTED, T.PARTIALLY_SUPPORTED, T.NO_SUPPORT,
        T.UTILITY[4], T.UTILITY[0], T.UTILITY[4], T.CONTINUE, T.RETRIEVAL,
    ]


def test_case_validation_and_critic_examples():
    with pytest.raises(ValueError, match="unknown aspect"):
        Case("nope", "x")
    with pytest.raises(ValueError, match="needs evidence"):
        Case("isrel", "x")
    case = Case("isrel", "What is [Retrieval]?", evidence=Passage("1", "t", "text"))
    ex = critic_example(case, T.RELEVANT)
    assert ex["output"] == T.RELEVANT and ex["aspect"] == "isrel"
    assert T.RETRIEVAL not in ex["input"]  # untrusted text is neutralised
    assert critic_prompt(case).startswith("### Instruction:\n") and critic_prompt(case).endswith("### Response:\n")
    with pytest.raises(ValueError):
        critic_example(case, T.FULLY_SUPPORTED)


@pytest.mark.parametrize(
    ("aspect", "reply", "expected"),
    [
        ("isrel", "[Relevant] because it names the city", T.RELEVANT),
        ("isrel", "Irrelevant. The passage is about Berlin.", T.IRRELEVANT),
        ("isrel", "Not relevant at all", T.IRRELEVANT),
        ("isrel", "Relevant", T.RELEVANT),
        ("retrieve", "Yes - documents help.", T.RETRIEVAL),
        ("retrieve", "No, this is creative writing.", T.NO_RETRIEVAL),
        ("retrieve", "[No Retrieval] explanation ... [Retrieval] would not help", T.NO_RETRIEVAL),
        ("issup", "Partially supported: the date is missing", T.PARTIALLY_SUPPORTED),
        ("issup", "**Fully supported**", T.FULLY_SUPPORTED),
        ("issup", "The output is contradicted by the evidence.", T.NO_SUPPORT),
        ("isuse", "Utility: 4", T.UTILITY[3]),
        ("isuse", "[Utility:2] incomplete", T.UTILITY[1]),
        ("isuse", "Rating 5/5", T.UTILITY[4]),
        ("retrieve_evidence", "Continue to use evidence", T.CONTINUE),
        ("isrel", "I cannot decide.", None),
    ],
)
def test_parse_label(aspect, reply, expected):
    assert parse_label(aspect, reply) == expected


def test_teacher_labeller_with_a_fake_chat_model():
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    teacher = FakeListChatModel(responses=["Relevant: it answers.", "hmm?", "[Irrelevant]"])
    labeller = TeacherLabeller(teacher, max_concurrency=1, retries=1)
    cases = [Case("isrel", "Capital of France?", evidence=Passage("1", "Paris", PARIS)),
             Case("isrel", "Capital of France?", evidence=Passage("2", "Berlin", BERLIN))]
    assert labeller.label(cases) == [T.RELEVANT, T.IRRELEVANT]  # the unparsable reply was retried
    assert len(labeller.unparsed) == 1


# -- Algorithm 3 -----------------------------------------------------------------------------
def algo3(contrast: int = 0) -> Algorithm3:
    passages = [Passage("1", "Paris", PARIS), Passage("2", "Berlin", BERLIN)]
    return Algorithm3(GoldLabeller(), BM25Retriever(passages), k=2, contrast=contrast, seed=0)


def test_algorithm3_no_retrieval_format():
    rows = algo3().build(SourceExample("Write a haiku about rain.", "Rain falls softly.", kind="instruction"))
    assert rows == [{"instruction": "Write a haiku about rain.", "input": "", "output": "[No Retrieval]Rain falls softly.[Utility:5]",
                     "id": "", "variant": "no_retrieval"}]


def test_algorithm3_retrieval_format_is_the_published_one():
    ex = SourceExample("Which river flows through Paris?", "The Seine", kind="qa", answers=["The Seine", "Seine"])
    (row,) = algo3().build(ex)
    assert row["output"] == (
        "[Retrieval]<paragraph>Paris\n" + PARIS + "</paragraph>[Relevant]The Seine[Fully supported][Utility:5]"
    )


def test_algorithm3_multi_sentence_continue_and_contrast_copy():
    ex = SourceExample("Tell me about Paris.", "Paris is the capital of France. The Seine flows through it.", kind="qa",
                       answers=["Paris"])
    rows = algo3(contrast=1).build(ex)
    main, contrast = rows
    assert main["output"] == (
        "[Retrieval]<paragraph>Paris\n" + PARIS + "</paragraph>[Relevant]Paris is the capital of France.[Fully supported]"
        "[Continue to Use Evidence]The Seine flows through it.[Utility:5]"
    )
    assert contrast["variant"] == "contrast"
    out = contrast["output"]
    assert out.startswith("[Retrieval]<paragraph>Berlin\n" + BERLIN + "</paragraph>[Irrelevant]")
    # the answer after [Irrelevant] is trained, as in the paper (else the model learns empty answers)
    assert "no_loss_spans" not in contrast
    assert out.endswith("[Irrelevant]Paris is the capital of France.[Continue to Use Evidence]The Seine flows through it.[Utility:5]")


def test_generator_data_cli(tmp_path):
    inst = tmp_path / "inst.jsonl"
    inst.write_text(json.dumps({"instruction": "Say hi", "instances": [{"input": "", "output": "Hi there."}]}) + "\n")
    out = tmp_path / "gen.jsonl"
    assert generator_data_main(["--squad", str(squad_file(tmp_path)), "--instructions", str(inst), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4  # three answerable questions and one instruction
    assert all(r["output"].startswith((T.RETRIEVAL, T.NO_RETRIEVAL)) for r in rows)
    assert all(r["output"].endswith(tuple(T.UTILITY)) for r in rows)


# -- metrics -------------------------------------------------------------------------------------
def test_roc_auc_and_accuracy():
    assert roc_auc([0.9, 0.8, 0.1, 0.2], [1, 1, 0, 0]) == 1.0
    assert roc_auc([0.1, 0.2, 0.9, 0.8], [1, 1, 0, 0]) == 0.0
    assert roc_auc([0.5, 0.5, 0.5], [1, 0, 0]) == 0.5
    assert roc_auc([0.3, 0.6, 0.4, 0.8], [0, 1, 1, 0]) == 0.5
    with pytest.raises(ValueError):
        roc_auc([0.1], [1])
    assert accuracy(["a", "b"], ["a", "c"]) == 0.5
    assert set(LABELS) == {"retrieve", "retrieve_evidence", "isrel", "issup", "isuse"}


def test_bootstrap_auc_interval_brackets_the_auc_and_narrows_with_data():
    import random

    rng = random.Random(3)
    labels = [i % 2 for i in range(400)]
    scores = [y * 0.5 + rng.random() for y in labels]
    auc = roc_auc(scores, labels)
    low, high = bootstrap_auc_interval(scores, labels, rounds=300)
    assert low < auc < high and high - low < 0.15
    small_low, small_high = bootstrap_auc_interval(scores[:40], labels[:40], rounds=300)
    assert small_high - small_low > high - low
    assert bootstrap_auc_interval([0.9, 0.1, 0.8, 0.2], [1, 0, 1, 0], groups=["a", "a", "b", "b"], rounds=50) == (1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap_auc_interval([0.9, 0.8], [1, 1])
    with pytest.raises(ValueError):
        bootstrap_auc_interval([0.9, 0.8], [1, 0], groups=["a"])


def test_critic_data_cli_gold_and_teacher(tmp_path):
    from training.critic_data import main as critic_data_main

    squad = squad_file(tmp_path)
    inst = tmp_path / "inst.jsonl"
    inst.write_text("\n".join(json.dumps({"instruction": f"Write poem {i}", "instances": [{"input": "", "output": f"Poem {i}."}]})
                              for i in range(4)))
    out = tmp_path / "critic.jsonl"
    assert critic_data_main(["--squad", str(squad), "--instructions", str(inst), "--per-aspect", "4", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_aspect = {}
    for r in rows:
        by_aspect.setdefault(r["aspect"], set()).add(r["output"])
        assert r["output"] in LABELS[r["aspect"]]
    assert by_aspect["retrieve"] == {T.RETRIEVAL, T.NO_RETRIEVAL}
    assert by_aspect["isrel"] == {T.RELEVANT, T.IRRELEVANT}
    # a teacher chat model given as module:Class with JSON kwargs; every reply says "Relevant"
    teacher_out = tmp_path / "teacher.jsonl"
    kwargs = json.dumps({"responses": ["Relevant - it answers the question."] * 50})
    assert critic_data_main(["--squad", str(squad), "--per-aspect", "2", "--out", str(teacher_out),
                             "--teacher", "langchain_core.language_models.fake_chat_models:FakeListChatModel",
                             "--teacher-kwargs", kwargs, "--max-concurrency", "1"]) == 0
    rows = [json.loads(line) for line in teacher_out.read_text().splitlines()]
    assert rows and {r["aspect"] for r in rows} == {"isrel"}  # other aspects got no parseable label: dropped
    assert {r["output"] for r in rows} == {T.RELEVANT}
    with pytest.raises(SystemExit):
        critic_data_main(["--squad", str(squad), "--out", str(teacher_out), "--teacher", "no_such_module:X"])
