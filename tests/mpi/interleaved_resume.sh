#!/usr/bin/env bash
# Checkpoints of the interleaved pipeline schedule (gpt2-tiny with 8 layers, pp2, chunks of
# 2 layers: stage 0 holds layers 0-1 and 4-5): 20 iterations == 10, stop, --load, 10 more at
# the same layout (every logged value and every final parameter bit-identical); the
# checkpoint records its chunks; continued without interleaving at pp2, pp4 and on one
# process it gives the losses the interleaved layout gives (1e-5 relative); and a plain pp2
# checkpoint continues interleaved.
# Usage: interleaved_resume.sh TRAIN_BINARY REPO
set -euo pipefail
train=$1
repo=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers 8 --device cpu --train-iters 20 --lr-decay-iters 20
      --log-interval 1 --lr-warmup-iters 2 --micro-batch-size 2 --global-batch-size 8 --hidden-dropout 0.1
      --attention-dropout 0.1 --eval-interval 10 --eval-iters 1)
interleaved=(--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2)
losses() { grep -E '^ (iteration|validation loss at)' "$1" | sed -E 's/.*lm loss( value)?: ([0-9.E+-]+).*/\2/'; }
logged() { grep -E '^ (iteration|validation loss at)' "$1" | grep -oE '(learning rate|lm loss( value)?|loss scale): [^ |]+'; }
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
launch() {  # launch <np> <args...>
  local np=$1
  shift
  if [[ $np -eq 1 ]]; then "$train" "${args[@]}" "$@"; else
    timeout 300 mpirun --oversubscribe -np "$np" --bind-to none "$train" "${args[@]}" "$@"; fi
}
close() {  # close <tag> <a> <b>: the same number (>= 10) of losses, within 1e-5 relative
  paste "$2" "$3" | awk -v tag="$1" '
    { x = ($1 - $2) / $1; if (x < 0) x = -x; if (x > m) m = x; n++ }
    END { printf "%s: %d losses, max relative difference %.2e\n", tag, n, m; exit !(n >= 10 && m <= 1e-5) }' ||
    fail "$1"
}

# Exact resume at the interleaved layout.
launch 2 "${interleaved[@]}" --save-canonical "$tmp/straight.st" >"$tmp/straight.log"
launch 2 "${interleaved[@]}" --save "$tmp/ckpt" --save-interval 10 --exit-interval 10 >"$tmp/first.log"
launch 2 "${interleaved[@]}" --load "$tmp/ckpt" --save-canonical "$tmp/resumed.st" >"$tmp/second.log"
grep -q "loaded checkpoint" "$tmp/second.log" || fail "interleaved: nothing loaded"
logged "$tmp/straight.log" >"$tmp/a.txt"
cat <(logged "$tmp/first.log") <(logged "$tmp/second.log") >"$tmp/b.txt"
if cmp -s "$tmp/a.txt" "$tmp/b.txt" && [[ $(grep -c 'lm loss' "$tmp/a.txt") -ge 20 ]]; then
  echo "interleaved pp2: $(wc -l <"$tmp/a.txt") logged values identical after resume"
else
  fail "interleaved pp2: logged values differ after resume"; paste "$tmp/a.txt" "$tmp/b.txt"
fi
python3 "$repo/tests/mpi/compare_params.py" "$tmp/straight.st" "$tmp/resumed.st" 0 "interleaved pp2 resumed" ||
  fail "interleaved pp2: parameters after resume"
grep -q '"virtual_pipeline_chunks": *2' "$tmp/ckpt/iter_0000010/metadata.json" ||
  fail "the checkpoint's metadata does not record its 2 chunks"

# The interleaved checkpoint continued without interleaving.
losses "$tmp/second.log" >"$tmp/same.txt"
for layout in 2:2 4:4 1:1; do
  IFS=: read -r pp np <<<"$layout"
  launch "$np" --pipeline-model-parallel-size "$pp" --load "$tmp/ckpt" >"$tmp/other.log"
  losses "$tmp/other.log" >"$tmp/other.txt"
  close "interleaved pp2 checkpoint continued at pp$pp ($np ranks)" "$tmp/same.txt" "$tmp/other.txt"
done

# A plain pp2 checkpoint continued interleaved.
launch 2 --pipeline-model-parallel-size 2 --save "$tmp/plain" --save-interval 10 --exit-interval 10 >/dev/null
launch 2 --pipeline-model-parallel-size 2 --load "$tmp/plain" >"$tmp/plain.log"
launch 2 "${interleaved[@]}" --load "$tmp/plain" >"$tmp/plain-interleaved.log"
losses "$tmp/plain.log" >"$tmp/a.txt"
losses "$tmp/plain-interleaved.log" >"$tmp/b.txt"
close "plain pp2 checkpoint continued interleaved" "$tmp/a.txt" "$tmp/b.txt"
[[ $fails -eq 0 ]]
