#!/usr/bin/env bash
# A Qwen2.5-Coder Self-RAG model in its own chat layout, on the CPU: the base frozen (it reads as it does
# untrained), the 15 reflection tokens' output rows (and end of turn) fitted on its hidden states where each is
# written in ChatML (training.reflection_head --prompt-layout chatml), then merged onto the base GGUF, which
# records the layout (selfrag.prompt_layout = chatml), so every backend lays prompts out that way. Each reflection
# token is read by the base as a line break (--input-row), so the answer after [Relevant] starts as the base's own.
#   RUN=runs/qwen bash cookbook/selfrag_qwen/chat_head.sh        # after build_data.sh
# Resumable: the features are kept in shards under $OUT/features; a rerun reads them and goes on.
set -euo pipefail
PY=${PY:-python}
RUN=${RUN:-runs/qwen}
BASE=${BASE:-qwen2.5-coder-0.5b-instruct}
LIMIT=${LIMIT:-1000}
THREADS=${THREADS:-2}
OUT=${OUT:-$RUN/chat-head-${BASE%-instruct}}
$PY -m training.reflection_head --base-model "$BASE" --train-file "$RUN/data/all.jsonl" --output-dir "$OUT" \
    --limit "$LIMIT" --max-length 384 --prompt-layout chatml --input-row $'\n' --threads "$THREADS" "$@"
$PY -c "
import sys
from pathlib import Path
from langchain_selfrag.bundled import build_gguf
print(build_gguf(Path('$OUT/model.gguf'), folder=Path('$OUT/adapter'), progress=False))
"
