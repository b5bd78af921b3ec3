#!/usr/bin/env bash
# Single-process checks of training features on synthetic tokens (fast):
#  - evaluation does not disturb training: the training losses of a run that validates
#    every 3 iterations (the last one included, as Megatron) equal those of a run that
#    never validates;
#  - --bf16 (fp32 gradients, as Megatron-LM gives bf16 with or without
#    --accumulate-allreduce-grads-in-fp32) trains within 5e-3 of fp32, and so does
#    --grad-reduce-in-bf16 (bf16 gradients: other losses, 2 bytes a parameter less);
#  - a diverging run (absurd learning rate, no clipping: no grad norm in its log lines)
#    stops after --max-nan-iterations NaN losses with one line naming the flag and exit 2, and so do fp32 and bf16 runs whose every
#    step skips for an infinite gradient norm while the loss stays finite (huge init), and an
#    fp16 run whose constant --loss-scale overflows every step (named as such);
#  - --save-interval with --keep-last 2 leaves the newest two checkpoints; after a rollback
#    (30 iterations saved every 5, the pointer edited back to 10, resumed to 20) it keeps the
#    resumed run's 15 and 20 and leaves the abandoned 25 and 30, named once; resumed saving
#    every 7 instead, the abandoned 15 and 20 between its 14 and 21 do not count;
#  - Megatron's --iterations-to-skip reads the named iterations' batches past without a step:
#    the learning rate lags, the other iterations see the plain run's samples, and a resume
#    carries the skipped samples on;
#  - BigScience's --skip-train-iteration-range 3-5 reads the batches of iterations 3 to 5 past
#    and trains iteration 3 on the next one (at learning rate 0: the plain run's losses of 6 to
#    8), with the plain run's learning rates; resumed after the skip, with or without the flag,
#    it ends on the same line (the skip is neither lost nor repeated), and resumed from a
#    checkpoint inside the range that has not skipped it, it reads the range's rest past;
#    BigScience's --eval-only True evaluates as --skip-train;
#  - Megatron-core's --phase-transition-iterations saves and exits at each transition, and each
#    phase's launch reads its data from the start (at learning rate 0: the plain run's losses);
#  - Megatron's --save-retain-interval deletes each previous checkpoint not at a multiple of it
#    (logged, and in --log-progress's file), also the one a resumed run started from;
#  - a save that dies leaves its temporary directory, which the next save removes;
#  - SIGTERM finishes the current iteration (or evaluation batch), saves a checkpoint there and exits 0 (with
#    Megatron's --exit-signal-handler, which trident accepts and needs not); a second signal
#    while that save is written (test hook) does not kill it; one during the final evaluations
#    stops them, and one during the start-up ends the run before training, exit 0 both.
# Usage: training_features.sh TRAIN_BINARY REPO
set -euo pipefail
train=$1
repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --log-interval 1 --lr-warmup-iters 2
      --micro-batch-size 2 --global-batch-size 4 --hidden-dropout 0.1 --attention-dropout 0.1)
