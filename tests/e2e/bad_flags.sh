#!/usr/bin/env bash
# Each bad configuration must exit 2 and print exactly one line that names the flag (and the
# config file's line where the value is from), before training starts; a runtime failure
# (out of memory) exits 3, also on one process. A command-line flag
# replaces the config file's alternatives to it (the file sets --lr-warmup-iters).
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
  if [[ $rc -ne 2 || $lines -ne 1 ]] || ! grep -q -- "$flag" "$tmp/err" || ! grep -q '^trident-train: error: ' "$tmp/err" ||
      grep -q '^ iteration ' "$tmp/out"; then
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
expect_error "--config given twice" "${tiny[@]}" --config "$repo/configs/gpt2-124m.yaml"
expect_error --num-layers "${tiny[@]}" --num-layers abc
expect_error --max-position-embeddings "${tiny[@]}" --seq-length 128
expect_error --lr-decay-style "${tiny[@]}" --lr-decay-style exponential
expect_error --device "${tiny[@]}" --device tpu
expect_error "--override-opt_param-scheduler and --use-checkpoint-lr-scheduler are mutually exclusive" "${tiny[@]}" \
  --override-opt_param-scheduler --use-checkpoint-lr-scheduler
printf 'num-layers: 2\nhiden-size: 64\n' >"$tmp/typo.yaml"
expect_error hiden-size --config "$tmp/typo.yaml"
printf 'num-layers: 2\nhidden-size: 64\nnum_layers: 4\n' >"$tmp/duplicate.yaml"
expect_error "$tmp/duplicate.yaml:3: duplicate key 'num-layers' (first set at line 1)" --config "$tmp/duplicate.yaml"
printf 'num-layers: 2\nlr: 1.0e-3x\n' >"$tmp/bad_lr.yaml"
expect_error "--lr: cannot parse '1.0e-3x' as a number (from $tmp/bad_lr.yaml:2)" --config "$tmp/bad_lr.yaml"
expect_error "--lr must be a finite number >= 0, got -1" "${tiny[@]}" --lr -1
: >"$tmp/afile"
expect_error "--save: cannot create $tmp/afile/ck: $tmp/afile is not a directory" "${tiny[@]}" --save "$tmp/afile/ck"
[[ ! -e $tmp/afile/ck ]] || { echo "FAIL: --save created something"; fails=$((fails + 1)); }
expect_error "--lr-warmup-iters is iteration-based.*(from $repo/configs/gpt2-tiny.yaml:" \
  --config "$repo/configs/gpt2-tiny.yaml" --device cpu --train-samples 32
# A warm-up longer than the run names what the user sets: here --train-iters' default.
expect_error "--train-iters (100, the default) must exceed --lr-warmup-iters (700).*set --train-iters or" \
  --config "$repo/configs/gpt2-tiny.yaml" --device cpu --lr-warmup-iters 700
expect_error "--rampup-batch-size needs sample-based training" "${tiny[@]}" --rampup-batch-size 4 4 100
expect_error "--mock-data and --data-path" "${tiny[@]}" --mock-data --data-path "$tmp/x" --vocab-file "$tmp/v"

expect_run() {  # expect_run <what> <args...>: trains to the end
  local what=$1
  shift
  if "$train" "$@" --log-interval 1 >"$tmp/out" 2>"$tmp/err" && grep -q '^trident: done' "$tmp/out"; then
    echo "ok: $what"
  else
    echo "FAIL: $what:"; cat "$tmp/err"; fails=$((fails + 1))
  fi
}
base=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --eval-iters 0)
expect_run "--train-samples --lr-warmup-samples replace the config's --lr-warmup-iters" "${base[@]}" \
  --train-samples 32 --lr-warmup-samples 8
expect_run "--lr-warmup-fraction replaces the config's --lr-warmup-iters" "${base[@]}" --train-iters 4 \
  --lr-warmup-fraction 0.25
# Megatron-DeepSpeed's token counts: --lr-warmup-tokens replaces the config's warm-up in
# iterations; --train-tokens ends the run (512 tokens an iteration), the line counting tokens.
expect_run "--lr-warmup-tokens replaces the config's --lr-warmup-iters; --train-tokens stops" "${base[@]}" \
  --train-iters 20 --lr-warmup-tokens 1024 --lr-decay-tokens 8192 --train-tokens 2000
