#!/usr/bin/env bash
# CPU benchmark baseline: gpt2-124m at micro batch 4, sequence 64, a few steps.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${BUILD_DIR:-$repo/build}/tools
exec "$bin/trident-bench" --config "$repo/configs/gpt2-124m.yaml" --device cpu --micro-batch-size 4 \
  --global-batch-size 4 --seq-length 64 --train-iters "${STEPS:-3}" --lr-warmup-iters 0 "$@"
