#!/usr/bin/env bash
# Checkpoints of a pipeline layout given by flags (gpt2-tiny with --layers N; e.g. pp2 with the
# interleaved schedule, or Megatron's uneven stages): 20 iterations == 10, stop, --load, 10
# more at the same layout (every logged value and every final parameter bit-identical); the
# checkpoint's metadata records the layout (a pattern given); continued at plain pp2, pp4 and
# on one process it gives the losses the layout gives (1e-5 relative); and a plain pp2
# checkpoint continues at the layout.
# Usage: pipeline_resume.sh TRAIN_BINARY REPO LAYERS METADATA_PATTERN LAYOUT_FLAGS...
#   LAYOUT_FLAGS: trident-train flags of a layout on 2 ranks.
#   METADATA_PATTERN: an extended regular expression iter_0000010/metadata.json must match.
set -euo pipefail
train=$1
repo=$2
layers=$3
pattern=$4
shift 4
layout=("$@")
tag="${layout[*]}"
# shellcheck source=tests/mpi/mpi_test_lib.sh
source "$repo/tests/mpi/mpi_test_lib.sh"
args=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers "$layers" --device cpu --train-iters 20 --lr-decay-iters 20
      --log-interval 1 --lr-warmup-iters 2 --micro-batch-size 2 --global-batch-size 8 --hidden-dropout 0.1
      --attention-dropout 0.1 --eval-interval 10 --eval-iters 1)
close() {  # close <tag> <a> <b>: the same number (>= 10) of losses, within 1e-5 relative
  paste "$2" "$3" | awk -v tag="$1" '
    { x = ($1 - $2) / $1; if (x < 0) x = -x; if (x > m) m = x; n++ }
    END { printf "%s: %d losses, max relative difference %.2e\n", tag, n, m; exit !(n >= 10 && m <= 1e-5) }' ||
    fail "$1"
}

# Exact resume at the layout.
launch 2 "${layout[@]}" --save-canonical "$tmp/straight.st" >"$tmp/straight.log"
launch 2 "${layout[@]}" --save "$tmp/ckpt" --save-interval 10 --exit-interval 10 >"$tmp/first.log"
launch 2 "${layout[@]}" --load "$tmp/ckpt" --save-canonical "$tmp/resumed.st" >"$tmp/second.log"
grep -q "loaded checkpoint" "$tmp/second.log" || fail "$tag: nothing loaded"
logged "$tmp/straight.log" >"$tmp/a.txt"
cat <(logged "$tmp/first.log") <(logged "$tmp/second.log") >"$tmp/b.txt"
if cmp -s "$tmp/a.txt" "$tmp/b.txt" && [[ $(grep -c 'lm loss' "$tmp/a.txt") -ge 20 ]]; then
  echo "$tag: $(wc -l <"$tmp/a.txt") logged values identical after resume"
else
  fail "$tag: logged values differ after resume"; paste "$tmp/a.txt" "$tmp/b.txt"
fi
python3 "$repo/tests/mpi/compare_params.py" "$tmp/straight.st" "$tmp/resumed.st" 0 "$tag resumed" ||
  fail "$tag: parameters after resume"
grep -qE "$pattern" "$tmp/ckpt/iter_0000010/metadata.json" ||
  fail "the checkpoint's metadata does not record its layout ($pattern)"

