#!/usr/bin/env bash
# Parallel layouts train the same model as one process: per-iteration losses of gpt2-tiny
# (4 layers unless --layers says otherwise) with dropout on, 10 iterations, and the
# validation losses at iterations 5 and 10 and at the end, must match the single-process run to
# 1e-5 relative, and so must the parameters' norm after each step (--log-params-norm); with
# --params, the final parameters too, to 1e-4 (canonical full tensors written by
# --save-canonical and compared by compare_params.py).
# Usage: parity.sh TRAIN_BINARY REPO [--layers N] [--iters N] [--micro-batch N] [--vocab N] [--flag F]...
#                  [--parallel-flag F]... LAYOUT...
#   LAYOUT is tp:pp:dp[:zero[:layers per virtual stage]], e.g. 2:2:2:1 is tp2 x pp2 x dp2 with
#   ZeRO-1 on 8 ranks, and 1:2:1:0:2 pp2 with the interleaved schedule, chunks of 2 layers.
#   --flag F adds trident-train word F to every run (e.g. --flag --data-path --flag PREFIX).
#   --parallel-flag F adds trident-train flag F to the parallel runs (not to the serial one).
#   --vocab N: synthetic tokens of a vocabulary of N (gpt2-tiny's 512 otherwise), for every run;
#   it is padded to a multiple of 128 x tp, so N = 500 leaves the last shard part padding and
#   N = 100 at tp2 a shard of padding only.
set -euo pipefail
train=$1
repo=$2
shift 2
layers=4 iters=10 micro=2 vocab="" flags=() parallel_flags=()
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --layers) layers=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --micro-batch) micro=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --flag) flags+=("$2"); shift 2 ;;
    --parallel-flag) parallel_flags+=("$2"); shift 2 ;;
    *) echo "parity.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers "$layers" --device cpu --train-iters "$iters"
      --log-interval 1 --lr-warmup-iters 2 --micro-batch-size "$micro" --global-batch-size 8
      --hidden-dropout 0.1 --attention-dropout 0.1 --eval-interval 5 --eval-iters 1 --log-params-norm)
[[ -z $vocab ]] || args+=(--vocab-size "$vocab")
args+=(${flags:+"${flags[@]}"})
params=()
# (Not "--help | grep -q": under pipefail, grep's early exit can end the help's writer with
# SIGPIPE and make the test quietly run without the flag.)
if grep -q -- --save-canonical <("$train" --help); then params=(--save-canonical); fi
# Training losses, then the validation losses (at iteration 5, and validation and test at the end).
losses() {
  grep '^ iteration ' "$1" | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/'
  grep '^ validation loss at ' "$1" | sed -E 's/.*lm loss value: ([0-9.E+-]+).*/\1/'
}
params_norms() { grep '^ iteration ' "$1" | sed -nE 's/.* params norm: ([0-9.]+) .*/\1/p'; }
"$train" "${args[@]}" ${params:+"${params[@]}" "$tmp/serial.safetensors"} >"$tmp/serial.log"
losses "$tmp/serial.log" >"$tmp/serial.txt"
# The serial run's last params norm is the norm of the parameters it saved.
if ((${#params[@]})); then
  python3 -c '
import math, sys
sys.path.insert(0, sys.argv[1])
from compare_params import read
norm = math.sqrt(sum(x * x for _, values in read(sys.argv[2]).values() for x in values))
logged = float(sys.argv[3])
print(f"serial: last params norm {logged}, norm of the saved parameters {norm:.4f}")
sys.exit(abs(norm - logged) > 1.5e-3)' "$repo/tests/mpi" "$tmp/serial.safetensors" "$(params_norms "$tmp/serial.log" | tail -1)" ||
    { echo "FAIL serial: the logged params norm is not the norm of the saved parameters"; exit 1; }
fi
n_losses=$((iters + iters / 5 + 2))  # training, validation every 5 (the last iteration too, as Megatron), final valid + test
[[ $(wc -l <"$tmp/serial.txt") -eq $n_losses ]]
fails=0
for layout in "$@"; do
  IFS=: read -r tp pp dp zero vpp <<<"$layout"
  zero=${zero:-0}
  np=$((tp * pp * dp))
  tag="tp$tp pp$pp dp$dp zero$zero ($np ranks)${parallel_flags:+ ${parallel_flags[*]}}"
  interleave=()
  if [[ -n ${vpp:-} ]]; then
    interleave=(--num-layers-per-virtual-pipeline-stage "$vpp")
    tag="tp$tp pp$pp (interleaved, $vpp layers a chunk) dp$dp zero$zero ($np ranks)${parallel_flags:+ ${parallel_flags[*]}}"
  fi
  rm -f "$tmp/par.safetensors"
  if ! timeout 300 mpirun --oversubscribe -np "$np" --bind-to none "$train" "${args[@]}" \
      --tensor-model-parallel-size "$tp" --pipeline-model-parallel-size "$pp" --zero-stage "$zero" \
      ${interleave:+"${interleave[@]}"} ${parallel_flags:+"${parallel_flags[@]}"} ${params:+"${params[@]}" "$tmp/par.safetensors"} >"$tmp/par.log" 2>"$tmp/par.err"; then
    echo "FAIL $tag: run failed"; cat "$tmp/par.err"; fails=$((fails + 1)); continue
  fi
  losses "$tmp/par.log" >"$tmp/par.txt"
  # --log-params-norm: each parameter counted once whatever the layout (printed to 3 decimals,
  # so within 1.5e-3; a LayerNorm gain counted twice moves gpt2-tiny's ~19 by more than 1).
  if ! paste <(params_norms "$tmp/serial.log") <(params_norms "$tmp/par.log") | awk -v tag="$tag" -v n_expect="$iters" '
      { d = $1 - $2; if (d < 0) d = -d; if ($2 == "") max = 1e9; else if (d > max) max = d; n++ }
      END { printf "%s: %d params norms, max difference %.4f\n", tag, n, max; exit !(n == n_expect && max <= 1.5e-3) }'; then
    echo "FAIL $tag: params norms differ"; paste <(params_norms "$tmp/serial.log") <(params_norms "$tmp/par.log")
    fails=$((fails + 1)); continue
  fi
  if ! paste "$tmp/serial.txt" "$tmp/par.txt" | awk -v tag="$tag" -v n_expect="$n_losses" '
      { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > max) max = d; n++ }
      END { printf "%s: %d training and validation losses, max relative difference %.2e\n", tag, n, max;
            exit !(n == n_expect && max <= 1e-5) }'; then
    echo "FAIL $tag: losses differ"; paste "$tmp/serial.txt" "$tmp/par.txt"; fails=$((fails + 1)); continue
  fi
  if ((${#params[@]})) && ! python3 "$repo/tests/mpi/compare_params.py" "$tmp/serial.safetensors" \
      "$tmp/par.safetensors" 1e-4 "$tag"; then
    fails=$((fails + 1))
  fi
done
[[ $fails -eq 0 ]]
