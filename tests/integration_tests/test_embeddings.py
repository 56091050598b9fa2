"""The default embeddings (ONNX Runtime, no torch) give sentence-transformers' MiniLM vectors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from langchain_selfrag.retrieval import default_embeddings, minilm_path
from langchain_selfrag.retrieval.minilm import MiniLMEncoder

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = json.loads((ROOT / "tests" / "data" / "minilm_reference.json").read_text())


def test_vectors_match_sentence_transformers() -> None:
    ours = np.asarray(default_embeddings().embed_documents(REFERENCE["texts"]))
    theirs = np.asarray(REFERENCE["vectors"])
    cosine = (ours * theirs).sum(1)
    assert cosine.min() > 0.99999, cosine
    assert np.abs(ours - theirs).max() < 1e-4
    query = np.asarray(default_embeddings().embed_query(REFERENCE["texts"][1]))
    assert float(query @ theirs[1]) > 0.99999


def test_batches_and_order_do_not_change_a_vector() -> None:
    encoder = MiniLMEncoder(minilm_path(), threads=1)
    texts = REFERENCE["texts"]
    alone = np.stack([encoder.encode([t])[0] for t in texts])
    together = encoder.encode(texts[::-1], batch_size=3)[::-1]  # padded beside longer and shorter texts
    assert np.abs(alone - together).max() < 1e-5
    assert encoder.max_length == 256 and len(encoder.token_ids([texts[-1]])[0]) == 256


def test_the_default_embeddings_import_no_torch() -> None:
    code = ("import sys\nfrom langchain_selfrag.retrieval import default_embeddings\n"
            "default_embeddings().embed_query('q')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'sentence_transformers', "
            "'transformers', 'langchain_huggingface'}))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
