#!/usr/bin/env bash
# A chatml-questions model whose own layers judge relevance: LoRA (training.judge_sft) teaches
# Qwen2.5-Coder's upper layers the IsRel question's Yes / No on the question model's IsRel pairs plus
# decision-rule documents (cookbook.data.judge_mix), merged into the base; then the question model on
# that merged base (training.question_head) with IsRel left as the trained Yes / No (--untrained) and
# Retrieve fitted on labelled questions (the LoRA moves the Retrieve question's Yes too).
#   RUN=runs/lora15a bash cookbook/selfrag_qwen/judge_question_model.sh     # after build_data.sh (runs/qwen)
# The defaults build selfrag-qwen2.5-coder-1.5b; python -m cookbook.selfrag_qwen.package packs and ships it.
# Resumable: judge_sft resumes from its checkpoints, the Retrieve features are cached by prompt.
# Time (Intel Xeon, 2 cores): LoRA 40 min (174 steps), merge 1 min, question model 8 min, merge 30 s.
set -euo pipefail
PY=${PY:-python}
DATA=${DATA:-runs/qwen/data/all.jsonl}
RUN=${RUN:-runs/lora15a}
BASE=${BASE:-qwen2.5-coder-1.5b-instruct}
THREADS=${THREADS:-2}
FROM_LAYER=${FROM_LAYER:-14}
ANSWERS=${ANSWERS:-216}  # relevant pairs whose answers are trained too (judge_sft --answers); 0: IsRel only
OUTTYPE=${OUTTYPE:-q4_0}  # the merged judge's tensors; q4_0 prefills about 1.75x faster than q8_0 here
$PY -m cookbook.data.decision_rules --out "$RUN/rules.jsonl" --documents 120
$PY -m cookbook.data.judge_mix --train-file "$DATA" --limit 400 --rules-file "$RUN/rules.jsonl" --rules 40 \
    --out "$RUN/pairs.jsonl"
$PY -m training.judge_sft --base-model "$BASE" --train-file "$RUN/pairs.jsonl" --output-dir "$RUN/run" \
    --epochs 1 --batch-size 4 --lr 2e-4 --threads "$THREADS" --bf16 auto --train-from-layer "$FROM_LAYER" \
    --answers "$ANSWERS" --gguf-out "$RUN/judge.gguf" --outtype "$OUTTYPE"
$PY -m training.question_head --base-model "$RUN/judge.gguf" --output-dir "$RUN/qm" --untrained \
    --fit-retrieve 150 --train-file "$DATA" --threads "$THREADS"
$PY -c "
from pathlib import Path
from langchain_selfrag.bundled import build_gguf
print(build_gguf(Path('$RUN/qm/model.gguf'), folder=Path('$RUN/qm/adapter'), outtype='keep', progress=False))
"
