#!/usr/bin/env bash
# Step 2a of selfrag-qwen2.5-coder-0.5b on a lent GPU: the 15 minutes of device time, start and
# transfers included, as one prepared sequence (see README.md, "A lent GPU").
#
#   bash cookbook/selfrag_qwen/gpu_session.sh prepare   # here: wheels, base in 50 MB chunks, data (ignored folders)
#   bash cookbook/selfrag_qwen/gpu_session.sh env       # on the GPU machine, first call (carry .whl)
#   bash cookbook/selfrag_qwen/gpu_session.sh device    # on the GPU machine, last call: join, check, train, pack
#   bash cookbook/selfrag_qwen/gpu_session.sh collect DIR  # here: the files that came back -> $RUN/gpu/adapter
#
# The generator is trained in the base's chat layout (gpu_train.sh, LAYOUT=chatml) and records it.
# WHAT=judge (device and collect) trains a relevance judge on the same base and data instead
# (training.judge_sft: LoRA, the judge's Yes/No on every IsRel label) into $RUN/gpu-judge; on a warm
# machine it can follow the generator's call, the base already joined.
#
# `prepare` prints the calls in order. Each call carries at most 64 MiB; ignored files carried by earlier
# calls stay on the warm machine (it waits 30 s between calls), so the calls go back to back.
set -euo pipefail
PY=${PY:-python}
RUN=${RUN:-runs/qwen}
GPU_DIR=${GPU_DIR:-.gpu}
WHEEL_DIR=${WHEEL_DIR:-.whl}
SITE=${SITE:-/root/site}
BASE_NAME=qwen2.5-coder-0.5b-instruct
BASE_ENV=SELFRAG_BASE_QWEN2_5_CODER_0_5B_INSTRUCT
CHUNK=50000000
WHAT=${WHAT:-generator}
case "$WHAT" in
    generator) TRAINED="$RUN/gpu" ;;
    judge) TRAINED="$RUN/gpu-judge" ;;
    *) echo "WHAT is generator or judge, not $WHAT" >&2; exit 2 ;;
esac
# What the GPU image lacks (it has torch with CUDA, numpy, pyarrow): Python 3.12 wheels, no dependencies.
GPU_WHEELS=(transformers==5.24.0 trl==1.16.0 peft==0.21.2 datasets==5.2.0 gguf==0.19.0 dill==0.4.1 multiprocess==0.70.19)