losses() { grep '^ iteration ' "$1" | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/'; }
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

"$train" "${args[@]}" --train-iters 12 --eval-iters 0 >"$tmp/plain.log"
"$train" "${args[@]}" --train-iters 12 --eval-interval 3 --eval-iters 2 >"$tmp/eval.log"
# Megatron evaluates at every multiple of --eval-interval, the last iteration included, then
# once more on the validation set and once on the test set.
[[ $(grep -c 'validation loss at iteration' "$tmp/eval.log") -eq 6 ]] || fail "expected 4 periodic + 2 final evaluations"
grep -q '^ validation loss at iteration 12 | ' "$tmp/eval.log" || fail "no periodic evaluation at the last iteration"
if cmp -s <(losses "$tmp/plain.log") <(losses "$tmp/eval.log"); then
  echo "evaluation every 3 iterations leaves all 12 training losses unchanged"
else
  fail "evaluation changed the training losses"
fi

# Megatron's --start-eval-at-iter 7: the periodic validations at 9 and 12 only (not 3 and 6),
# then the final ones. The one at 9 reads the first validation samples, as the run's with
# --eval-interval 9 does at 9: the same loss.
"$train" "${args[@]}" --train-iters 12 --eval-interval 3 --eval-iters 2 --start-eval-at-iter 7 >"$tmp/late.log"
"$train" "${args[@]}" --train-iters 12 --eval-interval 9 --eval-iters 2 >"$tmp/nine.log"
at() { grep "^ validation loss at iteration $2 | " "$1" | sed -E 's/.*lm loss value: ([0-9.E+-]+).*/\1/'; }
if [[ $(sed -nE 's/^ validation loss at iteration ([0-9]+) \| .*/\1/p' "$tmp/late.log" | tr '\n' ' ') == "9 12 " &&
      $(grep -c 'loss at iteration 12 on' "$tmp/late.log") -eq 2 && -n $(at "$tmp/late.log" 9) &&
      $(at "$tmp/late.log" 9) == "$(at "$tmp/nine.log" 9)" ]] && cmp -s <(losses "$tmp/plain.log") <(losses "$tmp/late.log"); then
  echo "--start-eval-at-iter 7: validations at 9 and 12 (loss at 9 $(at "$tmp/late.log" 9), as with --eval-interval 9)"
else
  fail "--start-eval-at-iter: $(grep 'loss at iteration' "$tmp/late.log" | tr '\n' ' ')"
fi

"$train" "${args[@]}" --train-iters 30 --eval-iters 0 --bf16 >"$tmp/bf16.log"
"$train" "${args[@]}" --train-iters 30 --eval-iters 0 >"$tmp/fp32.log"
paste <(losses "$tmp/fp32.log") <(losses "$tmp/bf16.log") | awk '
  { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d; n++ }
  END { printf "bf16 with fp32 gradients: %d iterations, max relative difference from fp32 %.2e\n", n, m;
        exit !(n == 30 && m <= 5e-3) }' || fail "bf16 with fp32 gradients"
# Megatron-core's --grad-reduce-in-bf16: bf16 gradients (2 bytes a parameter less at the peak:
# gpt2-tiny's 136960), still within 5e-3 of fp32, and not the fp32-gradient run's losses.
"$train" "${args[@]}" --train-iters 30 --eval-iters 0 --bf16 --grad-reduce-in-bf16 >"$tmp/bf16-grads.log"
peak() { sed -nE 's/.*after the first iteration: ([0-9.]+) MiB peak memory.*/\1/p' "$1"; }
paste <(losses "$tmp/fp32.log") <(losses "$tmp/bf16.log") <(losses "$tmp/bf16-grads.log") |
  awk -v with="$(peak "$tmp/bf16.log")" -v without="$(peak "$tmp/bf16-grads.log")" '
  { d = ($1 - $3) / $1; if (d < 0) d = -d; if (d > m) m = d; n++; other += $2 != $3 }
  END { saved = (with - without) * 1048576
        printf "bf16 gradients: %d iterations, max relative difference from fp32 %.2e, %d losses not the fp32-gradient run'"'"'s, %.0f bytes less at the peak\n", n, m, other, saved;
        exit !(n == 30 && m <= 5e-3 && other > 0 && saved > 2 * 136960 - 2 && saved < 2 * 136960 + 2) }' ||
  fail "bf16 with bf16 gradients (--grad-reduce-in-bf16)"

if "$train" "${args[@]}" --train-iters 50 --eval-iters 0 --lr 1e12 --lr-warmup-iters 0 --clip-grad 0 \
    --max-nan-iterations 2 >"$tmp/nan.log" 2>"$tmp/nan.err"; then
  fail "a diverging run did not stop"
else
  rc=$?
  if [[ $rc -eq 2 && $(wc -l <"$tmp/nan.err") -eq 1 ]] && grep -q -- '--max-nan-iterations 2' "$tmp/nan.err"; then
    echo "diverging run: $(cat "$tmp/nan.err")"
  else
    fail "diverging run: rc $rc"; cat "$tmp/nan.err"
  fi
fi
# Without clipping Megatron computes no gradient norm: the lines of the steps taken have none.
if grep -q '^ iteration .*lm loss' "$tmp/nan.log" && ! grep -q '^ iteration .*grad norm' "$tmp/nan.log"; then
  echo "--clip-grad 0: no grad norm in the log lines"
else
  fail "--clip-grad 0: a grad norm in the log lines, or no line of a step taken"; grep '^ iteration ' "$tmp/nan.log"
fi

# Without a loss scaler nothing recovers from infinite gradients: a finite loss, every step
# skipped, stopped by --max-nan-iterations like a NaN loss.
for precision in fp32 bf16; do
  flags=(--init-method-std 1e10 --hidden-dropout 0 --attention-dropout 0 --micro-batch-size 4 --global-batch-size 8
         --train-iters 50 --eval-iters 0 --max-nan-iterations 2)
  [[ $precision == fp32 ]] || flags+=(--bf16)
  rc=0
  "$train" "${args[@]}" "${flags[@]}" >"$tmp/inf.log" 2>"$tmp/inf.err" || rc=$?
  if [[ $rc -eq 2 && $(wc -l <"$tmp/inf.err") -eq 1 ]] && grep -q -- '--max-nan-iterations 2' "$tmp/inf.err" &&
      [[ $(grep -c '^ iteration .*number of skipped iterations:   1 | number of nan iterations:   0 |' "$tmp/inf.log") \
        -eq 2 ]]; then
    echo "$precision, infinite gradients: $(cat "$tmp/inf.err")"
  else
    fail "$precision, infinite gradients: rc $rc"; cat "$tmp/inf.err"
  fi
done
# fp16 at a constant scale too large for its gradients: the same stop, named as an overflow.
rc=0
"$train" "${args[@]}" --fp16 --loss-scale 4294967296 --train-iters 50 --eval-iters 0 --max-nan-iterations 2 \
  >"$tmp/ovf.log" 2>"$tmp/ovf.err" || rc=$?
if [[ $rc -eq 2 ]] && grep -q -- 'the fp16 gradients overflowed at the constant --loss-scale 4294967296 (steps skipped) for 3 iterations in a row (--max-nan-iterations 2); stopped at iteration 3: lower --loss-scale' "$tmp/ovf.err"; then
  echo "fp16, constant scale that overflows: $(cat "$tmp/ovf.err")"
else
  fail "fp16, constant scale that overflows: rc $rc: $(cat "$tmp/ovf.err")"
fi

"$train" "${args[@]}" --train-iters 12 --eval-iters 0 --save "$tmp/keep" --save-interval 3 --keep-last 2 >/dev/null
kept=$(cd "$tmp/keep" && ls -d iter_* | tr '\n' ' ')
[[ $kept == "iter_0000009 iter_0000012 " && $(cat "$tmp/keep/latest_checkpointed_iteration.txt") == 12 ]] &&
  echo "--keep-last 2: $kept" || fail "--keep-last 2 kept: $kept"

# Megatron's --iterations-to-skip 3 5: those iterations read their global batch past without a
# step or a log line. The learning rate then lags: the skipping run's rates at iterations 4, 6
# and 8 are the plain run's at 3, 4 and 6 (warm-up and cosine decay). At learning rate 0 (no
# dropout: the model never changes) its losses at 1, 2, 4, 6, 7 and 8 equal the plain run's:
# the same samples at the same places. Resumed from its checkpoint at 4, it carries the skipped
# samples on and ends on the same line.
field() { grep "^ iteration *$2/" "$1" | sed -E "s/.*$3: +([0-9.E+-]+).*/\1/"; }  # LOG ITERATION NAME
"$train" "${args[@]}" --train-iters 8 --eval-iters 0 >"$tmp/plain.log"
"$train" "${args[@]}" --train-iters 8 --eval-iters 0 --iterations-to-skip 3 5 --save "$tmp/skip" --save-interval 4 \
  >"$tmp/skip.log"
ok=1
for pair in "4 3" "6 4" "8 6"; do
  read -r a b <<<"$pair"
  [[ $(field "$tmp/skip.log" "$a" "learning rate") == "$(field "$tmp/plain.log" "$b" "learning rate")" ]] || ok=0
done
grep -q '^ iteration *[35]/' "$tmp/skip.log" && ok=0
grep -q "trident: skipped iteration 5 (--iterations-to-skip): 4 samples read past" "$tmp/skip.log" || ok=0
[[ $(field "$tmp/skip.log" 8 "skipped samples") == 8 && $(field "$tmp/skip.log" 8 "consumed samples") == 32 ]] || ok=0
[[ $ok == 1 ]] && echo "--iterations-to-skip 3 5: no lines for 3 and 5, the learning rate lags two updates, 8 samples skipped" ||
  fail "--iterations-to-skip: $(grep -E 'skipped|iteration +[0-9]+/' "$tmp/skip.log" | cut -c1-200)"
still=(--lr 0 --min-lr 0 --hidden-dropout 0 --attention-dropout 0)
"$train" "${args[@]}" "${still[@]}" --train-iters 8 --eval-iters 0 --save "$tmp/plain0" --save-interval 4 \
  >"$tmp/plain0.log"
"$train" "${args[@]}" "${still[@]}" --train-iters 8 --eval-iters 0 --iterations-to-skip 3 5 >"$tmp/skip0.log"
ok=1
for i in 1 2 4 6 7 8; do
  [[ $(field "$tmp/skip0.log" "$i" "lm loss") == "$(field "$tmp/plain0.log" "$i" "lm loss")" ]] || ok=0
done
[[ $ok == 1 ]] && echo "--iterations-to-skip at learning rate 0: the losses of 1, 2, 4, 6, 7 and 8 equal the plain run's" ||
  fail "--iterations-to-skip: another sample order than the plain run's"
rm -rf "$tmp/skip/iter_0000008"
echo 4 >"$tmp/skip/latest_checkpointed_iteration.txt"
"$train" "${args[@]}" --train-iters 8 --eval-iters 0 --iterations-to-skip 3 5 --load "$tmp/skip" >"$tmp/skip-resumed.log"
[[ $(grep '^ iteration *8/' "$tmp/skip-resumed.log" | sed -E 's/elapsed.*learning/learning/; s/\| tokens per second.*//') == \
   "$(grep '^ iteration *8/' "$tmp/skip.log" | sed -E 's/elapsed.*learning/learning/; s/\| tokens per second.*//')" ]] &&
  echo "--iterations-to-skip resumed at 4: iteration 8's line equals the uninterrupted run's" ||
  fail "--iterations-to-skip resumed: $(grep '^ iteration *8/' "$tmp/skip-resumed.log")"

# BigScience's --skip-train-iteration-range 3-5 over 6 iterations: on reaching iteration 3 the
# run reads the batches of 3 to 5 past and trains 3 to 6 on the plain run's batches of 6 to 9.
# At learning rate 0 its losses are the plain run's there (1 and 2 unchanged); resumed at 4
# from the plain run's checkpoint, which has not skipped, the range's rest (5) is read past and
# 5 to 7 train on the plain run's 6 to 8.
range=(--skip-train-iteration-range 3-5)
"$train" "${args[@]}" "${still[@]}" --train-iters 6 --eval-iters 0 "${range[@]}" >"$tmp/range0.log"
"$train" "${args[@]}" "${still[@]}" --train-iters 8 --eval-iters 0 "${range[@]}" --load "$tmp/plain0" --ckpt-step 4 \
  >"$tmp/range0-inside.log"
ok=1
for pair in "1 1" "2 2" "3 6" "4 7" "5 8"; do
  read -r a b <<<"$pair"
  [[ $(field "$tmp/range0.log" "$a" "lm loss") == "$(field "$tmp/plain0.log" "$b" "lm loss")" ]] || ok=0
done
for pair in "5 6" "6 7" "7 8"; do
  read -r a b <<<"$pair"
  [[ $(field "$tmp/range0-inside.log" "$a" "lm loss") == "$(field "$tmp/plain0.log" "$b" "lm loss")" ]] || ok=0
done
grep -q "skipped the data of iterations 3 to 5 (--skip-train-iteration-range 3-5): 12 samples read past" \
  "$tmp/range0.log" || ok=0
grep -q "skipped the data of iterations 5 to 5 (--skip-train-iteration-range 3-5): 4 samples read past" \
  "$tmp/range0-inside.log" || ok=0
[[ $ok == 1 ]] && echo "--skip-train-iteration-range 3-5 at learning rate 0: iterations 3 to 6 see the plain run's 6 to 9; resumed inside it, the rest is read past" ||
  fail "--skip-train-iteration-range: $(grep -hE 'skipped|error' "$tmp"/range0*.log | cut -c1-200)"
# With a learning rate: the plain run's rates (the schedule does not advance over the skip) and
# consumed samples; resumed at 4 (after the skip) with or without the flag, or at 2 (before it),
# iteration 6's line is the uninterrupted run's.
"$train" "${args[@]}" --train-iters 6 --eval-iters 0 >"$tmp/plain6.log"
"$train" "${args[@]}" --train-iters 6 --eval-iters 0 "${range[@]}" --save "$tmp/range" --save-interval 2 \
  >"$tmp/range.log"
ok=1
for i in 1 2 3 4 5 6; do
  for name in "learning rate" "consumed samples"; do
    [[ $(field "$tmp/range.log" "$i" "$name") == "$(field "$tmp/plain6.log" "$i" "$name")" ]] || ok=0
  done
done
line6() { grep '^ iteration *6/' "$1" | sed -E 's/elapsed[^|]*\|//; s/\| tokens per second.*//'; }
rm -rf "$tmp/range/iter_0000006"
for resume in "4 ${range[*]}" "4" "2 ${range[*]}"; do
  read -r step flags <<<"$resume"
  # shellcheck disable=SC2086
  "$train" "${args[@]}" --train-iters 6 --eval-iters 0 $flags --load "$tmp/range" --ckpt-step "$step" \
    >"$tmp/range-resumed.log"
  [[ $(line6 "$tmp/range-resumed.log") == "$(line6 "$tmp/range.log")" && -n $(line6 "$tmp/range.log") ]] || ok=0
done
[[ $ok == 1 ]] && echo "--skip-train-iteration-range 3-5: the plain run's rates and samples; resumed at 4 (with the flag or without) or at 2, iteration 6's line is the same" ||
  fail "--skip-train-iteration-range with a learning rate: $(line6 "$tmp/range.log") / $(line6 "$tmp/range-resumed.log")"
# BigScience's --eval-only True is Megatron's --skip-train: the same evaluations, no training.
"$train" "${args[@]}" --train-iters 4 --eval-iters 1 --skip-train >"$tmp/skip-train.log"
"$train" "${args[@]}" --train-iters 4 --eval-iters 1 --eval-only True >"$tmp/eval-only.log"
if cmp -s <(grep ' loss at ' "$tmp/skip-train.log") <(grep ' loss at ' "$tmp/eval-only.log") &&
    [[ $(grep -c ' loss at ' "$tmp/eval-only.log") -eq 2 ]] && ! grep -q '^ iteration ' "$tmp/eval-only.log"; then
  echo "--eval-only True: --skip-train's evaluations, no training"
else
  fail "--eval-only True: $(grep ' loss at \|^ iteration' "$tmp/eval-only.log" | head -3)"
fi

# Megatron-core's --phase-transition-iterations 6,3 over 8 iterations: the run saves and exits 0
# at 3 and at 6, and each launch after one trains its phase reading its data from the start: at
# learning rate 0 (the model never changes) the losses of 4 to 6 and of 7 and 8 are the plain
# run's of 1 to 3 and of 1 and 2. A resume at another --global-batch-size is refused.
phases=(--train-iters 8 --eval-iters 0 --phase-transition-iterations 6,3 --load "$tmp/phases")
ok=1
for launch in 1 2 3; do
  "$train" "${args[@]}" "${still[@]}" "${phases[@]}" --save "$tmp/phases" >"$tmp/phase$launch.log" || ok=0
done
grep -q "exiting at iteration 3 (--phase-transition-iterations), the end of phase 1 of 3 (iterations 1 to 3)" \
  "$tmp/phase1.log" || ok=0
grep -q "phase 2 of 3 (iterations 4 to 6), its training data read from its first sample (12 samples)" "$tmp/phase2.log" ||
  ok=0
grep -q "exiting at iteration 6 (--phase-transition-iterations)" "$tmp/phase2.log" || ok=0
grep -q "phase 3 of 3 (iterations from 7)" "$tmp/phase3.log" || ok=0
grep -q "trident: done, 8 iterations, 32 samples" "$tmp/phase3.log" || ok=0
for pair in "1 1" "3 3" "4 1" "6 3" "7 1" "8 2"; do
  read -r a b <<<"$pair"
  log=$tmp/phase$(((a + 2) / 3)).log
  [[ -n $(field "$log" "$a" "lm loss") && $(field "$log" "$a" "lm loss") == "$(field "$tmp/plain0.log" "$b" "lm loss")" ]] ||
    ok=0
done
[[ $(field "$tmp/plain0.log" 4 "lm loss") != "$(field "$tmp/plain0.log" 1 "lm loss")" ]] || ok=0  # other samples
[[ $(field "$tmp/phase2.log" 4 "consumed samples") == 16 ]] || ok=0
wide=()
for a in "${args[@]}"; do [[ $a == 4 && ${wide[-1]:-} == --global-batch-size ]] && wide+=(8) || wide+=("$a"); done
"$train" "${wide[@]}" "${still[@]}" "${phases[@]}" >/dev/null 2>"$tmp/err" && rc=0 || rc=$?
[[ $rc -eq 2 && $(wc -l <"$tmp/err") -eq 1 ]] &&
  grep -q "was written at --global-batch-size 4, this run's is 8: --phase-transition-iterations" "$tmp/err" || ok=0
[[ $ok == 1 ]] && echo "--phase-transition-iterations 6,3: exits at 3 and 6, each phase's data from its start, another global batch refused" ||
  fail "--phase-transition-iterations: $(grep -hE 'phase|exiting|error' "$tmp"/phase*.log "$tmp/err" | cut -c1-200)"

# Megatron's --save-retain-interval 4 with saves every 2: each save deletes the previous one
# unless it is a multiple of 4 (2 and 6 go, 4 and 8 stay, 10 is the latest), a resumed run
# deletes the checkpoint it resumed from (10) at its first save, and --log-progress records
# each deletion as Megatron does.
"$train" "${args[@]}" --train-iters 10 --eval-iters 0 --save "$tmp/retain" --save-interval 2 \
  --save-retain-interval 4 --log-progress >"$tmp/retain.log"
kept=$(cd "$tmp/retain" && ls -d iter_* | tr '\n' ' ')
deleted=$(grep -c 'Deleted checkpoint' "$tmp/retain/progress.txt" || true)
[[ $kept == "iter_0000004 iter_0000008 iter_0000010 " && $deleted -eq 2 ]] &&
  grep -q "trident: deleted checkpoint at iteration 6 from $tmp/retain (--save-retain-interval 4)" "$tmp/retain.log" &&
  grep -q $'Deleted checkpoint\tIteration: 2$' "$tmp/retain/progress.txt" &&
  echo "--save-retain-interval 4, saves every 2: $kept" || fail "--save-retain-interval 4 kept: $kept ($deleted deletions logged)"
"$train" "${args[@]}" --train-iters 12 --eval-iters 0 --load "$tmp/retain" --save "$tmp/retain" --save-interval 2 \
  --save-retain-interval 4 --override-opt_param-scheduler >/dev/null
kept=$(cd "$tmp/retain" && ls -d iter_* | tr '\n' ' ')
[[ $kept == "iter_0000004 iter_0000008 iter_0000012 " ]] &&
  echo "--save-retain-interval 4, resumed from 10 to 12: $kept" || fail "--save-retain-interval resumed kept: $kept"

"$train" "${args[@]}" --train-iters 30 --eval-iters 0 --save "$tmp/rollback" --save-interval 5 >/dev/null
echo 10 >"$tmp/rollback/latest_checkpointed_iteration.txt"
"$train" "${args[@]}" --train-iters 30 --eval-iters 0 --load "$tmp/rollback" --save "$tmp/rollback" --save-interval 5 \
  --keep-last 2 --exit-interval 20 >"$tmp/rollback.log"
kept=$(cd "$tmp/rollback" && ls -d iter_* | tr '\n' ' ')
if [[ $kept == "iter_0000015 iter_0000020 iter_0000025 iter_0000030 " &&
      $(cat "$tmp/rollback/latest_checkpointed_iteration.txt") == 20 &&
      $(grep -c -- '--keep-last' "$tmp/rollback.log") -eq 1 ]] &&
    grep -q -- "--keep-last: iter_0000020, iter_0000025, iter_0000030 in $tmp/rollback are not in the history" \
      "$tmp/rollback.log"; then
  echo "--keep-last 2 after a rollback to 10: $kept; $(grep -- '--keep-last' "$tmp/rollback.log")"
else
  fail "--keep-last 2 after a rollback kept: $kept"; grep -- '--keep-last' "$tmp/rollback.log"
fi
# The same rollback with the resumed run saving every 7: its 14 and 21 fall between the
# abandoned 15, 20, 25, 30, which must not push them out of --keep-last 3 (10 stays too).
"$train" "${args[@]}" --train-iters 30 --eval-iters 0 --save "$tmp/rollback7" --save-interval 5 >/dev/null
echo 10 >"$tmp/rollback7/latest_checkpointed_iteration.txt"
"$train" "${args[@]}" --train-iters 30 --eval-iters 0 --load "$tmp/rollback7" --save "$tmp/rollback7" --save-interval 7 \
  --keep-last 3 --exit-interval 21 >"$tmp/rollback7.log"
kept=$(cd "$tmp/rollback7" && ls -d iter_* | tr '\n' ' ')
if [[ $kept == "iter_0000010 iter_0000014 iter_0000015 iter_0000020 iter_0000021 iter_0000025 iter_0000030 " ]]; then
  echo "--keep-last 3 after a rollback to 10, saving every 7: $kept"
else
  fail "--keep-last 3 after a rollback, saving every 7, kept: $kept"
fi

if TRIDENT_TEST_CRASH_IN_SAVE=0 "$train" "${args[@]}" --train-iters 3 --eval-iters 0 --save "$tmp/crash" \
    >/dev/null 2>&1; then
  fail "a save that dies: exit 0"
fi
left=$(cd "$tmp/crash" && echo iter_0000003.tmp-*)
[[ -d $tmp/crash/$left ]] || fail "a save that dies left no temporary directory"
"$train" "${args[@]}" --train-iters 3 --eval-iters 0 --save "$tmp/crash" >"$tmp/crash.log"
if [[ ! -e $tmp/crash/$left &&
      $(ls -A "$tmp/crash" | tr '\n' ' ') == ".trident-save.lock iter_0000003 latest_checkpointed_iteration.txt " ]] &&
    grep -q "removed $tmp/crash/$left, left by a save whose process is gone" "$tmp/crash.log"; then
  echo "a save that died left $left; the next save removed it"
else
  fail "stale temporary: $(ls -A "$tmp/crash")"
fi

# stops_on <what> <signal> <flags...>: a run stopped by the signal after iteration 3 saves the
# iteration it stopped at and exits 0.
stops_on() {
  local what=$1 sig=$2 dir="$tmp/sig-$2"
  shift 2
  "$train" "${args[@]}" --train-iters 100000 --eval-iters 0 --save "$dir" "$@" >"$dir.log" 2>&1 &
  local pid=$! it
  for _ in $(seq 600); do grep -q '^ iteration  *3/' "$dir.log" && break; sleep 0.1; done
  kill -"$sig" "$pid"
  if wait "$pid"; then
    it=$(cat "$dir/latest_checkpointed_iteration.txt")
    grep -q "stop requested by a signal at iteration $it" "$dir.log" && [[ -d $dir/iter_$(printf %07d "$it") ]] &&
      echo "$what: saved iteration $it and exited 0" || fail "$what: no checkpoint at the stop"
  else
    fail "$what: exit status $?"
  fi
}
# Megatron's --exit-signal-handler asks for what trident always does.
stops_on SIGTERM TERM --exit-signal-handler
# Megatron's --exit-signal SIGUSR1 (a scheduler's warning before the time limit, e.g. Slurm's
# --signal=B:USR1@300): the same stop, where SIGUSR1 would otherwise kill the process.
stops_on "--exit-signal SIGUSR1" USR1 --exit-signal-handler --exit-signal SIGUSR1
# A signal during an evaluation (here one of 10^6 batches) stops it after the batch in
# flight: the iteration's checkpoint is saved, and the run exits 0 without waiting for the
# evaluation to end.
"$train" "${args[@]}" --train-iters 100 --eval-interval 2 --eval-iters 1000000 --save "$tmp/sig-eval" \
  >"$tmp/sig-eval.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q '^ iteration  *2/' "$tmp/sig-eval.log" && break; sleep 0.1; done
sleep 1
kill -TERM "$pid"
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL "$pid"
  fail "SIGTERM during an evaluation: still running 30 s later"
elif wait "$pid" && grep -q "stop requested by a signal during the evaluation at iteration 2" "$tmp/sig-eval.log" &&
    [[ $(cat "$tmp/sig-eval/latest_checkpointed_iteration.txt") == 2 ]]; then
  echo "SIGTERM during an evaluation: stopped it, saved iteration 2, exit 0"
else
  fail "SIGTERM during an evaluation: $(tail -2 "$tmp/sig-eval.log")"
fi
# A signal during the final evaluations (here one of 10^6 batches), after the last save:
# they stop after the batch in flight and the run exits 0 (the process is not killed).
"$train" "${args[@]}" --train-iters 3 --lr-decay-iters 8 --eval-iters 1000000 --save "$tmp/sig-final" \
  >"$tmp/sig-final.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "saved checkpoint at iteration 3" "$tmp/sig-final.log" && break; sleep 0.1; done
sleep 3  # into the evaluation (minutes long), past the end-of-training check
kill -TERM "$pid" || true
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL "$pid"
  fail "SIGTERM during the final evaluation: still running 30 s later"
elif wait "$pid" && grep -q "stop requested by a signal during the evaluation on validation set at iteration 3" \
    "$tmp/sig-final.log"; then
  echo "SIGTERM during the final evaluation: stopped it, exit 0"
else
  fail "SIGTERM during the final evaluation: $(tail -2 "$tmp/sig-final.log")"
fi
# A signal during the start-up (the test hook sends it once the checkpoint is loaded) is a
# request too: the run ends before training, exit 0, its checkpoint still the latest.
TRIDENT_TEST_SIGNAL_IN_LOAD=15 "$train" "${args[@]}" --train-iters 5 --lr-decay-iters 8 --eval-iters 0 --load "$tmp/sig-final" \
  --save "$tmp/sig-final" >"$tmp/sig-load.log" 2>&1 && rc=0 || rc=$?
if [[ $rc -eq 0 && $(cat "$tmp/sig-final/latest_checkpointed_iteration.txt") == 3 ]] &&
    grep -q "stop requested by a signal before iteration 4: exiting without training" "$tmp/sig-load.log" &&
    ! grep -q '^ iteration ' "$tmp/sig-load.log"; then
  echo "SIGTERM during the start-up: no training, exit 0"
else
  fail "SIGTERM during the start-up: exit $rc: $(tail -2 "$tmp/sig-load.log")"
fi
# A second signal while the stop's save is written (a scheduler sending SIGTERM again, a
# second Ctrl-C) must not kill the save: the test hook sends it right after the files are
# written. In the final save it ends the run there, without the final evaluations.
TRIDENT_TEST_SIGNAL_IN_SAVE=15 "$train" "${args[@]}" --train-iters 3 --eval-iters 1 --save "$tmp/sig2" \
  >"$tmp/sig2.log" 2>&1 && rc=0 || rc=$?
if [[ $rc -eq 0 && $(cat "$tmp/sig2/latest_checkpointed_iteration.txt") == 3 ]] &&
    grep -q "stop requested by a signal at the end of training: no final evaluation" "$tmp/sig2.log" &&
    ! grep -q "on validation set" "$tmp/sig2.log"; then
  echo "SIGTERM during the final save: saved iteration 3, no final evaluation, exit 0"
else
  fail "SIGTERM during the final save: exit $rc: $(tail -2 "$tmp/sig2.log")"
fi
TRIDENT_TEST_SIGNAL_IN_SAVE=2 "$train" "${args[@]}" --train-iters 6 --save-interval 2 --eval-iters 0 \
  --save "$tmp/sig3" >"$tmp/sig3.log" 2>&1 && rc=0 || rc=$?
if [[ $rc -eq 0 && $(cat "$tmp/sig3/latest_checkpointed_iteration.txt") == 2 ]] &&
    grep -q "stop requested by a signal at iteration 2" "$tmp/sig3.log"; then
  echo "SIGINT during a periodic save: saved iteration 2, stopped there, exit 0"
else
  fail "SIGINT during a periodic save: exit $rc: $(tail -2 "$tmp/sig3.log")"
fi
[[ $fails -eq 0 ]]
