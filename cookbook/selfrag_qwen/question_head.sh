#!/usr/bin/env bash
# A Qwen2.5-Coder Self-RAG model that is asked one question per reflection group in its own chat layout
# (selfrag.prompt_layout = chatml-questions) and replies with the reflection token: the base frozen, each token's
# output row the row of the word its question is answered with (Yes, No, 1..5), IsRel fitted on the base's hidden
# state at the IsRel question (training.question_head: the relevance head's features and fit), every row moved
# down the direction all final hidden states share so the tokens are never written as answer text. Then merged
# onto the base GGUF with the base's own tensors kept as they are (outtype keep).
#   RUN=runs/qwen bash cookbook/selfrag_qwen/question_head.sh        # after build_data.sh
# Resumable: the features are kept in chunks under $OUT/features; a rerun reads them and goes on.
set -euo pipefail
PY=${PY:-python}
RUN=${RUN:-runs/qwen}
BASE=${BASE:-qwen2.5-coder-1.5b-instruct}
LIMIT=${LIMIT:-300}
THREADS=${THREADS:-2}
OUT=${OUT:-$RUN/question-head-${BASE%-instruct}}
$PY -m training.question_head --base-model "$BASE" --train-file "$RUN/data/all.jsonl" --output-dir "$OUT" \
    --limit "$LIMIT" --threads "$THREADS" "$@"
$PY -c "
from pathlib import Path
from langchain_selfrag.bundled import build_gguf
print(build_gguf(Path('$OUT/model.gguf'), folder=Path('$OUT/adapter'), outtype='keep', progress=False))
"
