"""RelevanceHead and its fit: a logistic head on a frozen chat model's hidden state at the IsRel question."""

from __future__ import annotations

import json

import numpy as np
import pytest

from training.core.config import TrainingError
from training.core.relevance_head import RelevanceHead, RelevanceHeadError
from training.relevance_head import auc, extract, fit_head, fit_logistic, judge_pairs, load_features


def head(weights=(2.0, -1.0), bias=0.5) -> RelevanceHead:
    return RelevanceHead(weights=np.asarray(weights, dtype=np.float32), bias=bias, model_sha256="ab" * 32,
                         model_name="judge-model", ask="Q: {question}\nP ({title}): {passage}\nStated?", system="Be brief.")


class HiddenStates:
    """Hidden states that say how often the passage names the question's last word."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.closed = False

    def last_hidden(self, prompts):
        self.prompts += prompts
        return np.array([[p.count("Zubrowka"), 1.0] for p in prompts], dtype=np.float32)

    def close(self) -> None:
        self.closed = True


def test_the_head_is_a_sigmoid_of_the_hidden_state_and_round_trips(tmp_path) -> None:
    h = head()
    assert h.relevant(np.array([[1.0, 1.0], [0.0, 0.0]])) == pytest.approx([1 / (1 + np.exp(-1.5)), 1 / (1 + np.exp(-0.5))])
    back = RelevanceHead.load(h.save(tmp_path / "head.json"))
    assert back.bias == h.bias and back.ask == h.ask and back.model_sha256 == h.model_sha256
    assert np.array_equal(back.weights, h.weights)
    with pytest.raises(RelevanceHeadError, match="2-wide"):
        h.relevant(np.zeros((1, 3)))


def test_a_bad_head_file_is_named(tmp_path) -> None:
    with pytest.raises(RelevanceHeadError, match="cannot read"):
        RelevanceHead.load(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(RelevanceHeadError, match="not a relevance head"):
        RelevanceHead.load(tmp_path / "other.json")
    (tmp_path / "broken.json").write_text(json.dumps({"format": "selfrag-relevance-head/1", "weights": [1.0]}))
    with pytest.raises(RelevanceHeadError, match="malformed"):
        RelevanceHead.load(tmp_path / "broken.json")


def test_judge_pairs_reads_isrel_labels_in_a_weighted_order() -> None:
    rows = [{"instruction": f"q{i}", "variant": "rare" if i < 50 else "common",
             "output": f"[Retrieval]<paragraph>T\nPassage {i}.</paragraph>{'[Relevant]' if i % 2 else '[Irrelevant]'}x"}
            for i in range(1000)]
    rows.append({"instruction": "none", "output": "No evidence here."})
    pairs = judge_pairs(rows, weights={"rare": 20.0})
    assert len(pairs) == 1000 and {p["question"] for p in pairs} == {f"q{i}" for i in range(1000)}
    first = pairs[:100]
    assert sum(p["variant"] == "rare" for p in first) > 20  # unweighted, about 5 of the 50 rare rows
    one = next(p for p in pairs if p["question"] == "q3")
    assert (one["title"], one["passage"], one["label"]) == ("T", "Passage 3.", 1)
    same = {"weights": {"rare": 20.0}}
    assert judge_pairs(rows, seed=1, **same) != pairs and judge_pairs(rows, **same) == pairs


def test_features_are_cached_by_prompt_so_a_new_draw_computes_only_new_pairs(tmp_path) -> None:
    pair = lambda i: {"question": f"What is {i}?", "title": "T", "passage": f"{i} is Zubrowka." * (i % 2)}  # noqa: E731
    states, prompt, folder = HiddenStates(), (lambda turn: f"{turn.instruction} {turn.passage}"), tmp_path / "f"
    first = extract(states, prompt, [pair(i) for i in range(5)], folder, chunk=2)
    assert len(states.prompts) == 5 and len(list(folder.glob("*.npy"))) == 3
    again = extract(states, prompt, [pair(i) for i in (4, 7, 0, 7)], folder, chunk=2)  # two cached, one new twice
    assert states.prompts[5:] == ["What is 7? 7 is Zubrowka."]
    assert again.tolist() == [first[4].tolist(), [1.0, 1.0], first[0].tolist(), [1.0, 1.0]]
    assert load_features(folder, prompt, [pair(7), pair(1)]).tolist() == [[1.0, 1.0], first[1].tolist()]
    (folder / "000003.keys.json").unlink()  # a chunk whose keys were never written is not trusted
    with pytest.raises(TrainingError, match="1 of 1 pairs have no features"):
        load_features(folder, prompt, [pair(7)])


def test_logistic_fit_separates_and_leaves_the_free_column_unpenalised() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3))
    y = (x[:, 0] + 0.5 * x[:, 1] + 0.3 * rng.normal(size=400) > 0).astype(float)
    w = fit_logistic(x, y, l2=10.0)
    assert abs(w[0]) > 1.0 and abs(w[1]) < 0.2 and abs(w[2]) < 0.2  # column 0 free, the rest shrunk
    assert auc(y, x @ w[:3]) > 0.9
    assert auc(np.array([1, 0]), np.array([0.2, 0.1])) == 1.0 and auc(np.array([1, 0]), np.array([0.1, 0.1])) == 0.5


def test_fit_head_starts_from_the_answer_direction_and_learns_what_it_misses() -> None:
    """The untrained judge reads coordinate 0; the truth also needs coordinate 1 (a swapped name, say)."""
    rng = np.random.default_rng(1)
    h = rng.normal(size=(600, 6))
    labels = ((h[:, 0] > 0) & (h[:, 1] > -0.3)).astype(int)
    direction = np.eye(6)[0]
    groups = [f"q{i // 2}" for i in range(600)]
    weights, bias, report = fit_head(h, labels, groups, direction)
    trained = h @ weights + bias
    assert report["untrained_auc"] == pytest.approx(auc(labels, h[:, 0]))
    assert auc(labels, trained) > report["untrained_auc"] + 0.02
    assert report["l2"] in {float(k) for k in report["cv"]}
