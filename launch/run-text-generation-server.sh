#!/usr/bin/env bash
# `sh script.sh` (dash on Debian, bash in POSIX mode elsewhere) runs again under plain bash.
if [ -z "${BASH_VERSION:-}" ] || shopt -qo posix; then exec env -u POSIXLY_CORRECT bash "$0" "$@"; fi
# Megatron's text-generation server (PUT /api; examples/run_text_generation_server_345M.sh)
# over a trained checkpoint of any layout, one GPU or TP_SIZE GPUs (one process each):
#   CHECKPOINT_PATH=checkpoints/gpt2-345m launch/run-text-generation-server.sh
#   TP_SIZE=4 CHECKPOINT_PATH=checkpoints/gpt2-16b mpirun -np 4 launch/run-text-generation-server.sh
# then: curl -X PUT localhost:5000/api -H 'Content-Type: application/json' -d '{"prompts": ["Hi"]}'
# Stop it with SIGTERM to the server (under mpirun: to rank 0's process, whose pid its start
# line names; mpirun's own SIGTERM or Ctrl-C ends the job at once).
# Extra arguments ("$@") go to trident-text-generation-server last, so they win.
#
# Variables (default in brackets):
#   MODEL_NAME [gpt2-345m]   CHECKPOINT_PATH [<repo>/checkpoints/$MODEL_NAME]   TP_SIZE [1]
#   VOCAB_FILE, MERGE_FILE [<repo>/data/gpt2/gpt2-{vocab.json,merges.txt}: tools/get-gpt2-vocab.sh]
#   PORT [5000]  HOST [0.0.0.0]  DEVICE [auto]  SEED [1234]
#   MAX_TOKENS_TO_OOM [12000: most prompts x (prompt + tokens_to_generate) in one request]
#   NLAYERS NHIDDEN NHEADS [unset; when set, checked against the checkpoint]
#   BUILD_DIR [<repo>/build]   TRIDENT_DRY_RUN [0; 1 prints the command instead of running it]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/launch/common.sh"
me=run-text-generation-server.sh
checkpoint_defaults
server=$BUILD_DIR/tools/trident-text-generation-server
read_dry_run
[[ $dry_run == 1 || -x $server ]] ||
  fail "no trident-text-generation-server at $server (build with tools/build.sh, or set BUILD_DIR)"

args=(--load "$CHECKPOINT_PATH" --vocab-file "$VOCAB_FILE" --merge-file "$MERGE_FILE"
  --port "${PORT:-5000}" --host "${HOST:-0.0.0.0}" --device "${DEVICE:-auto}")
pass_if_set TP_SIZE --tensor-model-parallel-size
pass_if_set SEED --seed
pass_if_set MAX_TOKENS_TO_OOM --max-tokens-to-oom
pass_if_set NLAYERS --num-layers
pass_if_set NHIDDEN --hidden-size
pass_if_set NHEADS --num-attention-heads

if [[ $dry_run == 1 ]]; then
  printf '%s: dry run, would run:' "$me"
  print_command "$server" "${args[@]}" "$@"
  exit 0
fi
exec "$server" "${args[@]}" "$@"
