#!/usr/bin/env bash
# Megatron's --check-weight-hash-across-dp-replicas-interval: at tp2 x dp2 with ZeRO 1 and the
# parameter gathers overlapped (the check waits for them) and at pp2 x dp2 with ZeRO 2, the
# replicas agree: the run ends normally with the losses of a run without the check. When one
# replica's parameters differ (TRIDENT_TEST_DIVERGE_REPLICA=R hashes data-parallel rank R's
# first parameter with a bit flipped, as a corrupted copy would read), the run stops at the
# first check with one line naming the parameter, the ranks and the iteration, exit status 3:
# at dp4 the odd replica, at tp2 x dp2 both copies (there both tensor-parallel ranks' groups
# differ; world rank 0, the lowest, reports).
# Usage: replica_check.sh TRAIN_BINARY REPO
set -u
train=$1
repo=$2
# shellcheck source=tests/mpi/mpi_test_lib.sh
source "$repo/tests/mpi/mpi_test_lib.sh"
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --mock-data --train-iters 6 --lr-warmup-iters 1
      --eval-iters 0 --log-interval 1 --micro-batch-size 2 --global-batch-size 8)
check=(--check-weight-hash-across-dp-replicas-interval 2)
for layout in "--tensor-model-parallel-size 2 --zero-stage 1 --overlap-param-gather" \
    "--pipeline-model-parallel-size 2 --zero-stage 2"; do
  # shellcheck disable=SC2086  # the layout's words
  launch 4 $layout >"$tmp/plain.log" 2>&1 || fail "$layout: the run without the check failed"
  # shellcheck disable=SC2086
  launch 4 $layout "${check[@]}" >"$tmp/checked.log" 2>"$tmp/checked.err"
  rc=$?
  if [[ $rc -eq 0 ]] && cmp -s <(losses "$tmp/plain.log") <(losses "$tmp/checked.log") &&
      [[ $(losses "$tmp/checked.log" | wc -l) -eq 6 ]]; then
    echo "ok: $layout: the replicas agree at iterations 2, 4 and 6; the losses are the run's without the check"
  else
    fail "$layout with the check: rc $rc"; cat "$tmp/checked.err"
  fi
done

# diverged <replica> <expected line> <layout...>: the run with that replica's copy diverged.
diverged() {
  local replica=$1 expected=$2
  shift 2
  TRIDENT_TEST_DIVERGE_REPLICA=$replica timeout 300 mpirun --oversubscribe -np 4 --bind-to none \
    -x TRIDENT_TEST_DIVERGE_REPLICA "$train" "${args[@]}" "$@" "${check[@]}" >"$tmp/diverged.log" 2>"$tmp/diverged.err"
  local rc=$? line
  line=$(grep -h "^trident-train: error" "$tmp/diverged.log" "$tmp/diverged.err")
  if [[ $rc -eq 3 && $(grep -c . <<<"$line") -eq 1 && $line == "$expected" ]] &&
      ! grep -q '^ iteration        3/' "$tmp/diverged.log"; then
    echo "ok: $line"
  else
    fail "replica $replica diverged: rc $rc, error line '$line'"; tail -5 "$tmp/diverged.err"
  fi
}
prefix="trident-train: error on rank 0: --check-weight-hash-across-dp-replicas-interval: after iteration 2, the \
data-parallel replicas' parameters differ: wte: "
# dp4: the odd replica named against the other three; tp2 x dp2 with ZeRO 1: two copies, no majority.
diverged 2 "${prefix}data-parallel rank 2 (world rank 2) holds another copy than the other 3 replicas \
(tensor-parallel rank 0, pipeline stage 0)" --zero-stage 2
diverged 1 "${prefix}the copies of data-parallel ranks [0 (world rank 0)], [1 (world rank 2)] differ, none held by \
most replicas (tensor-parallel rank 0, pipeline stage 0)" --tensor-model-parallel-size 2 --zero-stage 1
[[ $fails -eq 0 ]]
