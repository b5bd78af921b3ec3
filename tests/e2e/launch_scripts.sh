#!/usr/bin/env bash
# The launch scripts end to end: run-one-node.sh under mpirun (tp2, a tiny model on synthetic
# tokens, CPU, 6 iterations with the default warm-up) logs Megatron's iteration line; a world
# size that is not N_GPUS stops with one error line; the 16B scripts' dry runs
# (TRIDENT_DRY_RUN=1) build the seed's command lines, also when run by sh; DATA_PATH with a
# space, blends, the warm-up default and its checks, the default vocabulary, run-inf.sh.
#   tests/e2e/launch_scripts.sh <trident-train> <repo>
set -euo pipefail
train=$1
repo=$2
export BUILD_DIR
BUILD_DIR=$(cd "$(dirname "$train")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ $EUID -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# The scripts' variables come from this test only, not from the caller's environment.
unset MODEL_NAME CHECKPOINT_PATH DATA_PATH TENSORBOARD_PATH N_GPUS TP_SIZE PP_SIZE MICRO_BATCH_SIZE \
  GLOBAL_BATCH_SIZE NLAYERS NHIDDEN NHEADS SEQ_LEN SAVE_INTERVAL VOCAB_FILE MERGE_FILE TRAIN_ITERS \
  TRAIN_SAMPLES LR_WARMUP_ITERS LR_WARMUP_SAMPLES LR_DECAY_ITERS LR_DECAY_SAMPLES PRECISION ZERO_STAGE RECOMPUTE \
  SEQUENCE_PARALLEL VIRTUAL_STAGE_LAYERS \
  DEVICE HOSTFILE NNODES GPUS_PER_NODE MPIRUN_ARGS TRIDENT_DRY_RUN CUDA_VISIBLE_DEVICES LR_WARMUP_ITERS_MAX \
  NUM_SAMPLES OUT_SEQ_LENGTH GENFILE SAMPLE_INPUT_FILE SAMPLE_OUTPUT_FILE TEMPERATURE TOP_K TOP_P SEED
fails=0
check() {  # check <what> <command...>: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
has() { grep -qF -- "$2" "$1"; }  # has <file> <text>
lacks() { ! grep -qF -- "$2" "$1"; }

# 1. Two ranks, tp2: the iteration line appears and the loss is a number. TRAIN_ITERS=6 and
# no LR_WARMUP_ITERS: the default warm-up (a tenth of the decay: 0) fits the run.
tiny=(N_GPUS=2 TP_SIZE=2 PP_SIZE=1 NLAYERS=2 NHIDDEN=64 NHEADS=4 SEQ_LEN=64 VOCAB_SIZE=512
  MICRO_BATCH_SIZE=4 GLOBAL_BATCH_SIZE=8 TRAIN_ITERS=6 LOG_INTERVAL=3
  SAVE_INTERVAL=3 EVAL_ITERS=1 DEVICE=cpu MODEL_NAME=tiny DATA_PATH=
  CHECKPOINT_PATH="$tmp/ckpt" TENSORBOARD_PATH="$tmp/tb")
rc=0
env "${tiny[@]}" mpirun --oversubscribe -np 2 "$repo/launch/run-one-node.sh" >"$tmp/run.out" 2>"$tmp/run.err" || rc=$?
cat "$tmp/run.out" "$tmp/run.err"
check "tp2 run exits 0" [ "$rc" -eq 0 ]
check "two iteration lines" [ "$(grep -c '^ iteration ' "$tmp/run.out")" -eq 2 ]
check "last line is iteration 6/6 with a loss" \
  grep -Eq '^ iteration +6/ +6 \|.*lm loss: [0-9]\.[0-9]+E[+-][0-9]+ ' "$tmp/run.out"
# CHECKPOINT_PATH did not exist: --load it anyway, and trident-train starts from scratch.
check "missing checkpoint directory: one warning, trained from scratch" \
  [ "$(grep -c "^trident: warning: --load $tmp/ckpt does not exist" "$tmp/run.out")" -eq 1 ]
# The same run as a dry run: checkpoint and TensorBoard flags go through once trident-train
# lists them (writing the files is the trainer's business, tested with it).
env "${tiny[@]}" TRIDENT_DRY_RUN=1 "$repo/launch/run-one-node.sh" --seed 7 >"$tmp/dry.out" 2>/dev/null
cat "$tmp/dry.out"
check "dry run: rank 0 of 2, tp 2, extra args last" \
  grep -Eq '^run-one-node.sh: dry run, rank 0 of 2 would run: .*--tensor-model-parallel-size 2 .* --seed 7$' "$tmp/dry.out"
check "dry run: the default warm-up of a 6-iteration run is 0" has "$tmp/dry.out" " --lr-warmup-iters 0 "
help=$("$train" --help)
for f in "--save $tmp/ckpt" "--load $tmp/ckpt" "--save-interval 3" "--tensorboard-dir $tmp/tb"; do
  if grep -q -- "${f%% *} " <<<"$help"; then check "dry run passes $f" has "$tmp/dry.out" "$f "; fi
done

# Sequence parallelism and the interleaved schedule by variable; a bad value is one line.
env "${tiny[@]}" PP_SIZE=2 N_GPUS=4 NLAYERS=4 SEQUENCE_PARALLEL=1 VIRTUAL_STAGE_LAYERS=1 TRIDENT_DRY_RUN=1 \
  "$repo/launch/run-one-node.sh" >"$tmp/dry-sp.out" 2>/dev/null
check "dry run: SEQUENCE_PARALLEL=1 passes --sequence-parallel" has "$tmp/dry-sp.out" " --sequence-parallel"
check "dry run: VIRTUAL_STAGE_LAYERS=1 passes the interleaving flag" \
  has "$tmp/dry-sp.out" " --num-layers-per-virtual-pipeline-stage 1"
rc=0
env "${tiny[@]}" SEQUENCE_PARALLEL=yes TRIDENT_DRY_RUN=1 "$repo/launch/run-one-node.sh" >/dev/null 2>"$tmp/sp.err" || rc=$?
check "SEQUENCE_PARALLEL=yes: one error line" [ "$rc" -ne 0 ] && check "  naming it" has "$tmp/sp.err" "SEQUENCE_PARALLEL must be 0 or 1"
# TRIDENT_DRY_RUN other than 0 or 1 is refused by every launcher, not taken for 0 (a real run).
for script in run-one-node.sh mpi-run-16B.sh run-inf.sh run-text-generation-server.sh; do
  rc=0
  env "${tiny[@]}" TRIDENT_DRY_RUN=true MPIRUN=false "$repo/launch/$script" >"$tmp/dr.out" 2>"$tmp/dr.err" || rc=$?
  check "$script, TRIDENT_DRY_RUN=true: exit 2 and one line" [ "$rc" -eq 2 -a "$(wc -l <"$tmp/dr.err")" -eq 1 ] &&
    check "  naming it" has "$tmp/dr.err" "$script: error: TRIDENT_DRY_RUN must be 0 or 1, got 'true'"
done

# 2. N_GPUS that is not the world size: one line from rank 0, non-zero exit.
rc=0
env "${tiny[@]}" N_GPUS=4 mpirun --oversubscribe -np 2 "$repo/launch/run-one-node.sh" >"$tmp/bad.out" 2>"$tmp/bad.err" || rc=$?
check "N_GPUS=4 under -np 2 fails" [ "$rc" -ne 0 ]
check "one error line naming N_GPUS" [ "$(grep -c '^run-one-node.sh: error: MPI world size is 2 but N_GPUS=4' "$tmp/bad.err")" -eq 1 ]
check "no training happened" [ "$(grep -c '^ iteration ' "$tmp/bad.out")" -eq 0 ]
# A check that fails on one rank only (its node has no build: MPMD gives that rank its own
# BUILD_DIR) while rank 0 goes on into trident-train's MPI_Init: the failing rank's exit 2
# must end the job, not leave rank 0 waiting for it (mpirun aborts on a non-zero exit).
rc=0
SECONDS=0
env "${tiny[@]}" timeout 120 mpirun --oversubscribe -np 1 "$repo/launch/run-one-node.sh" : \
  -np 1 -x BUILD_DIR="$tmp/no-build" "$repo/launch/run-one-node.sh" \
  >"$tmp/node.out" 2>"$tmp/node.err" || rc=$?
check "one rank failing before MPI_Init ends the job with its exit 2 (rc $rc, ${SECONDS} s)" [ "$rc" -eq 2 ]
check "  and no training happened" [ "$(grep -c '^ iteration ' "$tmp/node.out")" -eq 0 ]

# 3. The 16B dry runs: mpirun over the hostfile, then rank 0's trident-train command.
for i in $(seq -w 1 32); do echo "node$i slots=4"; done >"$tmp/hostfile"
want16b=(--tensor-model-parallel-size 4 --pipeline-model-parallel-size 8 --num-layers 40
  --hidden-size 5760 --num-attention-heads 48 --seq-length 2048 --max-position-embeddings 2048
  --recompute-granularity full --recompute-method uniform)
for script in mpi-run-16B.sh mpi-16B-fp16.sh; do
  out=$tmp/$script.out
  rc=0
  env HOSTFILE="$tmp/hostfile" DATA_PATH="$tmp/data_text_document" TRIDENT_DRY_RUN=1 \
    "$repo/launch/$script" >"$out" 2>"$tmp/$script.err" || rc=$?
  cat "$out"
  check "$script dry run exits 0" [ "$rc" -eq 0 ]
  mpi_line=$(grep '^mpi-run-16B.sh: dry run:' "$out" || true)
  rank_line=$(grep '^run-one-node.sh: dry run, rank 0 of 128 would run:' "$out" || true)
  for w in "mpirun -np 128 " "--hostfile $tmp/hostfile " "--map-by ppr:4:node " "--bind-to none " "launch/single-16B.sh"; do
    check "$script: mpirun has '$w'" has <(echo "$mpi_line") "$w"
  done
  for ((i = 0; i < ${#want16b[@]}; i += 2)); do
    check "$script: ${want16b[i]} ${want16b[i + 1]}" has <(echo "$rank_line ") "${want16b[i]} ${want16b[i + 1]} "
  done
  check "$script: data path passed" has <(echo "$rank_line") "--data-path $tmp/data_text_document "
  if [[ $script == mpi-16B-fp16.sh ]]; then
    check "$script: --fp16" has <(echo "$rank_line ") " --fp16 "
  else
    check "$script: no --fp16" lacks <(echo "$rank_line ") " --fp16 "
  fi
done
# trident-train accepts every flag of the fp16 command: run alone (world 1), it gets past the
# parser and stops at the layout check (memory capped, in case it ever got further).
cmd16=$(sed -n 's/^run-one-node.sh: dry run, rank 0 of 128 would run: //p' "$tmp/mpi-16B-fp16.sh.out" |
  sed 's/ --data-path .* --merge-file [^ ]*//')
rc=0
(ulimit -v 4000000; eval "timeout 20 env $cmd16") >/dev/null 2>"$tmp/parse.err" || rc=$?
cat "$tmp/parse.err"
check "the 16B fp16 flags parse: exit 2" [ "$rc" -eq 2 ]
check "the 16B fp16 flags parse: no unknown flag" lacks "$tmp/parse.err" "unknown flag"
check "the 16B fp16 flags parse: stops at the world-size check" has "$tmp/parse.err" "world size 1"
# The 16B config holds the same shape as the scripts.
for kv in "num-layers: 40" "hidden-size: 5760" "num-attention-heads: 48" "seq-length: 2048"; do
  check "gpt2-16b.yaml has '$kv'" grep -qx "$kv" "$repo/configs/gpt2-16b.yaml"
done
# A hostfile shorter than NNODES is a one-line error.
rc=0
NNODES=64 HOSTFILE="$tmp/hostfile" TRIDENT_DRY_RUN=1 "$repo/launch/mpi-run-16B.sh" >/dev/null 2>"$tmp/nn.err" || rc=$?
check "NNODES=64 with 32 hosts: exit 2" [ "$rc" -eq 2 ]
check "NNODES=64 with 32 hosts: one line naming NNODES" [ "$(grep -c 'NNODES=64' "$tmp/nn.err")" -eq 1 ]
check "NNODES=64 with 32 hosts: nothing else" [ "$(wc -l <"$tmp/nn.err")" -eq 1 ]

# 4. sh runs the scripts under bash (dash on Debian, bash's POSIX mode elsewhere): the seed
# says `sh mpi-run-16B.sh`.
for shell in sh "bash --posix"; do
  rc=0
  env HOSTFILE="$tmp/hostfile" TRIDENT_DRY_RUN=1 $shell "$repo/launch/mpi-run-16B.sh" >"$tmp/sh.out" 2>"$tmp/sh.err" || rc=$?
  check "$shell launch/mpi-run-16B.sh: exit 0" [ "$rc" -eq 0 ]
  check "$shell launch/mpi-run-16B.sh: rank 0's command" has "$tmp/sh.out" "run-one-node.sh: dry run, rank 0 of 128 would run:"
done

# Dry runs of run-one-node.sh on one rank: dry <output file> [VAR=value...].
dry() {
  local out=$1
  shift
  local rc=0
  env N_GPUS=1 TP_SIZE=1 DEVICE=cpu CHECKPOINT_PATH= TENSORBOARD_PATH= "$@" TRIDENT_DRY_RUN=1 \
    "$repo/launch/run-one-node.sh" >"$out" 2>&1 || rc=$?
  sed -i 's/$/ /' "$out"  # every word, the last included, ends with a space
  return $rc
}
# 5. DATA_PATH: a prefix with a space stays one word when its .idx exists; a blend, weighted
# or not, is split; a word that is neither a weight nor a dataset is named with DATA_PATH.
mkdir -p "$tmp/sp ace"
touch "$tmp/sp ace/demo_text_document.idx" "$tmp/a_text_document.idx" "$tmp/b_text_document.idx"
dry "$tmp/space.out" DATA_PATH="$tmp/sp ace/demo_text_document"
check "DATA_PATH with a space: one --data-path word" \
  has "$tmp/space.out" "--data-path $(printf %q "$tmp/sp ace/demo_text_document") --split"
dry "$tmp/blend.out" DATA_PATH="0.3 $tmp/a_text_document 0.7 $tmp/b_text_document"
check "weighted blend: four words" has "$tmp/blend.out" "--data-path 0.3 $tmp/a_text_document 0.7 $tmp/b_text_document --split"
dry "$tmp/blend2.out" DATA_PATH="$tmp/a_text_document $tmp/b_text_document"
check "unweighted blend: two words" has "$tmp/blend2.out" "--data-path $tmp/a_text_document $tmp/b_text_document --split"
check "the default vocabulary: <repo>/data/gpt2" has "$tmp/blend2.out" "--vocab-file $repo/data/gpt2/gpt2-vocab.json "
rc=0
env N_GPUS=1 TP_SIZE=1 DEVICE=cpu DATA_PATH="$tmp/sp ace/none_text_document" "$repo/launch/run-one-node.sh" \
  >"$tmp/neither.out" 2>"$tmp/neither.err" || rc=$?
cat "$tmp/neither.err"
check "DATA_PATH word that is neither: exit 2" [ "$rc" -eq 2 ]
check "DATA_PATH word that is neither: one line naming the host, DATA_PATH and the word" [ "$(grep -c \
  "^run-one-node.sh: error: $(hostname): DATA_PATH='$tmp/sp ace/none_text_document': '$tmp/sp' is neither a weight nor a dataset prefix" \
  "$tmp/neither.err")" -eq 1 -a "$(wc -l <"$tmp/neither.err")" -eq 1 ]
# A check of a node's own files fails on that node alone: its first local rank, here world
# rank 1 of 2 (another node's first rank, as mpirun would tell it), says so with the host.
rc=0
env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=1 \
  N_GPUS=2 TP_SIZE=1 DEVICE=cpu BUILD_DIR="$tmp/no-build" "$repo/launch/run-one-node.sh" >"$tmp/node.out" \
  2>"$tmp/node.err" || rc=$?
cat "$tmp/node.err"
check "no trident-train on another node: exit 2, one line from its first rank naming the host" [ "$rc" -eq 2 -a \
  "$(grep -c "^run-one-node.sh: error: $(hostname): no trident-train at $tmp/no-build/" "$tmp/node.err")" -eq 1 -a \
  "$(wc -l <"$tmp/node.err")" -eq 1 ]

# Non-persistent checkpoints: the global type beside CHECKPOINT_PATH's, or with LOCAL_CKPT_DIR
# each rank's on its node; either without what it needs is one line naming both variables.
dry "$tmp/np.out" CHECKPOINT_PATH="$tmp/ck" NON_PERSISTENT_SAVE_INTERVAL=50
check "NON_PERSISTENT_SAVE_INTERVAL: the global type" \
  has "$tmp/np.out" " --non-persistent-save-interval 50 --non-persistent-ckpt-type global "
dry "$tmp/np.out" CHECKPOINT_PATH="$tmp/ck" NON_PERSISTENT_SAVE_INTERVAL=50 LOCAL_CKPT_DIR=/nvme/ck
check "NON_PERSISTENT_SAVE_INTERVAL with LOCAL_CKPT_DIR: the local type" has "$tmp/np.out" \
  " --non-persistent-save-interval 50 --non-persistent-ckpt-type local --non-persistent-local-ckpt-dir /nvme/ck "
for bad in "NON_PERSISTENT_SAVE_INTERVAL=50:NON_PERSISTENT_SAVE_INTERVAL needs CHECKPOINT_PATH" \
  "LOCAL_CKPT_DIR=/nvme/ck:LOCAL_CKPT_DIR needs NON_PERSISTENT_SAVE_INTERVAL"; do
  rc=0
  dry "$tmp/np.out" "${bad%%:*}" || rc=$?
  check "${bad%%:*} alone: exit 2, one line" [ "$rc" -eq 2 -a "$(grep -c "^run-one-node.sh: error: ${bad#*:}" \
    "$tmp/np.out")" -eq 1 -a "$(wc -l <"$tmp/np.out")" -eq 1 ]
done

# 6. The warm-up: a tenth of the decay, at most 500 (2000 in the 16B scripts); a user's
# warm-up that does not end before the decay is one line naming the variables.
warmup_case() {  # warmup_case <expected --lr-warmup-iters> [VAR=value...]
  local want=$1
  shift
  dry "$tmp/warm.out" "$@"
  check "$* -> --lr-warmup-iters $want" has "$tmp/warm.out" " --lr-warmup-iters $want "
}
warmup_case 500
warmup_case 30 TRAIN_ITERS=300
warmup_case 20 TRAIN_ITERS=5000 LR_DECAY_ITERS=200
warmup_case 7 TRAIN_ITERS=300 LR_WARMUP_ITERS=7
env HOSTFILE="$tmp/hostfile" TRIDENT_DRY_RUN=1 "$repo/launch/mpi-run-16B.sh" >"$tmp/warm16.out" 2>&1
check "16B: --lr-warmup-iters 2000" has "$tmp/warm16.out" " --lr-warmup-iters 2000 "
env HOSTFILE="$tmp/hostfile" TRAIN_ITERS=1000 TRIDENT_DRY_RUN=1 "$repo/launch/mpi-run-16B.sh" >"$tmp/warm16.out" 2>&1
check "16B, TRAIN_ITERS=1000: --lr-warmup-iters 100" has "$tmp/warm16.out" " --lr-warmup-iters 100 "
warmup_error() {  # warmup_error <text of the one error line> [VAR=value...]
  local text=$1 rc=0
  shift
  dry "$tmp/warm.out" "$@" || rc=$?
  check "$* -> exit 2" [ "$rc" -eq 2 ]
  check "$* -> one line: $text" [ "$(grep -cF "run-one-node.sh: error: $text" "$tmp/warm.out")" -eq 1 -a \
    "$(wc -l <"$tmp/warm.out")" -eq 1 ]
}
warmup_error "LR_WARMUP_ITERS=500 must be below the learning-rate decay, TRAIN_ITERS (LR_DECAY_ITERS unset)=300" \
  TRAIN_ITERS=300 LR_WARMUP_ITERS=500
warmup_error "LR_WARMUP_ITERS=100 must be below the learning-rate decay, LR_DECAY_ITERS=100" \
  TRAIN_ITERS=300 LR_DECAY_ITERS=100 LR_WARMUP_ITERS=100
warmup_error "LR_WARMUP_SAMPLES=640 must be below the learning-rate decay, TRAIN_SAMPLES (LR_DECAY_SAMPLES unset)=640" \
  TRAIN_SAMPLES=640 LR_WARMUP_SAMPLES=640
warmup_error "TRAIN_ITERS must be a positive integer (got '1e3')" TRAIN_ITERS=1e3
dry "$tmp/samples.out" TRAIN_SAMPLES=6400 LR_WARMUP_SAMPLES=640
check "TRAIN_SAMPLES=6400 LR_WARMUP_SAMPLES=640 -> passed" has "$tmp/samples.out" "--train-samples 6400 --lr-warmup-samples 640 "

# 7. tools/get-gpt2-vocab.sh without a folder: <repo>/data/gpt2 from any directory (only
# where it is already there: this test fetches nothing).
if [[ -f $repo/data/gpt2/gpt2-vocab.json && -f $repo/data/gpt2/gpt2-merges.txt ]]; then
  (cd "$tmp" && "$repo/tools/get-gpt2-vocab.sh") 2>"$tmp/vocab.err"
  check "get-gpt2-vocab.sh: <repo>/data/gpt2 by default" has "$tmp/vocab.err" "$repo/data/gpt2 already has"
  check "get-gpt2-vocab.sh: nothing under the current directory" [ ! -e "$tmp/data" ]
else
  echo "skip: get-gpt2-vocab.sh's default folder ($repo/data/gpt2 has no vocabulary here)"
fi

# 8. run-inf.sh (run by sh): Megatron's generation flags; the training shape when given.
env SEQ_LEN=1024 NLAYERS=24 MICRO_BATCH_SIZE=2 TP_SIZE=4 CHECKPOINT_PATH="$tmp/ck pt" TRIDENT_DRY_RUN=1 \
  sh "$repo/launch/run-inf.sh" --greedy >"$tmp/inf.out" 2>&1
cat "$tmp/inf.out"
want_inf=("--load $(printf %q "$tmp/ck pt") " "--vocab-file $repo/data/gpt2/gpt2-vocab.json " "--num-samples 8 "
  "--tensor-model-parallel-size 4 --micro-batch-size 2 " "--num-layers 24 " "--seq-length 1024 --max-position-embeddings 1024 "
  "--genfile $repo/out/gpt2-345m/unconditional_samples.json --greedy")
for w in "${want_inf[@]}"; do
  check "run-inf.sh passes '$w'" has "$tmp/inf.out" "$w"
done

echo "launch-script checks failing: $fails"
[[ $fails -eq 0 ]]
