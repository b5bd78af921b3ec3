#!/usr/bin/env bash
# `sh script.sh` (dash on Debian, bash in POSIX mode elsewhere) runs again under plain bash.
if [ -z "${BASH_VERSION:-}" ] || shopt -qo posix; then exec env -u POSIXLY_CORRECT bash "$0" "$@"; fi
# Multi-node training of the 16B GPT-2 (launch/single-16B.sh holds the model and its settings):
# one mpirun over a hostfile, GPUS_PER_NODE ranks per node, tp4 x pp8 x dp=(NNODES*GPUS_PER_NODE)/32
# as in the seed (32 nodes of 4 GPUs: dp4), in fp32; launch/mpi-16B-fp16.sh is the same in fp16.
#   HOSTFILE=hosts DATA_PATH=/data/my-gpt2_text_document launch/mpi-run-16B.sh [trident-train args]
# The repository (and its build) must sit at the same path on every node.
# Variables: HOSTFILE [./hostfile: one node a line, "node slots=4"], NNODES [the hostfile's
# node count], GPUS_PER_NODE [4], MPIRUN [mpirun], MPIRUN_ARGS [extra mpirun words, e.g.
# "--mca btl_tcp_if_include ib0"], TRIDENT_DRY_RUN [1: print the mpirun command and rank 0's
# trident-train command, run nothing]; every variable of single-16B.sh and run-one-node.sh
# (DATA_PATH, CHECKPOINT_PATH, TENSORBOARD_PATH, TP_SIZE, PP_SIZE, GLOBAL_BATCH_SIZE, ...)
# is exported to all ranks with -x. N_GPUS is NNODES * GPUS_PER_NODE.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/common.sh"
me=$(basename "$0")
die() { echo "$me: error: $*" >&2; exit 2; }
read_dry_run

HOSTFILE=${HOSTFILE:-hostfile}
GPUS_PER_NODE=${GPUS_PER_NODE:-4}
hosts_in_file=0
if [[ -f $HOSTFILE ]]; then
  hosts_in_file=$(grep -cvE '^[[:space:]]*(#|$)' "$HOSTFILE" || true)
elif [[ $dry_run != 1 ]]; then
  die "HOSTFILE not found: $HOSTFILE (one node a line, e.g. 'node01 slots=$GPUS_PER_NODE')"
fi
default_nodes=$hosts_in_file
((default_nodes > 0)) || default_nodes=32
NNODES=${NNODES:-$default_nodes}
[[ $NNODES =~ ^[1-9][0-9]*$ ]] || die "NNODES must be a positive integer (got '$NNODES')"
[[ $GPUS_PER_NODE =~ ^[1-9][0-9]*$ ]] || die "GPUS_PER_NODE must be a positive integer (got '$GPUS_PER_NODE')"
if [[ -f $HOSTFILE ]] && ((hosts_in_file < NNODES)); then
  die "NNODES=$NNODES but $HOSTFILE lists $hosts_in_file node(s)"
fi
world=$((NNODES * GPUS_PER_NODE))
[[ -z ${N_GPUS:-} || $N_GPUS == "$world" ]] ||
  die "N_GPUS=$N_GPUS but NNODES*GPUS_PER_NODE=$NNODES*$GPUS_PER_NODE=$world (unset N_GPUS)"
export N_GPUS=$world

# Running as root (containers) needs Open MPI's consent.
if [[ $EUID -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# Every set variable the ranks read, plus the runtime's own (NCCL_*, CUDA_*, UCX_*, TRIDENT_*).
forward=(PATH LD_LIBRARY_PATH N_GPUS MODEL_NAME CHECKPOINT_PATH DATA_PATH TENSORBOARD_PATH
  TP_SIZE PP_SIZE MICRO_BATCH_SIZE GLOBAL_BATCH_SIZE NLAYERS NHIDDEN NHEADS SEQ_LEN SAVE_INTERVAL
  VOCAB_FILE MERGE_FILE TRAIN_ITERS TRAIN_SAMPLES LR_WARMUP_SAMPLES LR_DECAY_SAMPLES LR_DECAY_ITERS LR MIN_LR
  LR_DECAY_STYLE LR_WARMUP_ITERS LR_WARMUP_ITERS_MAX WEIGHT_DECAY CLIP_GRAD
  ADAM_BETA1 ADAM_BETA2 ADAM_EPS INIT_METHOD_STD LOG_INTERVAL SEED SPLIT DEVICE ZERO_STAGE VOCAB_SIZE
  EVAL_INTERVAL EVAL_ITERS PRECISION INITIAL_LOSS_SCALE MIN_LOSS_SCALE LOSS_SCALE_WINDOW HYSTERESIS
  BUILD_DIR OMP_NUM_THREADS OPENBLAS_NUM_THREADS RECOMPUTE RECOMPUTE_NUM_LAYERS SEQUENCE_PARALLEL
  VIRTUAL_STAGE_LAYERS NON_PERSISTENT_SAVE_INTERVAL LOCAL_CKPT_DIR)
while read -r v; do forward+=("$v"); done < <(compgen -e | grep -E '^(NCCL_|CUDA_|UCX_|TRIDENT_)' | grep -vx TRIDENT_DRY_RUN || true)
xargs_=()
for v in "${forward[@]}"; do
  if [[ -n ${!v+x} ]]; then
    export "${v?}"
    xargs_+=(-x "$v")
  fi
done
read -r -a extra <<<"${MPIRUN_ARGS:-}"

cmd=("${MPIRUN:-mpirun}" -np "$world" --hostfile "$HOSTFILE" --map-by "ppr:$GPUS_PER_NODE:node"
  --bind-to none "${xargs_[@]}" "${extra[@]}" "$here/single-16B.sh" "$@")
if [[ $dry_run == 1 ]]; then
  printf '%s: dry run:' "$me"
  print_command "${cmd[@]}"
  exec "$here/single-16B.sh" "$@"  # prints rank 0's trident-train command
fi
exec "${cmd[@]}"
