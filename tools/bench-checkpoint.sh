#!/usr/bin/env bash
# Checkpoint save and load throughput for gpt2-345m on one process (CPU unless DEVICE says
# otherwise): one training iteration with --save, then a --load of it. Prints GB/s for both.
#   tools/bench-checkpoint.sh [OUT_DIR]     (default: a temporary directory, removed after)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
train=${BUILD_DIR:-$repo/build}/tools/trident-train
[[ -x $train ]] || { echo "bench-checkpoint.sh: error: $train not built (run tools/build.sh)" >&2; exit 2; }
out=${1:-}
if [[ -z $out ]]; then out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; fi
args=(--config "$repo/configs/gpt2-345m.yaml" --device "${DEVICE:-cpu}" --micro-batch-size 1 --global-batch-size 1
      --seq-length 64 --max-position-embeddings 1024 --lr-warmup-iters 0 --eval-iters 0 --log-interval 1)
"$train" "${args[@]}" --train-iters 1 --save "$out/ckpt" | grep -E "parameters|saved checkpoint"
du -sh "$out/ckpt"
# A second save of the same state shows the warm-cache write rate.
"$train" "${args[@]}" --train-iters 1 --load "$out/ckpt" | grep "loaded checkpoint"