grep -qx "trident: --train-tokens 2000 reached at iteration 4 (2048 tokens)" "$tmp/out" &&
  grep -q "^ iteration        4/      20 | consumed samples:           32 | consumed tokens:         2048 |" \
    "$tmp/out" && ! grep -q "^ iteration        5/" "$tmp/out" && echo "ok: --train-tokens stops at iteration 4" ||
  { echo "FAIL: --train-tokens 2000:"; cat "$tmp/out"; fails=$((fails + 1)); }
expect_error "--lr-decay-tokens: --lr-decay-style WSD counts in iterations or samples" "${tiny[@]}" \
  --lr-decay-style WSD --lr-wsd-decay-iters 5 --lr-decay-tokens 9000
# Megatron-DeepSpeed's DeepSpeed config: the run takes its precision and scaler from the file
# (fp16 from 2^12), and the implementation keys are named in the note.
printf '{"train_micro_batch_size_per_gpu": 4, "train_batch_size": 8, "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 1, "overlap_comm": true},
  "fp16": {"enabled": true, "initial_scale_power": 12}, "steps_per_print": 10}\n' >"$tmp/ds.json"
expect_run "--deepspeed --deepspeed_config" "${base[@]}" --train-iters 12 --deepspeed --deepspeed_config "$tmp/ds.json" \
  --deepspeed-activation-checkpointing
grep -q "dtype fp16" "$tmp/out" && grep -q "^ iteration        1/      12 .* loss scale: 4096.0 |" "$tmp/out" &&
  grep -qx "trident-train: note: --deepspeed_config $tmp/ds.json's steps_per_print, zero_optimization.overlap_comm --deepspeed-activation-checkpointing: accepted as Megatron accepts them, without effect here" \
    "$tmp/out" && echo "ok: the DeepSpeed config sets fp16 and its scale" ||
  { echo "FAIL: --deepspeed_config:"; cat "$tmp/out"; fails=$((fails + 1)); }
# At ZeRO stage 0 (no "zero_optimization") DeepSpeed's FP16_Optimizer scales: with a window
# of 2 the scale grows after the 3rd clean iteration, then every 2nd (Megatron's rule: after
# the 2nd).
printf '{"train_micro_batch_size_per_gpu": 4, "train_batch_size": 8,
  "fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 2}}\n' >"$tmp/ds0.json"
expect_run "--deepspeed_config at ZeRO stage 0, fp16" "${base[@]}" --train-iters 12 --deepspeed \
  --deepspeed_config "$tmp/ds0.json"
scales=$(sed -nE 's/^ iteration +([0-9]+)\/.* loss scale: ([0-9.]+) .*/\1:\2/p' "$tmp/out" | head -5 | tr '\n' ' ')
[[ $scales == "1:4096.0 2:4096.0 3:8192.0 4:8192.0 5:16384.0 " ]] &&
  echo "ok: ZeRO stage 0's fp16 scale grows as DeepSpeed's FP16_Optimizer's ($scales)" ||
  { echo "FAIL: ZeRO stage 0's fp16 scale: $scales"; cat "$tmp/out"; fails=$((fails + 1)); }
printf '{"zero_optimization": {"stage": 3}}\n' >"$tmp/ds3.json"
expect_error "--deepspeed_config $tmp/ds3.json: \"zero_optimization.stage\": ZeRO stage 3" "${tiny[@]}" --deepspeed \
  --deepspeed_config "$tmp/ds3.json"
# Megatron's implementation switches from its example scripts: accepted, named in one note.
expect_run "Megatron's implementation switches accepted" "${base[@]}" --train-iters 12 --DDP-impl local \
  --no-masked-softmax-fusion --data-impl mmap
grep -qx "trident-train: note: --DDP-impl --data-impl --no-masked-softmax-fusion: accepted as Megatron accepts them, without effect here" \
  "$tmp/out" && echo "ok: the note names them" || { echo "FAIL: no note naming the switches"; fails=$((fails + 1)); }
