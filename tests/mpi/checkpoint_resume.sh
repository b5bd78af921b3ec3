#!/usr/bin/env bash
# Checkpoints: exact resume (20 iterations == 10, stop, --load, 10 more: every logged loss,
# learning rate and loss scale and every final parameter bit-identical) on one process and
# at tp2 x pp2 x dp2 with fp32/fp16 and ZeRO 0/1/2, in bf16 (pp2 x dp2; tp2 x dp2 with ZeRO 1 and
# bf16 gradients, --grad-reduce-in-bf16), at dp2 with --overlap-param-gather
# (saved at 5), and in fp16 with skipped iterations before and after the stop (the LR schedule advances only on the updates, so its position
# must come back from the checkpoint); an fp16 or bf16 checkpoint loaded in fp32 gives the
# parameters the checkpoint's fp32 masters, bit for bit (read from its optimizer files by
# check_masters.py), on 1 and 4 ranks; a tp2 x pp2 checkpoint continued at tp1, tp4 and pp4
# gives the losses the unchanged layout gives; a rank dying mid-save leaves the previous
# checkpoint the latest and loadable, and the next save removes its temporary; corrupt and
# truncated files are named (under mpirun by rank 0 when another rank read the file, and no
# rank reports the checkpoint loaded); a resumed run with another learning rate fails on every rank
# with one line unless told which schedule wins; a missing --load directory starts from
# scratch; --async-save writes the synchronous save's files, commits each save while training
# goes on, and a rank dying in its writer thread leaves the previous checkpoint the latest.
# Usage: checkpoint_resume.sh TRAIN_BINARY REPO
set -euo pipefail
train=$1
repo=$2
# shellcheck source=tests/mpi/mpi_test_lib.sh
source "$repo/tests/mpi/mpi_test_lib.sh"
# The decay length is fixed (not --train-iters') so that the shorter continuations below
# resume with the checkpoint's learning-rate schedule, which a resumed run must match.
args=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers 4 --device cpu --train-iters 20 --lr-decay-iters 20
      --log-interval 1 --lr-warmup-iters 2 --micro-batch-size 2 --global-batch-size 8 --hidden-dropout 0.1
      --attention-dropout 0.1 --eval-interval 10 --eval-iters 1)

# ---- exact resume -------------------------------------------------------------------------
exact() {  # exact <tag> <np> <flags...>; stop_at=N stops and saves the first run at N (10)
  local tag=$1 np=$2 d="$tmp/$1" stop=${stop_at:-10}
  shift 2
  mkdir -p "$d"
  launch "$np" "$@" --save-canonical "$d/straight.st" >"$d/straight.log"
  launch "$np" "$@" --save "$d/ckpt" --save-interval "$stop" --exit-interval "$stop" >"$d/first.log"
  launch "$np" "$@" --load "$d/ckpt" --save-canonical "$d/resumed.st" >"$d/second.log"
  grep -q "loaded checkpoint" "$d/second.log" || { fail "$tag: nothing loaded"; return; }
  logged "$d/straight.log" >"$d/a.txt"
  cat <(logged "$d/first.log") <(logged "$d/second.log") >"$d/b.txt"
  if cmp -s "$d/a.txt" "$d/b.txt" && [[ $(grep -c 'lm loss' "$d/a.txt") -ge ${min_losses:-20} ]]; then
    echo "$tag: $(wc -l <"$d/a.txt") logged values ($(grep -c 'lm loss' "$d/a.txt") losses) identical after resume"
  else
    fail "$tag: logged values differ after resume"; paste "$d/a.txt" "$d/b.txt"
  fi
  python3 "$repo/tests/mpi/compare_params.py" "$d/straight.st" "$d/resumed.st" 0 "$tag" || fail "$tag: parameters"
}
exact "fp32, one process" 1
exact "fp16, one process" 1 --fp16 --initial-loss-scale 4096
exact "fp32, tp2 pp2 dp2 zero 1" 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 1
exact "fp16, tp2 pp2 dp2 zero 2" 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 2 \
  --fp16 --initial-loss-scale 4096
