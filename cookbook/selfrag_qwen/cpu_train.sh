#!/usr/bin/env bash
# Step 2 of selfrag-qwen2.5-coder-0.5b without a GPU: LoRA on the upper 8 of 24 layers (the backward
# pass stops there) and the reflection-token rows of the untied output head, on the first LIMIT rows of
# the shuffled training file (150 steps of 8 of them), fp32 on the CPU (bf16 autocast measured 2x slower on this machine's cores).
#   RUN=runs/qwen bash cookbook/selfrag_qwen/cpu_train.sh
# Resumable: rerun after an interruption and it continues from the last checkpoint (every 25 steps).
set -euo pipefail
PY=${PY:-python}
RUN=${RUN:-runs/qwen}
LIMIT=${LIMIT:-2000}
STEPS=${STEPS:-150}
THREADS=${THREADS:-2}
$PY -m training.generator_sft --base-model qwen2.5-coder-0.5b-instruct --train-file "$RUN/data/all.jsonl" \
    --limit "$LIMIT" --output-dir "$RUN/cpu" --max-length 256 --batch-size 8 --lr 2e-4 --token-lr 1e-3 \
    --lora-r 16 --lora-alpha 32 --max-steps "$STEPS" --train-from-layer 16 --bf16 false --threads "$THREADS" \
    --save-steps 25 --logging-steps 5 "$@"