# Megatron's --use-mp-args-from-checkpoint-args (with --use-checkpoint-args) takes the
# checkpoint's pipeline size and chunks: resumed without the layout flags, the same grid line
# (stages and chunks) and values;
# on one rank, the grid error names what it took. (A checkpoint of an uneven split takes its
# chunk count only, as Megatron's: the interleaved case alone resumes that way.)
if [[ " ${layout[*]} " == *" --num-layers-per-virtual-pipeline-stage "* ]]; then
  launch 2 --load "$tmp/ckpt" --use-checkpoint-args --use-mp-args-from-checkpoint-args >"$tmp/mp.log"
  if grep -q '^trident: --use-mp-args-from-checkpoint-args: --tensor-model-parallel-size 1, --pipeline-model-parallel-size 2, --num-virtual-stages-per-pipeline-rank 2 from --load' "$tmp/mp.log" &&
      grep -q '^trident: world 2 = tp 1 x pp 2 x dp 1' "$tmp/mp.log" && [[ $(grep -c '^trident: world 2 = ' "$tmp/second.log") -eq 1 ]] &&
      cmp -s <(grep '^trident: world 2 = ' "$tmp/second.log") <(grep '^trident: world 2 = ' "$tmp/mp.log") &&
      cmp -s <(logged "$tmp/second.log") <(logged "$tmp/mp.log"); then
    echo "$tag: --use-mp-args-from-checkpoint-args resumed at the checkpoint's layout, the same values"
  else
    fail "$tag: --use-mp-args-from-checkpoint-args"; grep -m3 'mp-args\|error' "$tmp/mp.log"
  fi
  # From --pretrained-checkpoint while --load holds none (its --ckpt-step too): the same layout.
  launch 2 --load "$tmp/empty" --save "$tmp/empty" --pretrained-checkpoint "$tmp/ckpt" --ckpt-step 10 --train-iters 12 \
    --use-checkpoint-args --use-mp-args-from-checkpoint-args >"$tmp/mp-pre.log" 2>&1 || true
  if grep -q "^trident: --use-mp-args-from-checkpoint-args: .*--num-virtual-stages-per-pipeline-rank 2 from --pretrained-checkpoint $tmp/ckpt\$" "$tmp/mp-pre.log" &&
      grep -q '^trident: world 2 = tp 1 x pp 2 x dp 1' "$tmp/mp-pre.log" && grep -q '^ iteration *12/' "$tmp/mp-pre.log"; then
    echo "$tag: --use-mp-args-from-checkpoint-args from --pretrained-checkpoint --ckpt-step 10: its layout"
  else
    fail "$tag: --use-mp-args-from-checkpoint-args from --pretrained-checkpoint"; grep -m3 'mp-args\|error\|world' "$tmp/mp-pre.log"
  fi
  if ! launch 1 --load "$tmp/ckpt" --use-checkpoint-args --use-mp-args-from-checkpoint-args >/dev/null 2>"$tmp/mp1.err" &&
      grep -q '(--use-mp-args-from-checkpoint-args took --tensor-model-parallel-size 1, --pipeline-model-parallel-size 2' "$tmp/mp1.err"; then
    echo "$tag: one rank: $(head -1 "$tmp/mp1.err")"
  else
    fail "$tag: --use-mp-args-from-checkpoint-args on one rank: $(cat "$tmp/mp1.err")"
  fi
fi

# The checkpoint continued at plain layouts.
losses "$tmp/second.log" >"$tmp/same.txt"
for plain in 2:2 4:4 1:1; do
  IFS=: read -r pp np <<<"$plain"
  launch "$np" --pipeline-model-parallel-size "$pp" --load "$tmp/ckpt" >"$tmp/other.log"
  losses "$tmp/other.log" >"$tmp/other.txt"
  close "$tag checkpoint continued at pp$pp ($np ranks)" "$tmp/same.txt" "$tmp/other.txt"
done

# A plain pp2 checkpoint continued at the layout.
launch 2 --pipeline-model-parallel-size 2 --save "$tmp/plain" --save-interval 10 --exit-interval 10 >/dev/null
launch 2 --pipeline-model-parallel-size 2 --load "$tmp/plain" >"$tmp/plain.log"
launch 2 "${layout[@]}" --load "$tmp/plain" >"$tmp/plain-layout.log"
losses "$tmp/plain.log" >"$tmp/a.txt"
losses "$tmp/plain-layout.log" >"$tmp/b.txt"
close "plain pp2 checkpoint continued at $tag" "$tmp/a.txt" "$tmp/b.txt"
[[ $fails -eq 0 ]]