exact "bf16, tp1 pp2 dp2 zero 0" 4 --pipeline-model-parallel-size 2 --bf16
exact "bf16 gradients, tp2 dp2 zero 1" 4 --tensor-model-parallel-size 2 --zero-stage 1 --bf16 --grad-reduce-in-bf16
# The save at 5 (no evaluation there) reads parameters whose gathers no forward has waited
# for yet: the checkpoint must wait for them (their buffers are NaN until then in these tests).
stop_at=5 exact "fp32, dp2 zero 1 --overlap-param-gather" 2 --zero-stage 1 --overlap-param-gather
# A scale at the edge of overflowing that grows back every 3 clean steps: skipped iterations
# on both sides of the stop (checked below), so the LR schedule lags the consumed samples.
min_losses=10 exact "fp16 with skipped iterations, one process" 1 --fp16 --initial-loss-scale 1048576 \
  --loss-scale-window 3
skips() { grep '^ iteration ' "$1" | grep -vc 'lm loss' || true; }
d="$tmp/fp16 with skipped iterations, one process"
[[ $(skips "$d/first.log") -ge 1 && $(skips "$d/second.log") -ge 1 ]] &&
  echo "fp16 resume: $(skips "$d/first.log") skipped iterations before the stop, $(skips "$d/second.log") after" ||
  fail "fp16 resume: expected skipped iterations before and after the stop"

# A 16-bit checkpoint loaded by an fp32 run gives it the checkpoint's fp32 master weights, not
# its 16-bit ones: the parameters right after loading (--train-iters 10 at iteration 10:
# nothing trained) must equal, bit for bit, the masters that tests/mpi/check_masters.py reads
# from the checkpoint's optimizer files with its own reader, and differ from its model files'
# 16-bit weights; on one process from the fp16 tp2 x pp2 x dp2 ZeRO 2 and the bf16 pp2 x dp2
# checkpoints, and at tp2 x dp2 with ZeRO 1, where ranks read master pieces from each other's
# files.
masters() {  # masters <checkpoint tag> <np> <flags...>
  local src=$1 np=$2 d="$tmp/$1"
  shift 2
  local tag="$src checkpoint loaded in fp32 on $np rank(s)"
  rm -f "$d/fp32.st"
  launch "$np" "$@" --load "$d/ckpt" --train-iters 10 --save-canonical "$d/fp32.st" >"$d/fp32.log" &&
    grep -q "loaded checkpoint" "$d/fp32.log" || { fail "$tag: did not load"; return; }
  python3 "$repo/tests/mpi/check_masters.py" "$d/fp32.st" "$d/ckpt/iter_0000010" "$tag" || fail "$tag"
}
masters "fp16, tp2 pp2 dp2 zero 2" 1
masters "fp16, tp2 pp2 dp2 zero 2" 4 --tensor-model-parallel-size 2 --zero-stage 1
masters "bf16, tp1 pp2 dp2 zero 0" 1

# ---- any layout -------------------------------------------------------------------------
d="$tmp/layouts"
mkdir -p "$d"
launch 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 1 --save "$d/ckpt" \
  --save-interval 10 --exit-interval 10 >"$d/first.log"
launch 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 1 --load "$d/ckpt" \
  >"$d/same.log"
losses "$d/same.log" >"$d/same.txt"
for layout in 1:1:1 4:1:4 1:4:4 2:1:2:2; do
  IFS=: read -r tp pp np zero <<<"$layout"
  launch "$np" --tensor-model-parallel-size "$tp" --pipeline-model-parallel-size "$pp" --zero-stage "${zero:-0}" \
    --load "$d/ckpt" >"$d/other.log"
  losses "$d/other.log" >"$d/other.txt"
  paste "$d/same.txt" "$d/other.txt" | awk -v tag="tp2 pp2 checkpoint continued at tp$tp pp$pp ($np ranks)" '
    { x = ($1 - $2) / $1; if (x < 0) x = -x; if (x > m) m = x; n++ }
    END { printf "%s: %d losses, max relative difference %.2e\n", tag, n, m; exit !(n >= 10 && m <= 1e-5) }' ||
    fail "layout tp$tp pp$pp"
done

# ---- a rank dies while saving -------------------------------------------------------------
d="$tmp/crash"
mkdir -p "$d"
launch 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --save "$d/ckpt" --save-interval 10 \
  --exit-interval 10 >/dev/null
if TRIDENT_TEST_CRASH_IN_SAVE=3 launch 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --load "$d/ckpt" --save "$d/ckpt" --save-interval 10 >"$d/crash.log" 2>&1; then
  fail "crash: the job did not fail"
fi
latest=$(cat "$d/ckpt/latest_checkpointed_iteration.txt")
[[ $latest == 10 && ! -e $d/ckpt/iter_0000020 ]] || fail "crash: latest is '$latest'"
launch 1 --load "$d/ckpt" --train-iters 12 >"$d/after.log" && grep -q "loaded checkpoint.*iteration 10" "$d/after.log" \
  && echo "crash during save: latest is still iteration 10 and it loads" || fail "crash: old checkpoint unusable"
