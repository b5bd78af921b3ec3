#!/usr/bin/env bash
# trident-merge-datasets against one trident-preprocess run: the demo corpus tokenized whole,
# and tokenized in three shards (three runs into one folder) then merged, give the same .bin and
# .idx byte for byte, in uint16 (GPT-2 BPE) as Megatron's merge_datasets.py would; errors are
# one line naming the flag or file, with nothing written.
#   tests/e2e/merge_datasets.sh <trident-preprocess> <trident-merge-datasets> <repo> <gpt2 dir>
set -uo pipefail
preprocess=$1 merge=$2 repo=$3 vocab=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok $*"; }

bash "$repo/tools/make-demo-data.sh" "$tmp/demo.jsonl" >/dev/null 2>&1 || { echo "FAIL: making the demo corpus"; exit 1; }
tokenize() {  # tokenize INPUT PREFIX
  "$preprocess" --input "$1" --output-prefix "$2" --tokenizer-type GPT2BPETokenizer --vocab-file "$vocab/gpt2-vocab.json" \
    --merge-file "$vocab/gpt2-merges.txt" --append-eod --workers 2 >/dev/null 2>&1
}
tokenize "$tmp/demo.jsonl" "$tmp/whole" || { echo "FAIL: tokenizing the corpus"; exit 1; }
lines=$(wc -l <"$tmp/demo.jsonl")
mkdir -p "$tmp/shards"
split -d -n l/3 "$tmp/demo.jsonl" "$tmp/part_"  # part_00 part_01 part_02: whole lines, in order
for part in "$tmp"/part_0?; do
  tokenize "$part" "$tmp/shards/$(basename "$part")" || fail "tokenizing $part"
done
echo "a README beside the shards" >"$tmp/shards/README.txt"
if "$merge" --input "$tmp/shards" --output-prefix "$tmp/merged" >"$tmp/out" 2>&1 &&
    cmp -s "$tmp/merged.bin" "$tmp/whole_text_document.bin" && cmp -s "$tmp/merged.idx" "$tmp/whole_text_document.idx"; then
  ok "three shards merged equal the whole corpus tokenized at once ($lines documents): $(cat "$tmp/out")"
else
  fail "merged shards differ from the whole corpus"; cat "$tmp/out"
fi

# Every file under $tmp with its size and modification time, but the two the checks write.
snapshot() { ls -lR --time-style=full-iso "$tmp" | grep -v " out$\| err$"; }
expect_error() {  # expect_error TEXT ARGS...: exit 2, one line, no file added or changed
  local text=$1 before
  shift
  before=$(snapshot)
  "$merge" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -eq 2 && $(wc -l <"$tmp/err") -eq 1 && $(snapshot) == "$before" ]] && grep -qF -- "$text" "$tmp/err"; then
    ok "$(cat "$tmp/err")"
  else
    fail "expected '$text': rc=$rc, stderr:"; cat "$tmp/err"
  fi
}
expect_error "--input: $tmp/none is not a folder" --input "$tmp/none" --output-prefix "$tmp/m"
mkdir -p "$tmp/empty"
expect_error "--input: $tmp/empty holds no .bin/.idx pair" --input "$tmp/empty" --output-prefix "$tmp/m"
cp "$tmp/shards/part_00_text_document.bin" "$tmp/empty/lonely.bin"
expect_error "$tmp/empty/lonely.bin: no $tmp/empty/lonely.idx beside it" --input "$tmp/empty" --output-prefix "$tmp/m"
expect_error "--output-prefix: $tmp/shards/part_01_text_document is one of the inputs" \
  --input "$tmp/shards" --output-prefix "$tmp/shards/part_01_text_document"
expect_error "--multimodal: multimodal datasets (sequence modes) are not supported" \
  --input "$tmp/shards" --output-prefix "$tmp/m" --multimodal
expect_error "--input is required" --output-prefix "$tmp/m"

echo "merge_datasets: $fails failure(s)"
[[ $fails -eq 0 ]]
