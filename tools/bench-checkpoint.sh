#!/usr/bin/env bash
# Checkpoint save and load throughput on one process (CPU unless DEVICE says otherwise): one
# training iteration of CONFIG (default gpt2-345m, fp32 + Adam) with --save, then two --load
# runs of it. The first load reads a checkpoint that is not in the page cache (saves write
# with O_DIRECT); the second finds it cached. Each line prints seconds and GB/s.
#   [CONFIG=gpt2-124m] [BUILD_DIR=build] [DROP_CACHES=1] tools/bench-checkpoint.sh [OUT_DIR]
# OUT_DIR defaults to a temporary directory, removed after. DROP_CACHES=1 (root only) also
# empties the page cache before the first load, for a cold read whatever wrote the files.
# For a comparison, note the disk's own rate on the same file system, e.g.
#   dd if=/dev/zero of=OUT_DIR/dd bs=16M count=128 oflag=direct conv=fsync
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
train=${BUILD_DIR:-$repo/build}/tools/trident-train
[[ -x $train ]] || { echo "bench-checkpoint.sh: error: $train not built (run tools/build.sh)" >&2; exit 2; }
config=${CONFIG:-gpt2-345m}
out=${1:-}
if [[ -z $out ]]; then out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; fi
args=(--config "$repo/configs/$config.yaml" --device "${DEVICE:-cpu}" --micro-batch-size 1 --global-batch-size 1
      --seq-length 64 --max-position-embeddings 1024 --lr-warmup-iters 0 --eval-iters 0 --log-interval 1)
"$train" "${args[@]}" --train-iters 1 --save "$out/ckpt" | grep -E "parameters|saved checkpoint"
du -sh "$out/ckpt"
if [[ ${DROP_CACHES:-0} == 1 ]]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
"$train" "${args[@]}" --train-iters 1 --load "$out/ckpt" | grep "loaded checkpoint" | sed 's/^/first load:  /'
"$train" "${args[@]}" --train-iters 1 --load "$out/ckpt" | grep "loaded checkpoint" | sed 's/^/second load: /'