# The dead job's temporary goes at the next save into that directory (here, of a copy), once
# its rank 0 (the pid in its name) is gone: mpirun may return before it is reaped.
left=$(cd "$d/ckpt" && ls -d iter_0000020.tmp-* 2>/dev/null)
writer=$(cut -d- -f3 <<<"$left")
for _ in $(seq 100); do kill -0 "$writer" 2>/dev/null || break; sleep 0.1; done
cp -r "$d/ckpt" "$d/resave"
launch 2 --tensor-model-parallel-size 2 --load "$d/resave" --train-iters 12 --save "$d/resave" >"$d/resave.log" &&
  [[ -n $left && ! -e $d/resave/$left ]] && grep -q "removed $d/resave/$left, left by a save whose process is gone" \
  "$d/resave.log" && echo "crash during save: the next save removed $left" || fail "crash: $left left behind"

# ---- --async-save ------------------------------------------------------------------------
# Checkpoints written in the background are the synchronous ones, file for file (each file's
# size and XXH3 in metadata.json, and the trainer state): at tp2 x dp2 with ZeRO 1, saves at
# 3 and 6 committed while training goes on (each before the next save starts) and the one
# at 7 by the run's end. A rank killed by the writer thread after its files (rank 3) fails
# the job and leaves iteration 10 the latest.
ad="$tmp/async"
mkdir -p "$ad"
for mode in sync async; do
  launch 4 --tensor-model-parallel-size 2 --zero-stage 1 --train-iters 7 --save "$ad/$mode" --save-interval 3 \
    $([[ $mode == async ]] && echo --async-save) >"$ad/$mode.log"
done
python3 - "$ad/sync" "$ad/async" <<'PY' || fail "--async-save: checkpoints differ from the synchronous ones"
import json, sys
for it in (3, 6, 7):
    a, b = (json.load(open(f"{root}/iter_{it:07d}/metadata.json")) for root in sys.argv[1:])
    if (a["files"], a["trainer_state"]) != (b["files"], b["trainer_state"]) or len(a["files"]) != 6:
        sys.exit(f"iteration {it}: {a['files']} {b['files']}")
print("--async-save at tp2 dp2 zero 1: checkpoints 3, 6 and 7 equal the synchronous ones (6 files each)")
PY
order=$(grep -oE "^trident: sav(ing|ed) checkpoint at iteration [0-9]+" "$ad/async.log" | awk '{print $2 $NF}' | tr '\n' ' ')
[[ $order == "saving3 saved3 saving6 saved6 saving7 saved7 " ]] && grep -q "^ iteration  *4/" "$ad/async.log" &&
  [[ $(grep -n "saved checkpoint at iteration 3" "$ad/async.log" | cut -d: -f1) -gt \
     $(grep -n "^ iteration  *4/" "$ad/async.log" | cut -d: -f1) ]] &&
  echo "--async-save: each save committed after training went on, before the next: $order" ||
  fail "--async-save: saves in the order '$order'"
cp -r "$tmp/crash/ckpt" "$ad/crash"
rm -rf "$ad"/crash/iter_0000020.tmp-*
if TRIDENT_TEST_CRASH_IN_SAVE=3 launch 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --load "$ad/crash" --save "$ad/crash" --save-interval 10 --async-save >"$ad/crash.log" 2>&1; then
  fail "--async-save crash: the job did not fail"
fi
latest=$(cat "$ad/crash/latest_checkpointed_iteration.txt")
[[ $latest == 10 && ! -e $ad/crash/iter_0000020 ]] &&
  grep -q "^trident: saving checkpoint at iteration 20 in the background" "$ad/crash.log" &&
  ! grep -q "saved checkpoint at iteration 20" "$ad/crash.log" && echo "--async-save: a rank killed while writing in the background leaves iteration 10 the latest" ||
  fail "--async-save crash: latest is '$latest'"

# ---- a learning-rate schedule other than the checkpoint's ----------------------------------
# Under mpirun (tp2 x pp2 checkpoint loaded on 2 ranks): one error line naming the field, both
# values and the two flags, exit 2, and the job ends; --use-checkpoint-opt_param-scheduler
# resumes with the checkpoint's schedule.
rc=0
timeout 120 mpirun --oversubscribe -np 2 --bind-to none "$train" "${args[@]}" --tensor-model-parallel-size 2 \
  --load "$d/ckpt" --train-iters 12 --lr 2e-3 >"$d/lr.out" 2>"$d/lr.err" || rc=$?
