#!/usr/bin/env bash
# trident-train end to end on synthetic tokens: the log has Megatron's line and the loss falls.
set -euo pipefail
train=$1
repo=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$train" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --train-iters 40 --log-interval 10 | tee "$log"
grep -c '^ iteration ' "$log" | grep -qx 4
first=$(grep '^ iteration ' "$log" | head -1 | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/')
last=$(grep '^ iteration ' "$log" | tail -1 | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/')
echo "first logged loss $first, last $last"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'
grep -q 'tokens per second: ' "$log"
grep -q 'TFLOP/s per rank: ' "$log"
