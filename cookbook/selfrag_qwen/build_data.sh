#!/usr/bin/env bash
# Step 1 of selfrag-qwen2.5-coder-0.5b: its training file, runs/qwen/data/all.jsonl (CPU, minutes).
#   DATA=../shared/data RUN=runs/qwen bash cookbook/selfrag_qwen/build_data.sh
# The data are tokenizer-free JSONL ({instruction, input, output}); every builder is seeded.
# Documentation questions come from the packages installed beside the interpreter (SITE_PACKAGES adds
# more folders), so the file depends on what is installed: run.json records its rows and sha256.
set -euo pipefail
PY=${PY:-python}
DATA=${DATA:-../shared/data}
RUN=${RUN:-runs/qwen}
HOLDOUT=${HOLDOUT:-Packet_switching,1973_oil_crisis,Immune_system}
D="$RUN/data"
mkdir -p "$D"
extra=()
for dir in ${SITE_PACKAGES:-}; do extra+=(--site-packages "$dir"); done

# SQuAD answerable questions (phase 1), gold vs hard negatives with IsSup negatives (phase 2)
$PY -m cookbook.selfrag_smollm2.build_data --data "$DATA" --out "$D/base" --max-questions 1300
# package documentation, SQuAD articles, invented documents, off-topic questions
$PY -m cookbook.data.varied_data --data "$DATA" --out "$D/varied" "${extra[@]}"
# one convention after [Irrelevant] everywhere: the answer read, not trained, then [Utility:1]
$PY -m cookbook.data.mix --out "$D/all0.jsonl" --answer-after-irrelevant untrained \
    "$D/base/generator_train.jsonl" "$D/varied/generator_train.jsonl" "$D/base/generator_phase2.jsonl"
# SQuAD 2.0 unanswerable questions on their plausible-answer passage, most paired with an answerable one
$PY -m cookbook.data.unanswerable_pairs --data "$DATA" --trained "$D/all0.jsonl" --out "$D/pairs.jsonl" \
    --unanswerable 2000 --replay 0 --seed 7
# how/why questions that documentation answers in one sentence, answered with that sentence
$PY -m cookbook.data.explain_data --trained "$D/all0.jsonl" --out "$D/explain.jsonl" --replay 0 --seed 0 "${extra[@]}"
$PY -m cookbook.data.mix --out "$D/all1.jsonl" "$D/all0.jsonl" "$D/pairs.jsonl" "$D/explain.jsonl"
# three training articles held out: the trust suite's validation part fits the bars on them
$PY -m cookbook.data.holdout_articles --data "$DATA" --train-file "$D/all1.jsonl" --out "$D/all.jsonl" --articles "$HOLDOUT"
