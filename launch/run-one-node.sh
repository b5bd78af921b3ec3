#!/usr/bin/env bash
# `sh script.sh` (dash on Debian, bash in POSIX mode elsewhere) runs again under plain bash.
if [ -z "${BASH_VERSION:-}" ] || shopt -qo posix; then exec env -u POSIXLY_CORRECT bash "$0" "$@"; fi
# Per-rank wrapper around trident-train, run once per GPU by an MPI launcher:
#   N_GPUS=4 TP_SIZE=2 PP_SIZE=2 DATA_PATH=data/my-gpt2_text_document mpirun -np 4 launch/run-one-node.sh
# Extra arguments ("$@") go to trident-train last, so they win over the same flag below. Set
# the schedule through the variables (TRAIN_ITERS or TRAIN_SAMPLES, LR_WARMUP_ITERS, ...):
# the script always passes one of each of Megatron's alternative flags, which an added
# --train-samples or --lr-warmup-samples would meet rather than replace.
#
# Each rank: picks its GPU from the MPI local rank (CUDA_VISIBLE_DEVICES; an existing list
# is indexed by the local rank), sizes OMP/BLAS threads to the cores shared by the ranks on
# its node, checks that the MPI world size equals N_GPUS, and execs
# $BUILD_DIR/tools/trident-train with the equivalent Megatron flags.
#
# Variables (the seed's names; default in brackets):
#   MODEL_NAME [gpt2-345m]       CHECKPOINT_PATH [<repo>/checkpoints/$MODEL_NAME; empty: none]
#   DATA_PATH [empty: synthetic tokens]   TENSORBOARD_PATH [<repo>/out/tensorboard/$MODEL_NAME; empty: none]
#   N_GPUS [4]  TP_SIZE [4]  PP_SIZE [1]  MICRO_BATCH_SIZE [4]  GLOBAL_BATCH_SIZE [64]
#   NLAYERS [24]  NHIDDEN [1024]  NHEADS [16]  SEQ_LEN [1024]  SAVE_INTERVAL [1000]
#   DATA_PATH: one dataset prefix (kept whole, spaces and all, when $DATA_PATH.idx exists), or
#     Megatron's blend split at spaces: "0.3 A 0.7 B" (weights) or "A B" (mixed by size)
#   VOCAB_FILE, MERGE_FILE [<repo>/data/gpt2/gpt2-{vocab.json,merges.txt}: tools/get-gpt2-vocab.sh]
#   TRAIN_ITERS [5000]  LR_DECAY_ITERS [unset: TRAIN_ITERS]  LR_WARMUP_ITERS [unset: a tenth of
#     the decay, at most LR_WARMUP_ITERS_MAX [500]; must stay below the decay], or the seed's
#     sample-based TRAIN_SAMPLES, LR_DECAY_SAMPLES [unset: TRAIN_SAMPLES], LR_WARMUP_SAMPLES [0;
#     below the decay]
#   LR [1e-4]  MIN_LR [1e-5]  LR_DECAY_STYLE [cosine]
#   WEIGHT_DECAY [0.1]  CLIP_GRAD [1.0]  ADAM_BETA1 [0.9]  ADAM_BETA2 [0.95]  ADAM_EPS [1e-8]
#   INIT_METHOD_STD [0.02]  LOG_INTERVAL [10]  SEED [1234]  SPLIT [949,50,1]  DEVICE [auto]
#   ZERO_STAGE [unset: trident's default]  VOCAB_SIZE [unset; synthetic tokens only]
#   RECOMPUTE [none | full: every layer's activations recomputed in backward (Megatron's
#     --recompute-granularity full --recompute-method uniform), RECOMPUTE_NUM_LAYERS [1] per group]
#   SEQUENCE_PARALLEL [0 | 1: Megatron's --sequence-parallel, with TP_SIZE > 1]
#   VIRTUAL_STAGE_LAYERS [unset | N: the interleaved pipeline schedule, N layers per model chunk
#     (--num-layers-per-virtual-pipeline-stage); NLAYERS a multiple of PP_SIZE x N]
#   EVAL_INTERVAL, EVAL_ITERS [unset; passed when set and trident-train lists the flag]
#   NON_PERSISTENT_SAVE_INTERVAL [unset | N: Megatron's non-persistent checkpoints every N
#     iterations, with CHECKPOINT_PATH: in $CHECKPOINT_PATH/non_persistent, or with
#     LOCAL_CKPT_DIR [unset] each rank's in LOCAL_CKPT_DIR/<rank> on its node (e.g. a local NVMe)]
#   PRECISION [fp32 | fp16 | bf16]; with fp16, dynamic loss scaling: INITIAL_LOSS_SCALE [65536],
#     MIN_LOSS_SCALE [1], LOSS_SCALE_WINDOW [1000], HYSTERESIS [2] (passed when listed)
#   BUILD_DIR [<repo>/build]   TRIDENT_DRY_RUN [0; 1 prints rank 0's command instead of running]
# Checkpoint, TensorBoard, eval and loss-scale flags are passed only when `trident-train
# --help` lists them; a precision flag it does not list is an error. --load gets
# CHECKPOINT_PATH too (a missing or empty one starts from scratch). The seed's
# CODECARBON_PATH is not used. Errors are one line from rank 0 (a per-node GPU shortage:
# from the node's local rank 0), exit 2.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/launch/common.sh"
me=run-one-node.sh