# Without its bias-GELU fusion Megatron computes the exact GELU (the legacy model's with
# --openai-gelu the tanh one), and so does trident: the model line says which, the losses differ
# (with weights large enough that the activations reach where the two GELUs part).
wide=(--init-method-std 1)
expect_run "--no-bias-gelu-fusion" "${base[@]}" "${wide[@]}" --train-iters 12 --no-bias-gelu-fusion
cp "$tmp/out" "$tmp/erf.out"
expect_run "--no-bias-gelu-fusion with --openai-gelu" "${base[@]}" "${wide[@]}" --train-iters 12 --no-bias-gelu-fusion \
  --openai-gelu --use-legacy-models
cp "$tmp/out" "$tmp/legacy.out"
expect_run "the default GELU" "${base[@]}" "${wide[@]}" --train-iters 12
loss12() { grep '^ iteration *12/' "$1" | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/'; }
if grep -q "^trident: GPT-2 .*, erf GELU$" "$tmp/erf.out" && ! grep -q "erf GELU" "$tmp/out" "$tmp/legacy.out" &&
    [[ -n $(loss12 "$tmp/out") && $(loss12 "$tmp/erf.out") != "$(loss12 "$tmp/out")" &&
       $(loss12 "$tmp/legacy.out") == "$(loss12 "$tmp/out")" ]]; then
  echo "ok: --no-bias-gelu-fusion trains the erf GELU (loss at 12 $(loss12 "$tmp/erf.out"), tanh $(loss12 "$tmp/out"))"
else
  echo "FAIL: --no-bias-gelu-fusion: $(grep -h 'GPT-2\|iteration *12/' "$tmp/erf.out" "$tmp/out" | cut -c1-160)"
  fails=$((fails + 1))
fi
# Saving flags without --save: one note naming them (nothing is saved).
expect_run "saving flags without --save" "${base[@]}" --train-iters 12 --save-interval 2 --keep-last 1
grep -qx "trident-train: note: --save-interval --keep-last without --save: no checkpoint is saved" "$tmp/out" &&
  echo "ok: the note names them" || { echo "FAIL: no note naming --save-interval --keep-last"; fails=$((fails + 1)); }
# One of N > 1 processes that a launcher started without MPI (srun --mpi=none): rank 0 says so
# in one line, the others exit 2 silently; nothing trains.
SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 expect_error "the launcher started 2 processes without MPI" "${tiny[@]}"
env SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1 "$train" "${tiny[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [[ $rc -eq 2 && ! -s $tmp/err && ! -s $tmp/out ]]; then
  echo "ok: rank 1 of 2 started without MPI: exit 2, nothing printed"
else
  echo "FAIL: rank 1 of 2 started without MPI: rc=$rc, $(cat "$tmp/err")"; fails=$((fails + 1))
fi
# A runtime failure (here a model that cannot be allocated) exits 3, one line, as under MPI.
"$train" --device cpu --mock-data --eval-iters 0 --num-layers 1 --hidden-size 1048576 --num-attention-heads 1 \
  --seq-length 16 --max-position-embeddings 16 --vocab-size 256 --micro-batch-size 2 --train-iters 2 \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
if [[ $rc -eq 3 && $(wc -l <"$tmp/err") -eq 1 ]] && grep -q '^trident-train: error: out of memory' "$tmp/err"; then
  echo "ok: a runtime failure -> exit 3: $(cat "$tmp/err")"
else
  echo "FAIL: a runtime failure: rc=$rc, $(cat "$tmp/err")"; fails=$((fails + 1))
fi
# BigScience's and Megatron-DeepSpeed's: a skip range that is none, one that ends before it
# starts, skip ranges with phases (whose data starts move), --eval-only False (which BigScience
# reads as true), a --load-tag that names no iteration.
expect_error "--skip-train-iteration-range: '300' is not a range FIRST-LAST" "${tiny[@]}" \
  --skip-train-iteration-range 3-5 300
expect_error "--skip-train-iteration-range: '0-5' is not a range" "${tiny[@]}" \
  --skip-train-iteration-range 0-5
expect_error "--skip-train-iteration-range: 9-5 ends before it starts" "${tiny[@]}" --skip-train-iteration-range 9-5
expect_error "--skip-train-iteration-range and --phase-transition-iterations" "${tiny[@]}" \
  --skip-train-iteration-range 3-5 --phase-transition-iterations 10
expect_error "--eval-only False: Megatron-DeepSpeed reads any value as true" "${tiny[@]}" --eval-only False
expect_error "--load-tag latest: expected a checkpoint's iteration" "${tiny[@]}" --load "$tmp" --load-tag latest
expect_error "--load-tag needs --load" "${tiny[@]}" --load-tag global_step5
expect_error "--load-tag global_step5 and --ckpt-step 4 name different checkpoints" "${tiny[@]}" --load "$tmp" \
  --load-tag global_step5 --ckpt-step 4
# --save-canonical into a directory that does not exist: refused at start, not after training.
expect_error --save-canonical "${tiny[@]}" --mock-data --save-canonical "$tmp/no/such/dir/params.safetensors"
# Outputs that stop being writable during the run (a full disk; here a file-size limit,
# SIGXFSZ ignored so that writes fail with EFBIG): the run stops there, exit 3 (a runtime
# failure, not bad input), one line naming the file, instead of training on (the TensorBoard
# events) or ending with exit 0.
run=("$train" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --mock-data --eval-iters 0 --log-interval 1
     --train-iters 200)
(ulimit -f 4; trap '' XFSZ; exec "${run[@]}" --tensorboard-dir "$tmp/tb") > >(cat >"$tmp/tb.out") 2>"$tmp/tb.err"
rc=$?
sleep 0.2  # the log's reader
last=$(grep '^ iteration ' "$tmp/tb.out" | tail -1 | sed -E 's/^ iteration +([0-9]+)\/.*/\1/')
if [[ $rc -eq 3 && $(wc -l <"$tmp/tb.err") -eq 1 && ${last:-200} -lt 50 ]] &&
    grep -q '^trident-train: error: .*/tb/events.out.tfevents.*: \(write\|flush\) failed: File too large$' "$tmp/tb.err"; then
  echo "ok: an event file that cannot grow stops the run at iteration $last: $(cat "$tmp/tb.err")"
else
  echo "FAIL: an event file that cannot grow: rc=$rc, last iteration ${last:-none}, $(cat "$tmp/tb.err")"
  fails=$((fails + 1))
fi
(ulimit -f 4; trap '' XFSZ; exec "${run[@]}" >"$tmp/log.out") 2>"$tmp/log.err"
rc=$?
if [[ $rc -eq 3 && $(cat "$tmp/log.err") == "trident-train: error: the training log (standard output): a write failed: File too large" ]]; then
  echo "ok: a log that cannot grow stops the run: $(cat "$tmp/log.err")"
else
  echo "FAIL: a log that cannot grow: rc=$rc, $(cat "$tmp/log.err")"; fails=$((fails + 1))
fi
# A log whose first lines already failed (standard output on a full disk from the start): the
# first iteration's line stops the run, exit 3, rather than training on into nothing.
"${run[@]}" --log-interval 1 >/dev/full 2>"$tmp/full.err"
rc=$?
if [[ $rc -eq 3 && $(cat "$tmp/full.err") == "trident-train: error: the training log (standard output): a write failed" ]]; then
  echo "ok: a log on a full disk from the start stops the run: $(cat "$tmp/full.err")"
else
  echo "FAIL: a log on a full disk from the start: rc=$rc, $(cat "$tmp/full.err")"; fails=$((fails + 1))
fi
# A tool whose output does not reach standard output fails: exit 3, one line.
"$train" --help >/dev/full 2>"$tmp/help.err"
rc=$?
if [[ $rc -eq 3 && $(wc -l <"$tmp/help.err") -eq 1 ]] && grep -q '^trident-train: error: standard output: a write failed' "$tmp/help.err"; then
  echo "ok: --help into a full disk: $(cat "$tmp/help.err")"
else
  echo "FAIL: --help into a full disk: rc=$rc, $(cat "$tmp/help.err")"; fails=$((fails + 1))
fi
echo "bad-flag cases failing: $fails"
[[ $fails -eq 0 ]]
