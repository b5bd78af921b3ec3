#!/usr/bin/env bash
# Megatron's --reset-position-ids and --reset-attention-mask (with --eod-mask-loss) at
# parallel layouts against one process (parity.sh, dropout on): the demo corpus, whose
# documents end inside samples. pp4 gives the documents to middle stages that hold neither
# the embeddings nor the loss; tp2 x pp2 x dp2 with sequence parallelism and ZeRO 1 adds the
# position embedding on TP rank 0 alone and attention on gathered sequences.
# Usage: documents.sh TRAIN PREPROCESS REPO GPT2_VOCAB_DIR
set -euo pipefail
train=$1 preprocess=$2 repo=$3 vocab=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$repo/tools/make-demo-data.sh" "$tmp/demo.jsonl" >/dev/null
"$preprocess" --input "$tmp/demo.jsonl" --output-prefix "$tmp/demo" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" --append-eod --workers 1 \
  >/dev/null 2>&1 || { echo "FAIL: preprocessing the demo corpus"; exit 1; }
flags=()
for word in --data-path "$tmp/demo_text_document" --data-cache-path "$tmp/cache" --vocab-file \
    "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" --eod-mask-loss --reset-position-ids \
    --reset-attention-mask; do
  flags+=(--flag "$word")
done
bash "$repo/tests/mpi/parity.sh" "$train" "$repo" "${flags[@]}" --parallel-flag --sequence-parallel 1:4:1 2:2:2:1