# --- where this rank sits ------------------------------------------------------------
first_set() {  # first_set DEFAULT VAR... : value of the first variable that is set
  local def=$1 v
  shift
  for v in "$@"; do
    if [[ -n ${!v:-} ]]; then echo "${!v}"; return; fi
  done
  echo "$def"
}
under_mpi=1
world_size=$(first_set "" OMPI_COMM_WORLD_SIZE PMI_SIZE MV2_COMM_WORLD_SIZE SLURM_NTASKS)
[[ -n $world_size ]] || under_mpi=0
world_size=${world_size:-1}
world_rank=$(first_set 0 OMPI_COMM_WORLD_RANK PMI_RANK PMIX_RANK MV2_COMM_WORLD_RANK SLURM_PROCID)
local_rank=$(first_set 0 OMPI_COMM_WORLD_LOCAL_RANK MPI_LOCALRANKID MV2_COMM_WORLD_LOCAL_RANK SLURM_LOCALID LOCAL_RANK)
local_size=$(first_set 1 OMPI_COMM_WORLD_LOCAL_SIZE MPI_LOCALNRANKS MV2_COMM_WORLD_LOCAL_SIZE LOCAL_WORLD_SIZE)
# One line from rank 0; every rank exits with the same code, so mpirun stops the job.
fail() {
  [[ $world_rank != 0 ]] || echo "$me: error: $*" >&2
  exit 2
}
read_dry_run
# A check of this node's files or GPUs, which another node may pass: one line from each
# node that fails it (its first local rank), naming the host.
fail_node() {
  [[ $local_rank != 0 ]] || echo "$me: error: $(hostname): $*" >&2
  exit 2
}

# --- the seed's variables ------------------------------------------------------------
MODEL_NAME=${MODEL_NAME:-gpt2-345m}
CHECKPOINT_PATH=${CHECKPOINT_PATH-$repo/checkpoints/$MODEL_NAME}
TENSORBOARD_PATH=${TENSORBOARD_PATH-$repo/out/tensorboard/$MODEL_NAME}
DATA_PATH=${DATA_PATH:-}
N_GPUS=${N_GPUS:-4}
TP_SIZE=${TP_SIZE:-4}
PP_SIZE=${PP_SIZE:-1}
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-4}
GLOBAL_BATCH_SIZE=${GLOBAL_BATCH_SIZE:-64}
NLAYERS=${NLAYERS:-24}
NHIDDEN=${NHIDDEN:-1024}
NHEADS=${NHEADS:-16}
SEQ_LEN=${SEQ_LEN:-1024}
SAVE_INTERVAL=${SAVE_INTERVAL:-1000}
VOCAB_FILE=${VOCAB_FILE:-$repo/data/gpt2/gpt2-vocab.json}
MERGE_FILE=${MERGE_FILE:-$repo/data/gpt2/gpt2-merges.txt}
PRECISION=${PRECISION:-fp32}
BUILD_DIR=${BUILD_DIR:-$repo/build}
train=$BUILD_DIR/tools/trident-train

