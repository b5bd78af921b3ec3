#!/usr/bin/env bash
# trident-bench --generate on the CPU: a batch of 2 prompts of 20 tokens on gpt2-tiny, 8 new
# tokens each: the prefill line counts 40 prompt tokens, the decode line 7 steps (the last
# token drawn is not fed back), both rates positive; with --generate-ragged, prompts of 10 and
# 20 tokens: one pass + 7 steps each at its own length, 17 steps from the shortest prompt's
# end; the decode profile line: per step the 2 layers' attention calls and one greedy draw on
# the device (logits_argmax), and the time outside the ops; the sampled decode line: 7 steps
# under top-k 50 and top-p 0.9, drawn on the device and on the host. Refused, one line and
# exit 2: prompt + new tokens past the learned positions, ragged
# prompts + new tokens past the sequence length, --generate with --kernels, with tensor
# parallelism.
#   tests/e2e/bench_generate.sh <trident-bench> <repo>
set -uo pipefail
bench=$1 repo=$2
model=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --micro-batch-size 2)
out=$(OMP_NUM_THREADS=2 "$bench" --generate "${model[@]}" --generate-prompt 20 --generate-tokens 8 --generate-ragged 2>&1)
rc=$?
echo "$out"
[[ $rc -eq 0 ]] || { echo "FAIL: trident-bench --generate exited $rc"; exit 1; }
grep -q "^trident-bench --generate: cpu, fp32, 2 layers, hidden 64, heads 4, 2 sequences, prompt 20, 8 new tokens$" \
  <<<"$out" || { echo "FAIL: the header line"; exit 1; }
awk '/^prefill: 40 tokens in / { p = ($8 > 0) } /^decode: 7 steps in / { d = ($8 > 0 && $13 > 0) }
     END { exit !(p && d) }' <<<"$out" || { echo "FAIL: the prefill and decode lines"; exit 1; }
grep -qE "^ragged: prompts of 10\.\.20 tokens, 8 new: each at its own length [0-9.]+ ms \(1 pass \+ 7 steps\) \| every \
sequence a step from the shortest prompt [0-9.]+ ms \(17 steps\) \| [0-9.]+x$" <<<"$out" || { echo "FAIL: the ragged line"; exit 1; }
profile=$(grep -E "^decode profile \(every op synchronised\): [0-9.]+ ms a step: .*; outside the ops -?[0-9.]+ ms$" <<<"$out")
grep -qE "(: |, )attention [0-9.]+ ms x2(,|;)" <<<"$profile" && grep -qE "(: |, )argmax [0-9.]+ ms x1(,|;)" <<<"$profile" ||
  { echo "FAIL: the decode profile line"; exit 1; }
grep -qE "^sampled decode \(temperature 1, 7 steps\): top-k 50: drawn on the device [0-9.]+ ms a step \| on the host \
[0-9.]+ ms \| [0-9.]+x; top-p 0\.9: drawn on the device [0-9.]+ ms a step \| on the host [0-9.]+ ms \| [0-9.]+x$" \
  <<<"$out" || { echo "FAIL: the sampled decode line"; exit 1; }
refused() {  # refused <what the message names> <flags...>
  local want=$1 err rc
  shift
  err=$("$bench" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 || $(wc -l <<<"$err") -ne 1 || $err != *"$want"* ]]; then
    echo "FAIL: trident-bench $*: rc=$rc, stderr: $err"
    exit 1
  fi
  echo "ok: $err"
}
refused "--generate-tokens 8" --generate "${model[@]}" --generate-prompt 60 --generate-tokens 8
refused "past --seq-length 64" --generate "${model[@]}" --generate-prompt 60 --generate-tokens 8 --generate-ragged \
  --max-position-embeddings 128
refused "--kernels and --generate" --generate --kernels
refused "--tensor-model-parallel-size" --generate "${model[@]}" --tensor-model-parallel-size 2
echo PASS
