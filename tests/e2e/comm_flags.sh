#!/usr/bin/env bash
# --comm and --no-tf32: a bad --comm exits 2 with one line naming --comm; --comm mpi and
# --no-tf32 are accepted by a tiny CPU run (one process: the world of one ignores --comm).
#   tests/e2e/comm_flags.sh <trident-train> <repo>
set -u
train=$1
repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect_error() {  # expect_error <text that must be in the one error line> <args...>
  local text=$1
  shift
  "$train" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 || $(wc -l <"$tmp/err") -ne 1 ]] || ! grep -q -- "$text" "$tmp/err" ||
     ! grep -q '^trident-train: error: ' "$tmp/err"; then
    echo "FAIL: $* -> rc=$rc, stderr:"
    cat "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok: $* -> $(cat "$tmp/err")"
  fi
}
tiny=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --train-iters 2 --lr-warmup-iters 0 --eval-iters 0
  --log-interval 1)
expect_error --comm "${tiny[@]}" --comm gloo
expect_error "--comm nccl" "${tiny[@]}" --comm nccl
expect_error --no-tf32 "${tiny[@]}" --no-tf32=1
if OMP_NUM_THREADS=2 "$train" "${tiny[@]}" --comm mpi --no-tf32 >"$tmp/out" 2>"$tmp/err"; then
  echo "ok: --comm mpi --no-tf32 trains"
else
  echo "FAIL: --comm mpi --no-tf32:"
  cat "$tmp/err"
  fails=$((fails + 1))
fi
echo "comm-flag cases failing: $fails"
[[ $fails -eq 0 ]]