prepare() {
    [ -s "$RUN/data/all.jsonl" ] || { echo "no $RUN/data/all.jsonl: run build_data.sh first" >&2; exit 2; }
    for path in "$GPU_DIR" "$WHEEL_DIR"; do
        git check-ignore -q "$path" || { echo "add /$path/ to .git/info/exclude first: it must not travel with every call" >&2; exit 2; }
    done
    mkdir -p "$GPU_DIR" "$WHEEL_DIR"
    $PY -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 -d "$WHEEL_DIR" "${GPU_WHEELS[@]}"
    base=$($PY -c "from langchain_selfrag.bundled.bases import base_gguf_path; print(base_gguf_path('$BASE_NAME'))")
    rm -f "$GPU_DIR"/q[0-9][0-9]
    split -b "$CHUNK" -d -a 2 "$base" "$GPU_DIR/q"
    gzip -c "$RUN/data/all.jsonl" > "$GPU_DIR/all.jsonl.gz"
    chunks=("$GPU_DIR"/q[0-9][0-9])
    echo "ready: ${#chunks[@]} chunks of $base, $(du -h "$GPU_DIR/all.jsonl.gz" | cut -f1) of data, $(ls "$WHEEL_DIR" | wc -l) wheels"
    echo "the device calls, back to back:"
    echo "  run carry=[\"$WHEEL_DIR\"] command='bash cookbook/selfrag_qwen/gpu_session.sh env'"
    last=$(( ${#chunks[@]} - 1 ))
    for i in $(seq 0 $(( last - 1 ))); do
        echo "  run carry=[\"${chunks[$i]}\"] command='true'"
    done
    echo "  run carry=[\"${chunks[$last]}\", \"$GPU_DIR/all.jsonl.gz\"] timeout_s=600 command='bash cookbook/selfrag_qwen/gpu_session.sh device'"
}

env_install() {
    mkdir -p "$SITE"
    $PY -m pip install --quiet --no-deps --target "$SITE" "$WHEEL_DIR"/*.whl
    PYTHONPATH="$SITE" $PY -c "import transformers, trl, peft, datasets, gguf, torch; print('transformers', transformers.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
}

device() {
    local out=${OUT:?OUT is the folder whose files come back}
    mkdir -p "$out"
    [ -s /tmp/base.gguf ] || cat "$GPU_DIR"/q[0-9][0-9] > /tmp/base.gguf
    mkdir -p "$RUN/data"
    gunzip -c "$GPU_DIR/all.jsonl.gz" > "$RUN/data/all.jsonl"
    # the trainer checks the file's sha256 against bundled/qwen.py before it loads it
    export "$BASE_ENV=/tmp/base.gguf" PYTHONPATH="$SITE:${PYTHONPATH:-.}"
    # leave a minute of the call for packing and the way back
    if [ "$WHAT" = judge ]; then
        $PY -m training.judge_sft --base-model "$BASE_NAME" --train-file "$RUN/data/all.jsonl" --output-dir "$TRAINED" \
            --max-length 512 --batch-size 32 --lr 2e-4 --epochs 1 --save-steps 100000 --logging-steps 20 \
            --max-minutes "${MINUTES:-4}" "$@" > "$out/train.log" 2>&1 \
            || { tr '\r' '\n' < "$out/train.log" | tail -30 >&2; exit 1; }
    else
        MINUTES=${MINUTES:-8} PY=$PY RUN=$RUN bash cookbook/selfrag_qwen/gpu_train.sh "$@" > "$out/train.log" 2>&1 \
            || { tr '\r' '\n' < "$out/train.log" | tail -30 >&2; exit 1; }
    fi
    tr '\r' '\n' < "$out/train.log" | grep -E "'loss'|train_runtime" | tail -20
    adapter="$TRAINED/adapter"
    [ -s "$adapter/adapter_model.safetensors" ] || { echo "no adapter came out: see train.log" >&2; exit 1; }
    $PY -c "
import json, math, sys
from safetensors.numpy import load_file
bad = [k for k, v in load_file('$adapter/adapter_model.safetensors').items() if not math.isfinite(float(abs(v).sum()))]
sys.exit(f'{len(bad)} adapter tensors are not finite, e.g. {bad[:2]}' if bad else 0)"
    # files come back at 16 MiB each at most
    split -b 15000000 -d -a 2 "$adapter/adapter_model.safetensors" "$out/adapter.part"
    (cd "$TRAINED" && sha256sum adapter/adapter_model.safetensors) > "$out/adapter.sha256"
    tar cf "$out/meta.tar" -C "$TRAINED" adapter/adapter_config.json adapter/selfrag_training.json \
        $(cd "$TRAINED" && ls loss_history.json loss_curve.png run_identity.json 2>/dev/null)
    echo "back under \$OUT: $(ls "$out" | tr '\n' ' ')"
}

collect() {
    local back=${1:?collect FOLDER, the folder the files of the last call came back to (files_at)}
    mkdir -p "$TRAINED/adapter"
    tar xf "$back/meta.tar" -C "$TRAINED"
    cat "$back"/adapter.part[0-9][0-9] > "$TRAINED/adapter/adapter_model.safetensors"
    (cd "$TRAINED" && sha256sum --quiet -c "$back/adapter.sha256") || { echo "the adapter's parts do not add up" >&2; exit 1; }
    cp "$back/train.log" "$TRAINED/train.log"
    if [ "$WHAT" = judge ]; then
        echo "judge adapter in $TRAINED/adapter; next: python -m benchmarks.judge_heldout --adapter $TRAINED/adapter --eval-file ..."
    else
        echo "adapter in $TRAINED/adapter; next: README.md steps 3-4 (pack, build, measure)"
    fi
}

case "${1:-}" in
    prepare) prepare ;;
    env) env_install ;;
    device) shift; device "$@" ;;
    collect) collect "${2:-}" ;;
    *) echo "usage: [WHAT=judge] $0 prepare | env | device [trainer options] | collect FOLDER" >&2; exit 2 ;;
esac
