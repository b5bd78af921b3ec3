#!/usr/bin/env bash
# `sh script.sh` (dash on Debian, bash in POSIX mode elsewhere) runs again under plain bash.
if [ -z "${BASH_VERSION:-}" ] || shopt -qo posix; then exec env -u POSIXLY_CORRECT bash "$0" "$@"; fi
# The main job from a fresh Debian machine: install, build, fetch the GPT-2 vocab, build
# the demo corpus (Debian's English and Chinese fortunes), tokenize it into Megatron's
# .bin/.idx, and train a small GPT-2 on it. On 2 CPU cores it takes a few minutes; on a
# GPU machine the same command trains on the GPU (--device auto). Then the same corpus
# again through the launcher, as on a GPU node: mpirun -np 4 launch/run-one-node.sh at
# tp2 x pp2 (on the CPU unless the machine has 4 GPUs; skipped without mpirun).
# Variables: BUILD_DIR [<repo>/build], TRAIN_ITERS [200; a tenth of it (or of an extra
# --train-iters) warms the learning rate up, at most 20 iterations], DEVICE [auto],
# MPI_TRAIN_ITERS [50; run-one-node.sh's warm-up, a tenth], MPI_DEVICE [auto with 4+ GPUs,
# else cpu]; extra arguments go to the single-process run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
for v in TRAIN_ITERS MPI_TRAIN_ITERS; do  # before the installs, which take minutes
  [[ -z ${!v:-} || ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "quickstart.sh: error: $v must be a positive integer (got '${!v}')" >&2; exit 2; }
done
# The warm-up follows the run's length: TRAIN_ITERS, or a --train-iters among the extra
# arguments (which come last, so theirs is the one trident-train takes).
train_iters=${TRAIN_ITERS:-200}
prev=
for a in "$@"; do
  if [[ $prev == --train-iters ]]; then train_iters=$a; fi
  if [[ $a == --train-iters=* ]]; then train_iters=${a#--train-iters=}; fi
  prev=$a
done
warmup_iters=20  # trident-train names a --train-iters that is no count
if [[ $train_iters =~ ^[1-9][0-9]*$ ]]; then warmup_iters=$((train_iters / 10 < 20 ? train_iters / 10 : 20)); fi
"$repo/tools/install-deps.sh"
export BUILD_DIR=${BUILD_DIR:-$repo/build}
"$repo/tools/build.sh"
bin=$BUILD_DIR/tools
data=$repo/data

"$repo/tools/get-gpt2-vocab.sh" "$data/gpt2"
if [[ ! -f $data/demo/demo_text_document.idx ]]; then
  "$repo/tools/make-demo-data.sh" "$data/demo/demo.jsonl"
  "$bin/trident-preprocess" --input "$data/demo/demo.jsonl" --json-keys text \
    --output-prefix "$data/demo/demo" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$data/gpt2/gpt2-vocab.json" --merge-file "$data/gpt2/gpt2-merges.txt" \
    --append-eod --workers "$(nproc)"
fi

# One BLAS/OpenMP pool per process, sized to the machine.
rm -rf "$repo/checkpoints/demo-tiny"  # the demo starts fresh each time, never resumes
OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} "$bin/trident-train" --config "$repo/configs/gpt2-tiny.yaml" \
  --data-path "$data/demo/demo_text_document" \
  --vocab-file "$data/gpt2/gpt2-vocab.json" --merge-file "$data/gpt2/gpt2-merges.txt" \
  --split 949,50,1 --micro-batch-size 8 --global-batch-size 16 \
  --train-iters "$train_iters" --lr 2e-3 --min-lr 2e-4 --lr-warmup-iters "$warmup_iters" \
  --log-interval 10 --eval-interval 100 --eval-iters 10 --device "${DEVICE:-auto}" \
  --save "$repo/checkpoints/demo-tiny" "$@"

# Text from the trained model (a 2-layer toy: expect word salad in the corpus's style).
echo "quickstart.sh: trident-generate from checkpoints/demo-tiny"
"$bin/trident-generate" --load "$repo/checkpoints/demo-tiny" \
  --vocab-file "$data/gpt2/gpt2-vocab.json" --merge-file "$data/gpt2/gpt2-merges.txt" \
  --prompt "The" --top-k 40 --out-seq-length 40 --seed 1 --device "${DEVICE:-auto}"

# The same corpus through the launcher: 4 ranks, tp2 x pp2, the tiny model's shape.
if ! command -v mpirun >/dev/null; then
  echo "quickstart.sh: no mpirun: skipping the 4-rank run (tools/install-deps.sh installs Open MPI)"
  exit 0
fi
if [[ $EUID -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
gpus=0
if command -v nvidia-smi >/dev/null; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
mpi_device=${MPI_DEVICE:-auto}
((gpus >= 4)) || mpi_device=${MPI_DEVICE:-cpu}
echo "quickstart.sh: mpirun -np 4 launch/run-one-node.sh (tp2 x pp2, --device $mpi_device)"
rm -rf "$repo/checkpoints/demo-tp2-pp2"  # the demo starts fresh each time, never resumes
env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS \
  MODEL_NAME=demo-tp2-pp2 N_GPUS=4 TP_SIZE=2 PP_SIZE=2 \
  NLAYERS=2 NHIDDEN=64 NHEADS=4 SEQ_LEN=64 MICRO_BATCH_SIZE=4 GLOBAL_BATCH_SIZE=16 \
  TRAIN_ITERS="${MPI_TRAIN_ITERS:-50}" LR=2e-3 MIN_LR=2e-4 LOG_INTERVAL=10 EVAL_ITERS=10 \
  SAVE_INTERVAL=50 DATA_PATH="$data/demo/demo_text_document" \
  VOCAB_FILE="$data/gpt2/gpt2-vocab.json" MERGE_FILE="$data/gpt2/gpt2-merges.txt" \
  CHECKPOINT_PATH="$repo/checkpoints/demo-tp2-pp2" TENSORBOARD_PATH="$repo/out/tensorboard/demo-tp2-pp2" \
  DEVICE="$mpi_device" BUILD_DIR="$BUILD_DIR" \
  mpirun --oversubscribe -np 4 "$repo/launch/run-one-node.sh"
