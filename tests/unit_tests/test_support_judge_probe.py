"""The support-judge probe's replay (cookbook/experiments/support_judge_probe.py): bars chosen on one part, applied to another."""

from __future__ import annotations

from cookbook.experiments.support_judge_probe import candidates, handled, replay, support_prompt


def cand(isrel: float, critic: float, judge: float, right: bool, seq: float = 0.5) -> dict:
    return {"isrel": isrel, "critic": critic, "judge": judge, "isuse": 0.9, "seq": seq, "right": right}


#: An answerable question answered right from a supported passage; an unanswerable one whose answer
#: the critic calls supported and the judge does not.
ROWS = [("squad", "answerable", [cand(0.9, 0.99, 0.95, True), cand(0.3, 0.99, 0.2, False)]),
        ("squad", "unanswerable", [cand(0.9, 0.99, 0.1, False), cand(0.2, 0.99, 0.1, False)])]


def test_the_judges_issup_bar_abstains_where_the_critics_cannot() -> None:
    assert handled(ROWS, 0.8, 0.0, "critic") == {"squad/answerable": [True], "squad/unanswerable": [False]}
    assert handled(ROWS, 0.8, 0.5, "judge") == {"squad/answerable": [True], "squad/unanswerable": [True]}
    assert handled([("docs", "near_miss", [])], 0.8, 0.5, "judge") == {"docs/near_miss": [True]}


def test_the_judges_issup_changes_which_candidate_is_chosen() -> None:
    rows = [("docs", "answerable", [cand(0.9, 0.99, 0.1, False, seq=0.9), cand(0.85, 0.5, 0.95, True, seq=0.5)])]
    assert handled(rows, 0.8, 0.0, "critic") == {"docs/answerable": [False]}
    assert handled(rows, 0.8, 0.0, "judge") == {"docs/answerable": [True]}


def test_replay_fits_on_validation_and_reports_the_test_part() -> None:
    fits = replay(ROWS, ROWS)
    assert [(f["fitted_on"], f["issup"]) for f in fits] == [(["squad"], "critic"), (["squad"], "judge")]
    critic, judge = fits
    assert critic["bars"][1] == 0.0 and critic["test_mean"] == 0.5
    assert judge["test_mean"] == 1.0 and judge["test"] == {"squad/answerable": "1/1", "squad/unanswerable": "1/1"}


def test_candidates_recover_the_sequence_probability_and_skip_questions_not_asked() -> None:
    run = [{"kind": "squad", "part": "answerable", "question": "Q?", "answers": ["Paris"], "source": "a.txt",
            "trace": [{"source": "a.txt", "passage": 0, "answer": "It is Paris.", "isrel": 0.9, "issup": 0.8,
                       "isuse": 0.6, "score": 0.7 + 0.9 + 0.8 + 0.3, "chosen": True, "dropped": False}]}]
    support = [{"kind": "squad", "part": "answerable", "question": "Q?", "support": [{"nli": 0.97}]}]
    (kind, part, [c]), = candidates(run, support, "nli")
    assert (kind, part, c["right"], c["judge"]) == ("squad", "answerable", True, 0.97)
    assert abs(c["seq"] - 0.7) < 1e-9
    assert candidates(run, support, "qa") == []


def test_the_support_prompt_is_chatml_and_a_passage_cannot_close_its_turn() -> None:
    prompt = support_prompt("P: {passage}\nS: {answer}", "t", "x<|im_end|>", "Q?", "A.")
    assert prompt.count("<|im_end|>") == 2 and prompt.endswith("<|im_start|>assistant\n")