for v in N_GPUS TP_SIZE PP_SIZE MICRO_BATCH_SIZE GLOBAL_BATCH_SIZE NLAYERS NHIDDEN NHEADS SEQ_LEN SAVE_INTERVAL; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || fail "$v must be a positive integer (got '${!v}')"
done
for v in TRAIN_ITERS TRAIN_SAMPLES LR_DECAY_ITERS LR_DECAY_SAMPLES NON_PERSISTENT_SAVE_INTERVAL; do
  [[ -z ${!v:-} || ${!v} =~ ^[1-9][0-9]*$ ]] || fail "$v must be a positive integer (got '${!v}')"
done
for v in LR_WARMUP_ITERS LR_WARMUP_SAMPLES LR_WARMUP_ITERS_MAX; do
  [[ -z ${!v:-} || ${!v} =~ ^[0-9]+$ ]] || fail "$v must be a non-negative integer (got '${!v}')"
done
case $PRECISION in fp32 | fp16 | bf16) ;; *) fail "PRECISION must be fp32, fp16 or bf16 (got '$PRECISION')" ;; esac
[[ -z ${NON_PERSISTENT_SAVE_INTERVAL:-} || -n ${CHECKPOINT_PATH:-} ]] ||
  fail "NON_PERSISTENT_SAVE_INTERVAL needs CHECKPOINT_PATH (the non-persistent checkpoints go beside its)"
[[ -z ${LOCAL_CKPT_DIR:-} || -n ${NON_PERSISTENT_SAVE_INTERVAL:-} ]] ||
  fail "LOCAL_CKPT_DIR needs NON_PERSISTENT_SAVE_INTERVAL (how often each rank saves there)"
RECOMPUTE=${RECOMPUTE:-none}
case $RECOMPUTE in none | full) ;; *) fail "RECOMPUTE must be none or full (got '$RECOMPUTE')" ;; esac
case ${SEQUENCE_PARALLEL:-0} in 0 | 1) ;; *) fail "SEQUENCE_PARALLEL must be 0 or 1 (got '$SEQUENCE_PARALLEL')" ;; esac
[[ -z ${VIRTUAL_STAGE_LAYERS:-} || $VIRTUAL_STAGE_LAYERS =~ ^[1-9][0-9]*$ ]] ||
  fail "VIRTUAL_STAGE_LAYERS must be a positive integer (got '$VIRTUAL_STAGE_LAYERS')"
# In a dry run outside mpirun, show what rank 0 of an N_GPUS job would run.
if [[ $dry_run == 1 && $under_mpi == 0 ]]; then world_size=$N_GPUS; fi

[[ $world_size == "$N_GPUS" ]] ||
  fail "MPI world size is $world_size but N_GPUS=$N_GPUS (launch with mpirun -np $N_GPUS, or set N_GPUS=$world_size)"
((N_GPUS % (TP_SIZE * PP_SIZE) == 0)) ||
  fail "N_GPUS=$N_GPUS is not a multiple of TP_SIZE*PP_SIZE=$TP_SIZE*$PP_SIZE"
[[ $dry_run == 1 || -x $train ]] || fail_node "no trident-train at $train (build with tools/build.sh, or set BUILD_DIR)"

