#!/usr/bin/env bash
# fp16 and bf16 training against fp32 on the demo corpus (gpt2-tiny shape, GPT-2 vocab,
# 100 iterations), on one process and at tp2 x pp2 x dp2; the loss scaler backing off from
# an absurd scale; and the TensorBoard event file of a run decoded by an independent reader.
#
# Tolerances, per iteration, relative to the fp32 loss:
#   bf16 5e-3: one bf16 rounding is up to 2^-9 = 2e-3 relative; the loss is a mean over
#              thousands of token losses and the weights are updated from fp32 masters, so
#              the curves stay close (measured: 5e-4 on one process; 1.4e-3 at tp2 x pp2,
#              where each row-parallel partial sum is rounded to bf16 before the
#              all-reduce), while a real bug (a wrong cast, a lost loss scale, master
#              weights out of step) moves the loss by more than 1e-2 within a few iterations.
#   fp16 1e-3: fp16 keeps 3 more mantissa bits (2^-11 = 5e-4); measured 2e-4 (one process)
#              and 4.6e-4 (tp2 x pp2 x dp2) at worst.
# The fp16 comparison runs with --initial-loss-scale 4096 so that no step is skipped (with
# Megatron's default 2^32 the first ~16 steps are skipped by design, which shifts the curve).
# Usage: mixed_precision.sh TRAIN PREPROCESS REPO GPT2_VOCAB_DIR
set -euo pipefail
train=$1 preprocess=$2 repo=$3 vocab=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$repo/tools/make-demo-data.sh" "$tmp/demo.jsonl" >/dev/null
"$preprocess" --input "$tmp/demo.jsonl" --json-keys text --output-prefix "$tmp/demo" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" \
  --append-eod --workers 2 >/dev/null 2>&1
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --data-path "$tmp/demo_text_document"
      --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" --split 949,50,1
      --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4
      --train-iters 100 --lr 2e-3 --min-lr 2e-4 --lr-warmup-iters 10 --log-interval 1 --eval-iters 0)
# The lm loss of each iteration line that has one (a line of skipped iterations only has none).
losses() { grep '^ iteration ' "$1" | sed -nE 's/.*lm loss: ([0-9.E+-]+).*/\1/p'; }
fails=0
compare() {  # compare <reference log> <log> <tolerance> <tag>
  paste <(losses "$1") <(losses "$2") | awk -v tol="$3" -v tag="$4" '
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > max || $2 != $2 + 0) max = d; n++ }
    END { printf "%s: %d iterations, max relative loss difference from fp32 %.2e (tolerance %s)\n", tag, n, max, tol;
          exit !(n == 100 && max <= tol) }' || { echo "FAIL $4"; fails=$((fails + 1)); }
}
run() { local log=$1; shift; "$train" "${args[@]}" "$@" >"$log"; }
mpi8() { local log=$1; shift; mpirun --oversubscribe -np 8 --bind-to none "$train" "${args[@]}" \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "$@" >"$log"; }

run "$tmp/fp32.log" --tensorboard-dir "$tmp/tb"
run "$tmp/bf16.log" --bf16
run "$tmp/fp16.log" --fp16 --initial-loss-scale 4096
compare "$tmp/fp32.log" "$tmp/bf16.log" 5e-3 "bf16, one process"
compare "$tmp/fp32.log" "$tmp/fp16.log" 1e-3 "fp16, one process"
mpi8 "$tmp/bf16-8.log" --bf16 --zero-stage 1
mpi8 "$tmp/fp16-8.log" --fp16 --initial-loss-scale 4096 --zero-stage 2
compare "$tmp/fp32.log" "$tmp/bf16-8.log" 5e-3 "bf16, tp2 x pp2 x dp2 zero 1"
compare "$tmp/fp32.log" "$tmp/fp16-8.log" 1e-3 "fp16, tp2 x pp2 x dp2 zero 2"

# An absurd initial scale (2^40) at tp2 x pp2 x dp2: an overflow on any rank skips the step
# on every rank while the scale backs off (one hysteresis step, then halving: 25 skips to
# 2^16), then training proceeds; no parameter may be NaN or infinite.
mpi8 "$tmp/absurd.log" --fp16 --initial-loss-scale 1099511627776 --train-iters 60 \
  --save-canonical "$tmp/absurd.safetensors" --tensorboard-dir "$tmp/tb-absurd"
