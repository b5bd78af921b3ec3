#!/usr/bin/env bash
# `sh script.sh` (dash on Debian, bash in POSIX mode elsewhere) runs again under plain bash.
if [ -z "${BASH_VERSION:-}" ] || shopt -qo posix; then exec env -u POSIXLY_CORRECT bash "$0" "$@"; fi
# Text generation from a trained checkpoint, the seed's run-inf.sh (one GPU) and
# run-inf-gpus.sh (TP_SIZE GPUs, one process each, tensor-parallel):
#   CHECKPOINT_PATH=checkpoints/gpt2-345m mpirun -np 1 launch/run-inf.sh    (or without mpirun)
#   TP_SIZE=4 CHECKPOINT_PATH=checkpoints/gpt2-16b mpirun -np 4 launch/run-inf.sh
# Extra arguments ("$@") go to trident-generate last, so they win over everything below.
#
# Unconditional samples by default, written as Megatron's --genfile JSON lines
# {"text", "length", "finished"}; with SAMPLE_INPUT_FILE, one prompt a line continued and
# written to SAMPLE_OUTPUT_FILE. trident-generate reads a checkpoint of any layout (no
# conversion first); mpirun's -np must equal TP_SIZE (one line otherwise).
#
# Variables (the seed's names; default in brackets):
#   MODEL_NAME [gpt2-345m]   CHECKPOINT_PATH [<repo>/checkpoints/$MODEL_NAME]   TP_SIZE [1]
#   VOCAB_FILE, MERGE_FILE [<repo>/data/gpt2/gpt2-{vocab.json,merges.txt}: tools/get-gpt2-vocab.sh]
#   NUM_SAMPLES [8]  OUT_SEQ_LENGTH [1024: most tokens a sample gets; prompt + generated also
#     stop at the model's sequence length]  DEVICE [auto]
#   GENFILE [<repo>/out/$MODEL_NAME/unconditional_samples.json]
#   SAMPLE_INPUT_FILE [unset: unconditional]  SAMPLE_OUTPUT_FILE [<repo>/out/$MODEL_NAME/samples.json]
#   MICRO_BATCH_SIZE (samples decoded together), TEMPERATURE, TOP_K, TOP_P, SEED [unset:
#     trident-generate's defaults, 8, 1.0, 0 and 0 (all tokens), 1234]
#   NLAYERS NHIDDEN NHEADS SEQ_LEN [unset; when set, the training run's values, checked
#     against the checkpoint: a different value is an error naming the flag]
#   BUILD_DIR [<repo>/build]   TRIDENT_DRY_RUN [0; 1 prints the command instead of running it]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/launch/common.sh"
me=run-inf.sh
checkpoint_defaults
generate=$BUILD_DIR/tools/trident-generate
read_dry_run
[[ $dry_run == 1 || -x $generate ]] || fail "no trident-generate at $generate (build with tools/build.sh, or set BUILD_DIR)"

args=(--load "$CHECKPOINT_PATH" --vocab-file "$VOCAB_FILE" --merge-file "$MERGE_FILE"
  --out-seq-length "${OUT_SEQ_LENGTH:-1024}" --device "${DEVICE:-auto}")
pass_if_set TP_SIZE --tensor-model-parallel-size
pass_if_set MICRO_BATCH_SIZE --micro-batch-size
pass_if_set TEMPERATURE --temperature
pass_if_set TOP_K --top-k
pass_if_set TOP_P --top-p
pass_if_set SEED --seed
# The shape of the training run (run-one-node.sh's flags for the same variables).
pass_if_set NLAYERS --num-layers
pass_if_set NHIDDEN --hidden-size
pass_if_set NHEADS --num-attention-heads
pass_if_set SEQ_LEN --seq-length --max-position-embeddings
if [[ -n ${SAMPLE_INPUT_FILE:-} ]]; then
  out=${SAMPLE_OUTPUT_FILE:-$repo/out/$MODEL_NAME/samples.json}
  args+=(--sample-input-file "$SAMPLE_INPUT_FILE" --sample-output-file "$out")
else
  out=${GENFILE:-$repo/out/$MODEL_NAME/unconditional_samples.json}
  args+=(--num-samples "${NUM_SAMPLES:-8}" --genfile "$out")
fi

if [[ $dry_run == 1 ]]; then
  printf '%s: dry run, would run:' "$me"
  print_command "$generate" "${args[@]}" "$@"
  exit 0
fi
mkdir -p "$(dirname "$out")"
exec "$generate" "${args[@]}" "$@"
