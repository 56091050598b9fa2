"""The README's Python example in a venv with only the inference install: no torch, the trained model.

`make test` builds that venv as the README's Quickstart pip lines do (``[local]`` and MiniLM's weights
with ``--no-deps``) and names its interpreter in ``SELFRAG_SERVE_PYTHON``; the LangGraph server test
runs there too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from loopback import SERVE_PYTHON, serve_has

ROOT = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    """The README's Quickstart example up to its first answer (the print line after it is left out)."""
    section = (ROOT / "README.md").read_text().split("## Quickstart\n", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    lines = code.splitlines()
    last = next(i for i, line in enumerate(lines) if line.startswith("out = chain.invoke("))
    return "\n".join(lines[: last + 1]) + "\n"


@pytest.mark.slow
def test_the_readme_example_answers_with_the_default_model_without_torch(tmp_path: Path) -> None:
    if serve_has("torch"):
        pytest.skip("this interpreter has torch: `make test` runs this in its torch-free venv (SELFRAG_SERVE_PYTHON)")
    listed = subprocess.run([SERVE_PYTHON, "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                            timeout=120, check=True).stdout
    assert "torch" not in {p["name"].lower() for p in json.loads(listed)}
    shutil.copytree(ROOT / "examples" / "corpus", tmp_path / "my_docs")
    script = readme_example() + (
        "import json, sys\n"
        "from langchain_selfrag import bundled\n"
        "print(json.dumps({'model': str(default_model_path()), 'bundled': bundled.cached_gguf_path().name,\n"
        "                  'answer': out['answer'], 'abstained': out['abstained'],\n"
        "                  'cited': [c.metadata.get('source') for c in out['citations']],\n"
        "                  'torch': sorted(m for m in sys.modules if m.split('.')[0] == 'torch')}))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    env.pop("SELFRAG_MODEL", None)
    done = subprocess.run([SERVE_PYTHON, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=1200, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(out["model"]).name == out["bundled"]  # the trained bundled model, not the SmolLM2 base
    assert out["torch"] == []
    # the default model answers the README's question with the sentence that explains it, cited
    assert out["abstained"] is False and "Retrieve tokens decide whether to fetch evidence" in out["answer"], out
    assert "reflection-tokens.md" in out["cited"], out