last=$(grep '^ iteration ' "$tmp/absurd.log" | tail -1)
# The line's counts are per log interval (Megatron's): their sum is the run's.
skipped=$(grep '^ iteration ' "$tmp/absurd.log" | sed -E 's/.*number of skipped iterations: *([0-9]+).*/\1/' |
  awk '{ s += $1 } END { print s }')
scale=$(sed -E 's/.*loss scale: ([0-9.]+).*/\1/' <<<"$last")
first_trained=$(losses "$tmp/absurd.log" | head -1)
end=$(losses "$tmp/absurd.log" | tail -10 | awk '{ s += $1 } END { print s / NR }')
echo "absurd scale 2^40: $skipped skipped iterations, final loss scale $scale, first trained loss $first_trained, mean of last 10 $end"
if ! awk -v k="$skipped" -v s="$scale" -v a="$first_trained" -v b="$end" \
    'BEGIN { exit !(k >= 10 && k < 60 && s < 1099511627776 && b < a - 0.5) }'; then
  echo "FAIL absurd loss scale"; fails=$((fails + 1))
fi
python3 - "$tmp/absurd.safetensors" <<'PY' || fails=$((fails + 1))
import json, math, struct, sys
from array import array
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n]); header.pop("__metadata__", None)
bad = [k for k, v in header.items()
       if any(not math.isfinite(x) for x in array("f", blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]))]
print("parameters with inf/NaN:", bad or "none")
sys.exit(1 if bad else 0)
PY

# TensorBoard: the event files decode (CRCs checked) and their scalars are the logged values,
# iteration by iteration: "lm loss" of the fp32 run, and "loss-scale" of the backing-off run,
# which Megatron writes after the scaler's update, as its log line shows it (values that
# never change could not tell a lagging scalar from the right one).
tensorboard_matches_log() {  # <event dir> <tag> <file of logged values, one per iteration> <iterations>
  local events
  events=$(ls "$1"/events.out.tfevents.*)
  python3 "$repo/tests/unit/train/read_tfevents.py" "$events" >"$tmp/events.txt"
  python3 - "$tmp/events.txt" "$2" "$3" "$4" <<'PY'
import struct, sys
records, tag, logged, n = sys.argv[1], sys.argv[2], [float(x) for x in open(sys.argv[3])], int(sys.argv[4])
tb = {}
for line in open(records):
    f = line.split()
    if f[0] == "scalar" and bytes.fromhex(f[2]).decode() == tag:
        tb[int(f[1])] = struct.unpack("<f", struct.pack("<I", int(f[3], 16)))[0]
worst = max(abs(tb[i + 1] - v) / v for i, v in enumerate(logged))
changes = sum(logged[i] != logged[i - 1] for i in range(1, len(logged)))
print(f"tensorboard: {len(tb)} '{tag}' scalars, {changes} changes, max relative difference from the log {worst:.1e}")
sys.exit(0 if len(tb) == len(logged) == n and worst < 1e-6 and changes > 0 else 1)
PY
}
tensorboard_matches_log "$tmp/tb" "lm loss" <(losses "$tmp/fp32.log") 100 || fails=$((fails + 1))
tensorboard_matches_log "$tmp/tb-absurd" "loss-scale" \
  <(grep '^ iteration ' "$tmp/absurd.log" | sed -E 's/.*loss scale: ([0-9.]+).*/\1/') 60 || fails=$((fails + 1))
# As Megatron: the loss of every iteration, skipped ones included; the loss scale against
# samples too; the gradient norm only of the steps that were taken.
python3 "$repo/tests/unit/train/read_tfevents.py" "$(ls "$tmp"/tb-absurd/events.out.tfevents.*)" >"$tmp/absurd-events.txt"
python3 - "$tmp/absurd-events.txt" "$skipped" <<'PY' || fails=$((fails + 1))
import sys
counts = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "scalar":
        tag = bytes.fromhex(f[2]).decode()
        counts[tag] = counts.get(tag, 0) + 1
want = {"lm loss": 60, "lm loss vs samples": 60, "loss-scale vs samples": 60, "grad-norm": 60 - int(sys.argv[2])}
got = {tag: counts.get(tag, 0) for tag in want}
print("tensorboard, absurd scale, scalars per tag:", got)
sys.exit(0 if got == want else 1)
PY
[[ $fails -eq 0 ]]
