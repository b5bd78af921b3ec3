#!/usr/bin/env bash
# The main job from a fresh Debian machine: install, build, fetch the GPT-2 vocab, build
# the demo corpus (Debian's English and Chinese fortunes), tokenize it into Megatron's
# .bin/.idx, and train a small GPT-2 on it. On 2 CPU cores it takes a few minutes; on a
# GPU machine the same command trains on the GPU (--device auto).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
"$repo/tools/install-deps.sh"
export BUILD_DIR=${BUILD_DIR:-$repo/build}
"$repo/tools/build.sh"
bin=$BUILD_DIR/tools
data=$repo/data

"$repo/tools/get-gpt2-vocab.sh" "$data/gpt2"
if [[ ! -f $data/demo/demo_text_document.idx ]]; then
  "$repo/tools/make-demo-data.sh" "$data/demo/demo.jsonl"
  "$bin/trident-preprocess" --input "$data/demo/demo.jsonl" --json-keys text \
    --output-prefix "$data/demo/demo" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$data/gpt2/gpt2-vocab.json" --merge-file "$data/gpt2/gpt2-merges.txt" \
    --append-eod --workers "$(nproc)"
fi

# One BLAS/OpenMP pool per process, sized to the machine.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
exec "$bin/trident-train" --config "$repo/configs/gpt2-tiny.yaml" \
  --data-path "$data/demo/demo_text_document" \
  --vocab-file "$data/gpt2/gpt2-vocab.json" --merge-file "$data/gpt2/gpt2-merges.txt" \
  --split 949,50,1 --micro-batch-size 8 --global-batch-size 16 \
  --train-iters "${TRAIN_ITERS:-200}" --lr 2e-3 --min-lr 2e-4 --lr-warmup-iters 20 \
  --log-interval 10 --device "${DEVICE:-auto}" "$@"