if [[ $rc -eq 2 && $(grep -c '^trident-train: error' "$d/lr.err") -eq 1 ]] && grep -q "^trident-train: error: .*max_lr (--lr) is 0.002 on the command line but 0.001 in the checkpoint.*--override-opt_param-scheduler.*--use-checkpoint-opt_param-scheduler" "$d/lr.err"; then
  echo "other --lr: $(grep '^trident-train: error' "$d/lr.err")"
else
  fail "other --lr: rc=$rc"; cat "$d/lr.err"
fi
launch 1 --load "$d/ckpt" --train-iters 12 --lr 2e-3 --use-checkpoint-lr-scheduler >"$d/lr_ckpt.log" &&
  grep -q "use-checkpoint-opt_param-scheduler: training with the checkpoint's" "$d/lr_ckpt.log" &&
  grep -q "^ iteration  *12/" "$d/lr_ckpt.log" && echo "other --lr with --use-checkpoint-lr-scheduler: resumed" ||
  fail "other --lr with --use-checkpoint-lr-scheduler"

# ---- corrupt and truncated files ----------------------------------------------------------
expect_error() {  # expect_error <tag> <pattern> : the load must fail with one line naming the file
  local tag=$1 pattern=$2
  if launch 1 --load "$d/bad" --train-iters 12 >"$d/bad.out" 2>"$d/bad.err"; then fail "$tag: loaded"; return; fi
  if grep -q "$pattern" "$d/bad.err" && [[ $(wc -l <"$d/bad.err") -eq 1 ]]; then
    echo "$tag: $(cat "$d/bad.err")"
  else
    fail "$tag"; cat "$d/bad.err"
  fi
}
rm -rf "$d/bad" && cp -r "$d/ckpt" "$d/bad"
model=$(ls "$d"/bad/iter_0000010/mp_rank_01_001/model.safetensors)
printf '\x55' | dd of="$model" bs=1 seek=$(($(stat -c %s "$model") - 5)) conv=notrunc 2>/dev/null
expect_error "flipped byte" "mp_rank_01_001/model.safetensors.*checksum"
# The same file under mpirun at the checkpoint's layout, where rank 3 alone reads it: no rank
# reports the checkpoint loaded, and rank 0 says which file is bad (one line, exit 2).
rc=0
timeout 120 mpirun --oversubscribe -np 4 --bind-to none "$train" "${args[@]}" --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --load "$d/bad" --train-iters 12 >"$d/bad4.out" 2>"$d/bad4.err" || rc=$?
if [[ $rc -eq 2 && $(grep -c '^trident-train: error' "$d/bad4.err") -eq 1 ]] &&
    grep -q '^trident-train: error: .*mp_rank_01_001/model.safetensors.*checksum' "$d/bad4.err" &&
    ! grep -q "loaded checkpoint" "$d/bad4.out"; then
  echo "flipped byte read by rank 3 of 4: $(grep '^trident-train: error' "$d/bad4.err")"
else
  fail "flipped byte read by rank 3 of 4: rc=$rc"; cat "$d/bad4.out" "$d/bad4.err"
fi
rm -rf "$d/bad" && cp -r "$d/ckpt" "$d/bad"
truncate -s -100 "$d"/bad/iter_0000010/mp_rank_00_000/optim_dp0000.safetensors
expect_error "truncated file" "mp_rank_00_000/optim_dp0000.safetensors"
rm -rf "$d/bad" && cp -r "$d/ckpt" "$d/bad"
if launch 1 --load "$d/bad" --hidden-size 128 --train-iters 12 >"$d/bad.out" 2>"$d/bad.err"; then
  fail "other model shape loaded"
else
  grep -q "hidden-size" "$d/bad.err" && echo "other shape: $(cat "$d/bad.err")" || fail "other shape message"
fi
# A missing --load directory: as Megatron, one warning and training from scratch.
if launch 1 --load "$d/nowhere" --train-iters 3 >"$d/missing.out" 2>"$d/missing.err" &&
    [[ $(grep -c "warning: --load $d/nowhere does not exist" "$d/missing.out") -eq 1 ]] &&
    grep -q "^ iteration  *3/" "$d/missing.out"; then
  echo "missing directory: $(grep warning "$d/missing.out")"
else
  fail "missing directory"; cat "$d/missing.out" "$d/missing.err"
fi
[[ $fails -eq 0 ]]
