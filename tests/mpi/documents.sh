#!/usr/bin/env bash
# Megatron's --reset-position-ids and --reset-attention-mask at parallel layouts against one
# process (parity.sh, dropout on), on the demo corpus, whose documents end inside samples:
# - both with --eod-mask-loss: pp4 gives the documents to middle stages that hold neither the
#   embeddings nor the loss; tp2 x pp2 x dp2 with sequence parallelism and ZeRO 1 adds the
#   position embedding on TP rank 0 alone and attention on gathered sequences; pp2 with two
#   model chunks a stage (interleaved) and full recomputation, whose recomputed layers must
#   see their micro-batch's documents again;
# - each flag alone (positions at pp4, attention at tp2 x pp2).
# Usage: documents.sh TRAIN PREPROCESS REPO GPT2_VOCAB_DIR
set -euo pipefail
train=$1 preprocess=$2 repo=$3 vocab=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$repo/tools/make-demo-data.sh" "$tmp/demo.jsonl" >/dev/null
"$preprocess" --input "$tmp/demo.jsonl" --output-prefix "$tmp/demo" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" --append-eod --workers 1 \
  >/dev/null 2>&1 || { echo "FAIL: preprocessing the demo corpus"; exit 1; }
# flags WORD...: parity.sh's --flag for each word (every run gets them).
flags() { for word in "$@"; do printf '%s\0%s\0' --flag "$word"; done; }
mapfile -d '' data < <(flags --data-path "$tmp/demo_text_document" --data-cache-path "$tmp/cache" \
  --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt")
mapfile -d '' both < <(flags --reset-position-ids --reset-attention-mask --eod-mask-loss)
parity=(bash "$repo/tests/mpi/parity.sh" "$train" "$repo" "${data[@]}")
fails=0
"${parity[@]}" "${both[@]}" 1:4:1 || fails=$((fails + 1))
"${parity[@]}" "${both[@]}" --parallel-flag --sequence-parallel 2:2:2:1 || fails=$((fails + 1))
"${parity[@]}" "${both[@]}" --parallel-flag --checkpoint-activations 1:2:1:0:1 || fails=$((fails + 1))
"${parity[@]}" --flag --reset-position-ids 1:4:1 || fails=$((fails + 1))
"${parity[@]}" --flag --reset-attention-mask 2:2:1 || fails=$((fails + 1))
[[ $fails -eq 0 ]]
