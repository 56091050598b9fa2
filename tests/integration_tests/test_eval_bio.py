"""``selfrag eval bio``: the biography task of the self-restraint paper on invented data (split, invented people,
metrics, bootstrap, judges, systems, a full run with a scripted LM and a small bundled-model run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langchain_selfrag import tokens as T
from langchain_selfrag.evaluation.bio.data import (
    ENTITIES_FILE,
    PASSAGES_FILE,
    data_words,
    load_bio,
)
from langchain_selfrag.evaluation.bio.run import BioOptions, run_bio
from langchain_selfrag.evaluation.bio.systems import (
    resolve_systems,
)


# -- shared data and real models -------------------------------------------------------------------
@pytest.mark.shared_data
def test_shared_bio_files(shared_data):
    data = load_bio(shared_data)
    assert len(data.entities) == 500
    assert all(len(q.passages) == 10 for q in data.entities)
    assert sum(data.info()["split_counts"].values()) == 500
    words = data_words([q.entity for q in data.entities]
                       + [d.page_content + " " + d.metadata["title"] for q in data.entities for d in q.passages])
    assert all(not {w.lower() for w in q.entity.split()} & words for q in data.invented)


def test_trained_adapter_becomes_a_cached_gguf(tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from langchain_selfrag.evaluation.bio.systems import adapter_gguf, is_adapter_dir
    from langchain_selfrag.export.gguf import export_gguf
    from langchain_selfrag.lm import load_reflection_lm

    import torch

    torch.manual_seed(0)  # random LoRA weights, scaled (alpha 64 / r 4) so the merge moves the logits measurably
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    adapter = tmp_path / "adapter"
    model.save_pretrained(adapter)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = {t: tok.convert_tokens_to_ids(t) for t in T.REFLECTION_TOKENS}
    (adapter / "selfrag_training.json").write_text(json.dumps({"base_model": str(tiny_model_dir),
                                                               "reflection_token_ids": ids}))
    assert is_adapter_dir(adapter)
    path = adapter_gguf(adapter, cache=tmp_path / "cache")
    stamp = path.stat().st_mtime_ns
    assert adapter_gguf(adapter, cache=tmp_path / "cache") == path and path.stat().st_mtime_ns == stamp
    prompt = "### Instruction:\nWrite a biography of Orla.\n\n### Response:\n"
    merged = load_reflection_lm(path).candidate_probs([prompt], T.GROUPS[T.Kind.ISUSE])[0]
    base = load_reflection_lm(export_gguf(tiny_model_dir, tmp_path / "base.gguf")).candidate_probs(
        [prompt], T.GROUPS[T.Kind.ISUSE])[0]
    assert max(abs(merged[t] - base[t]) for t in merged) > 1e-4  # the LoRA was merged in


@pytest.fixture(scope="module")
def bundled_model(bundled_gguf: Path) -> Path:
    return bundled_gguf


@pytest.mark.slow
def test_small_run_with_the_bundled_model(bundled_model, tmp_path):
    from langchain_selfrag.lm import load_reflection_lm

    people = ["Orla Quarrington", "Bram Vellacott"]
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / ENTITIES_FILE).write_text("".join(f"Who is {p}?\n" for p in people))
    (folder / PASSAGES_FILE).write_text(
        "Orla Quarrington // Orla Quarrington (born 1931) was an English painter known for seascapes of "
        "Cornwall. She studied at the Slade School of Fine Art. [sep] Quarrington // Quarrington is a village "
        "in Lincolnshire, England.\n"
        "Bram Vellacott // Bram Vellacott (1902-1977) was a Dutch footballer who played as a goalkeeper for "
        "Ajax. [sep] Vellacott // Vellacott is a surname.\n")
    data = load_bio(folder, n_invented=2)
    questions = [q for q in data.entities] + data.invented
    lm = load_reflection_lm(bundled_model)
    options = BioOptions(systems=resolve_systems(None, (0.5,)), n_resamples=100, model_name=str(bundled_model),
                         settings={"k": 2, "max_new_tokens": 60})
    report = run_bio(data, questions, lm, tmp_path / "run", options, progress=False)
    assert set(report["systems"]) == {"prompted", "safety_prompted", "selfrag", "selfrag_rho0.5"}
    (pair,) = report["comparisons"]  # paired on the two real people
    assert (pair["baseline"], pair["system"], pair["n"]) == ("selfrag", "selfrag_rho0.5", 2)
    assert pair["utility@0.5"]["n"] == 2 and "## Paired differences" in (tmp_path / "run" / "report.md").read_text()
    for name, entry in report["systems"].items():
        assert entry["errors"] == 0 and entry["n"] == 4, name
        invented = entry["metrics"]["invented"]
        assert invented["true"]["value"] == 0  # nothing about an invented person can be supported
        rate = entry["metrics"]["all"]["abstention_rate"]["value"]
        assert 0.0 <= rate <= 1.0
    restrained = [json.loads(line) for line in
                  (tmp_path / "run" / "answers" / "selfrag_rho0.5.jsonl").read_text().splitlines()]
    assert all("restraint_claims" in r for r in restrained if not r.get("error"))
    assert (tmp_path / "run" / "bio_tradeoff.png").is_file()
