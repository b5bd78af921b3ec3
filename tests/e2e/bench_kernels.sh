#!/usr/bin/env bash
# trident-bench refuses --save, --load and --tensorboard-dir (it writes and reads nothing) and a
# global batch that changes (--rampup-batch-size, --step-batch-size-schedule), and
# --kernels-quick exits 0 everywhere. Without a GPU (or without the CUDA
# backend) it prints one "no GPU" line and measures nothing; with one it prints the kernel
# table ending with the peaks it measured, and --kernels-progress / --kernels-resume (gpu-check's
# rerun past a row that killed the table) number the rows alike.
#   tests/e2e/bench_kernels.sh <trident-bench>
set -uo pipefail
bench=$1
# Flags whose effect lies outside the timed steps are refused, one line naming the flag,
# exit 2, nothing written (with or without a GPU).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for flag in --save --load --tensorboard-dir; do
  err=$("$bench" --device cpu --mock-data --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
    --max-position-embeddings 16 --micro-batch-size 1 --train-iters 1 "$flag" "$tmp/out" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 || $(wc -l <<<"$err") -ne 1 || $err != *"$flag: trident-bench only times training steps"* ||
        -e $tmp/out ]]; then
    echo "FAIL: trident-bench $flag: rc=$rc, stderr: $err"
    exit 1
  fi
  echo "ok: $err"
done
# A global batch that changes during the run is refused too (the figures assume one).
for schedule in "--global-batch-size 8 --rampup-batch-size 2 2 8" "--step-batch-size-schedule 0:2,64:4"; do
  # shellcheck disable=SC2086
  err=$("$bench" --device cpu --mock-data --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
    --max-position-embeddings 16 --micro-batch-size 2 --train-samples 16 $schedule 2>&1 >/dev/null)
  rc=$?
  flag=$(grep -oE -- '--[a-z]+-batch-size(-schedule)?' <<<"$schedule" | tail -n 1)
  if [[ $rc -ne 2 || $err != "trident-bench: error: $flag: trident-bench times steps of one global batch"* ]]; then
    echo "FAIL: trident-bench $schedule: rc=$rc, stderr: $err"
    exit 1
  fi
  echo "ok: $err"
done
# --kernels-progress, --kernels-resume, --kernels-results and --kernels-skip modify a kernel table: alone, or with a bad row
# number, they are refused with one line naming them, exit 2.
for bad in "--kernels-progress $tmp/progress" "--kernels-resume 3" "--kernels-quick --kernels-resume 0" \
  "--kernels-results $tmp/progress" "--kernels-skip adamw"; do
  # shellcheck disable=SC2086
  err=$("$bench" $bad 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 || $(wc -l <<<"$err") -ne 1 || $err != *kernels-* || -e $tmp/progress ]]; then
    echo "FAIL: trident-bench $bad: rc=$rc, stderr: $err"
    exit 1
  fi
  echo "ok: $err"
done
out=$("$bench" --kernels-quick 2>&1)
rc=$?
echo "$out"
if [[ $rc -ne 0 ]]; then echo "FAIL: trident-bench --kernels-quick exited $rc"; exit 1; fi
if grep -q "no GPU" <<<"$out"; then
  [[ $(wc -l <<<"$out") -eq 1 ]] || { echo "FAIL: expected one line without a GPU"; exit 1; }
  echo "ok: no GPU, skipped cleanly"
  exit 0
fi
grep -q "^peaks measured in this run" <<<"$out" || { echo "FAIL: no peaks line"; exit 1; }
echo "ok: kernel table on the GPU"
# The GELU rows (two) with --kernels-progress, the run dying in row 2 (a test hook that aborts
# as a CUDA error does): the file names the row. Rerun past it: no header, row 1 neither
# measured nor printed, row 2 a FAILED row, no choices; a clean run leaves the file empty.
TRIDENT_TEST_CRASH_IN_ROW=2 "$bench" --kernels-quick --kernels-only gelu --kernels-progress "$tmp/progress" \
  >/dev/null 2>&1 && { echo "FAIL: the run with a row that aborts exited 0"; exit 1; }
[[ $(cat "$tmp/progress") == "2 gelu: gelu bwd" ]] || { echo "FAIL: --kernels-progress: '$(cat "$tmp/progress")'"; exit 1; }
rerun=$("$bench" --kernels-quick --kernels-only gelu --kernels-resume 2 --kernels-progress "$tmp/progress" 2>&1)
if grep -q "^kernel " <<<"$rerun" || [[ $(grep -c "^gelu" <<<"$rerun") -ne 1 ]] ||
   ! grep -q "^gelu bwd .*FAILED: skipped: the run before died in it" <<<"$rerun" ||
   ! grep -q "^no tile or opt-in choices: a rerun past row 2" <<<"$rerun" || [[ -s $tmp/progress ]]; then
  echo "FAIL: --kernels-resume 2:"; echo "$rerun"; exit 1
fi
echo "ok: --kernels-progress names the row a run died in; --kernels-resume reruns past it"
# --kernels-skip takes the row's name in its section, as --kernels-progress gives it.
skipped=$("$bench" --kernels-quick --kernels-only gelu --kernels-skip "gelu: gelu bwd" --kernels-skip "gelu fwd" 2>&1)
if ! grep -q "^gelu bwd .*FAILED: skipped: --kernels-skip" <<<"$skipped" ||
   grep -q "^gelu fwd .*FAILED" <<<"$skipped" || ! grep -q '^note: --kernels-skip "gelu fwd" named no row' <<<"$skipped"; then
  echo "FAIL: --kernels-skip \"gelu: gelu bwd\" (and a name without its section, which names no row):"
  echo "$skipped"; exit 1
fi
echo "ok: --kernels-skip leaves out the row of that section"

