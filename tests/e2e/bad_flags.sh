#!/usr/bin/env bash
# Each bad configuration must exit 2 and print exactly one line that names the flag.
set -u
train=$1
repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect_error() {  # expect_error <flag that must be named> <args...>
  local flag=$1
  shift
  "$train" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [[ $rc -ne 2 || $lines -ne 1 ]] || ! grep -q -- "$flag" "$tmp/err" || ! grep -q '^trident-train: error: ' "$tmp/err"; then
    echo "FAIL: $* -> rc=$rc, stderr:"
    cat "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok: $* -> $(cat "$tmp/err")"
  fi
}
tiny=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --train-iters 20)
expect_error --num-attention-heads "${tiny[@]}" --hidden-size 64 --num-attention-heads 5
expect_error --global-batch-size "${tiny[@]}" --micro-batch-size 4 --global-batch-size 6
expect_error --no-such-flag "${tiny[@]}" --no-such-flag 3
expect_error --config --config "$tmp/missing.yaml"
expect_error --num-layers "${tiny[@]}" --num-layers abc
expect_error --max-position-embeddings "${tiny[@]}" --seq-length 128
expect_error --lr-decay-style "${tiny[@]}" --lr-decay-style exponential
expect_error --device "${tiny[@]}" --device tpu
printf 'num-layers: 2\nhiden-size: 64\n' >"$tmp/typo.yaml"
expect_error hiden-size --config "$tmp/typo.yaml"
echo "bad-flag cases failing: $fails"
[[ $fails -eq 0 ]]