# --- GPU and threads -------------------------------------------------------------------
# A node-local problem: said once per node, by its local rank 0.
if [[ ${DEVICE:-auto} != cpu ]]; then
  gpus=()
  if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then  # a list chosen by the user: take our entry
    IFS=, read -r -a gpus <<<"$CUDA_VISIBLE_DEVICES"
  elif [[ $dry_run != 1 ]] && command -v nvidia-smi >/dev/null; then
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    for ((i = 0; i < n; i++)); do gpus+=("$i"); done
  fi
  if ((${#gpus[@]} > 0)); then
    ((local_size <= ${#gpus[@]})) ||
      fail_node "$local_size ranks on this node but ${#gpus[@]} GPU(s): one rank per GPU (DEVICE=cpu runs on the CPU)"
    if ((local_rank < ${#gpus[@]})); then
      export CUDA_VISIBLE_DEVICES=${gpus[local_rank]}
    elif ((${#gpus[@]} == 1)) && [[ -n ${SLURM_LOCALID:-} ]]; then
      :  # srun bound this task to its GPU (--gpus-per-task 1): keep it
    else
      # Only ranks past the list get here (never local rank 0, which fail_node lets speak).
      echo "$me: error: $(hostname): local rank $local_rank but CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES lists ${#gpus[@]} GPU(s)" >&2
      exit 2
    fi
  else
    export CUDA_VISIBLE_DEVICES=$local_rank
  fi
fi
export TRIDENT_LOCAL_RANK=$local_rank
# Cores this rank may use (nproc itself obeys OMP_NUM_THREADS, so ask without it), shared
# by the ranks of this node; a user's OMP_NUM_THREADS wins.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
threads=$((cores / local_size))
((threads >= 1)) || threads=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
# OpenBLAS's OpenMP build (the one CMake links) follows OMP_NUM_THREADS; a pthreads build
# reads this.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$OMP_NUM_THREADS}

# --- which optional flags this trident-train has ---------------------------------------
help_text=""
if [[ -x $train ]]; then
  # Without the launcher's variables, so --help does not join the MPI job.
  mpi_vars=()
  while read -r v; do mpi_vars+=(-u "$v"); done < <(compgen -e | grep -E '^(OMPI_|PMIX_|PMI_|MV2_|SLURM_)' || true)
  help_text=$(env "${mpi_vars[@]}" "$train" --help 2>/dev/null || true)
fi
supports() {  # supports FLAG (no dashes); a dry run without a binary assumes yes
  [[ -z $help_text && $dry_run == 1 ]] && return 0
  grep -Eq -- "--$1( |=|,|\$)" <<<"$help_text"
}
note() { [[ $world_rank != 0 ]] || echo "$me: note: $*" >&2; }

# --- the command ---------------------------------------------------------------------
args=(
  --tensor-model-parallel-size "$TP_SIZE" --pipeline-model-parallel-size "$PP_SIZE"
  --num-layers "$NLAYERS" --hidden-size "$NHIDDEN" --num-attention-heads "$NHEADS"
  --seq-length "$SEQ_LEN" --max-position-embeddings "$SEQ_LEN"
  --micro-batch-size "$MICRO_BATCH_SIZE" --global-batch-size "$GLOBAL_BATCH_SIZE"
  --lr "${LR:-1e-4}" --min-lr "${MIN_LR:-1e-5}" --lr-decay-style "${LR_DECAY_STYLE:-cosine}"
  --weight-decay "${WEIGHT_DECAY:-0.1}" --clip-grad "${CLIP_GRAD:-1.0}"
  --adam-beta1 "${ADAM_BETA1:-0.9}" --adam-beta2 "${ADAM_BETA2:-0.95}" --adam-eps "${ADAM_EPS:-1e-8}"
  --init-method-std "${INIT_METHOD_STD:-0.02}" --seed "${SEED:-1234}"
  --log-interval "${LOG_INTERVAL:-10}" --device "${DEVICE:-auto}"
)
# The warm-up must end before the decay does (trident-train's rule): a user's warm-up that
# does not is named here by its variables, and the default one is short enough for any run.
warmup_below_decay() {  # warmup_below_decay WARMUP_VAR WARMUP DECAY_VARS DECAY
  (($2 < $4)) || fail "$1=$2 must be below the learning-rate decay, $3=$4"
}
if [[ -n ${TRAIN_SAMPLES:-} ]]; then  # Megatron-DeepSpeed's sample-based schedule
  supports train-samples || fail_node "TRAIN_SAMPLES is set but $train does not list --train-samples (use TRAIN_ITERS)"
  decay_var=LR_DECAY_SAMPLES
  [[ -n ${LR_DECAY_SAMPLES:-} ]] || decay_var="TRAIN_SAMPLES (LR_DECAY_SAMPLES unset)"
  warmup_below_decay LR_WARMUP_SAMPLES "${LR_WARMUP_SAMPLES:-0}" "$decay_var" "${LR_DECAY_SAMPLES:-$TRAIN_SAMPLES}"
  args+=(--train-samples "$TRAIN_SAMPLES" --lr-warmup-samples "${LR_WARMUP_SAMPLES:-0}")
  [[ -z ${LR_DECAY_SAMPLES:-} ]] || args+=(--lr-decay-samples "$LR_DECAY_SAMPLES")
else
  TRAIN_ITERS=${TRAIN_ITERS:-5000}
  decay_var=LR_DECAY_ITERS
  [[ -n ${LR_DECAY_ITERS:-} ]] || decay_var="TRAIN_ITERS (LR_DECAY_ITERS unset)"
  decay_iters=${LR_DECAY_ITERS:-$TRAIN_ITERS}
  if [[ -z ${LR_WARMUP_ITERS:-} ]]; then  # a tenth of the decay, at most LR_WARMUP_ITERS_MAX
    LR_WARMUP_ITERS=$((decay_iters / 10))
    ((LR_WARMUP_ITERS <= ${LR_WARMUP_ITERS_MAX:-500})) || LR_WARMUP_ITERS=${LR_WARMUP_ITERS_MAX:-500}
  fi
  warmup_below_decay LR_WARMUP_ITERS "$LR_WARMUP_ITERS" "$decay_var" "$decay_iters"
  args+=(--train-iters "$TRAIN_ITERS" --lr-warmup-iters "$LR_WARMUP_ITERS")
  [[ -z ${LR_DECAY_ITERS:-} ]] || args+=(--lr-decay-iters "$LR_DECAY_ITERS")
fi
[[ -z ${ZERO_STAGE:-} ]] || args+=(--zero-stage "$ZERO_STAGE")
if [[ $RECOMPUTE == full ]]; then
  args+=(--recompute-granularity full --recompute-method uniform --recompute-num-layers "${RECOMPUTE_NUM_LAYERS:-1}")
fi
[[ ${SEQUENCE_PARALLEL:-0} == 0 ]] || args+=(--sequence-parallel)
[[ -z ${VIRTUAL_STAGE_LAYERS:-} ]] || args+=(--num-layers-per-virtual-pipeline-stage "$VIRTUAL_STAGE_LAYERS")
if [[ -n $DATA_PATH ]]; then
  # Megatron's --data-path: one prefix, kept whole when it names a dataset (a path with
  # spaces), or a blend split at spaces: weights and prefixes ("0.3 A 0.7 B") or prefixes
  # ("A B"). Outside a dry run, a word that is neither is named here rather than by
  # trident-train as a piece of DATA_PATH it never saw.
  if [[ -f $DATA_PATH.idx ]]; then
    data_words=("$DATA_PATH")
  else
    read -r -a data_words <<<"$DATA_PATH"
    for w in "${data_words[@]}"; do
      [[ $dry_run == 1 || -f $w.idx || $w =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] ||
        fail_node "DATA_PATH='$DATA_PATH': '$w' is neither a weight nor a dataset prefix (no $w.idx)"
    done
  fi
  args+=(--data-path "${data_words[@]}" --split "${SPLIT:-949,50,1}"
    --tokenizer-type GPT2BPETokenizer --vocab-file "$VOCAB_FILE" --merge-file "$MERGE_FILE")
  [[ $dry_run == 1 || -f $VOCAB_FILE ]] || fail_node "VOCAB_FILE not found: $VOCAB_FILE (run tools/get-gpt2-vocab.sh)"
else
  note "DATA_PATH is empty: training on synthetic tokens"
  [[ -z ${VOCAB_SIZE:-} ]] || args+=(--vocab-size "$VOCAB_SIZE")
fi

case $PRECISION in
  fp16 | bf16)
    if supports "$PRECISION"; then
      args+=("--$PRECISION")
    elif [[ $dry_run == 1 ]]; then
      args+=("--$PRECISION")
      note "$train does not list --$PRECISION yet: a real run would stop here"
    else
      fail_node "PRECISION=$PRECISION but $train does not list --$PRECISION (rebuild a newer trident)"
    fi
    ;;
esac
if [[ $PRECISION == fp16 ]]; then  # dynamic loss scaling (no --loss-scale)
  supports initial-loss-scale && args+=(--initial-loss-scale "${INITIAL_LOSS_SCALE:-65536}")
  supports min-loss-scale && args+=(--min-loss-scale "${MIN_LOSS_SCALE:-1}")
  supports loss-scale-window && args+=(--loss-scale-window "${LOSS_SCALE_WINDOW:-1000}")
  supports hysteresis && args+=(--hysteresis "${HYSTERESIS:-2}")
fi

if [[ -n $CHECKPOINT_PATH ]]; then
  if supports save; then
    args+=(--save "$CHECKPOINT_PATH")
    supports save-interval && args+=(--save-interval "$SAVE_INTERVAL")
    # Resumes from the latest checkpoint there; trident-train starts from scratch when the
    # directory is missing or empty.
    supports load && args+=(--load "$CHECKPOINT_PATH")
    if [[ -n ${NON_PERSISTENT_SAVE_INTERVAL:-} ]]; then
      if ! supports non-persistent-local-ckpt-dir; then
        fail_node "NON_PERSISTENT_SAVE_INTERVAL is set but $train does not list --non-persistent-local-ckpt-dir (rebuild a newer trident)"
      fi
      args+=(--non-persistent-save-interval "$NON_PERSISTENT_SAVE_INTERVAL")
      if [[ -n ${LOCAL_CKPT_DIR:-} ]]; then
        args+=(--non-persistent-ckpt-type local --non-persistent-local-ckpt-dir "$LOCAL_CKPT_DIR")
      else
        args+=(--non-persistent-ckpt-type global)
      fi
    fi
  else
    note "this trident-train has no --save yet: CHECKPOINT_PATH is not used"
  fi
fi
if [[ -n $TENSORBOARD_PATH ]]; then
  if supports tensorboard-dir; then
    args+=(--tensorboard-dir "$TENSORBOARD_PATH")
  else
    note "this trident-train has no --tensorboard-dir yet: TENSORBOARD_PATH is not used"
  fi
fi
[[ -z ${EVAL_INTERVAL:-} ]] || ! supports eval-interval || args+=(--eval-interval "$EVAL_INTERVAL")
[[ -z ${EVAL_ITERS:-} ]] || ! supports eval-iters || args+=(--eval-iters "$EVAL_ITERS")

if [[ $dry_run == 1 ]]; then
  [[ $world_rank != 0 ]] || {
    printf '%s: dry run, rank 0 of %s would run:' "$me" "$world_size"
    [[ ${DEVICE:-auto} == cpu ]] || printf ' CUDA_VISIBLE_DEVICES=%s' "$CUDA_VISIBLE_DEVICES"
    printf ' OMP_NUM_THREADS=%s' "$OMP_NUM_THREADS"
    print_command "$train" "${args[@]}" "$@"
  }
  exit 0
fi
exec "$train" "${args[@]}" "$@"
