#!/usr/bin/env bash
# `sh script.sh` (dash on Debian, bash in POSIX mode elsewhere) runs again under plain bash.
if [ -z "${BASH_VERSION:-}" ] || shopt -qo posix; then exec env -u POSIXLY_CORRECT bash "$0" "$@"; fi
# Per-rank settings of the 16B GPT-2 (configs/gpt2-16b.yaml: 40 layers, hidden 5760, 48 heads
# of 120, sequence 2048, ~16.2B parameters), split tp4 x pp8 as in the seed (32 nodes of
# 4 GPUs with 16 GB: tp4 x pp8 x dp4). It sets the seed's variables and execs
# launch/run-one-node.sh, so every variable of that script can be overridden from the
# environment. mpi-run-16B.sh runs it on every rank of a multi-node job; on one node:
#   N_GPUS=32 mpirun -np 32 --bind-to none launch/single-16B.sh            # tp4 x pp8 x dp1
#   N_GPUS=8 PP_SIZE=2 mpirun -np 8 --bind-to none launch/single-16B.sh    # 8 big GPUs
# Variables (default in brackets): N_GPUS [32], TP_SIZE [4], PP_SIZE [8], MICRO_BATCH_SIZE [1],
# GLOBAL_BATCH_SIZE [512], TRAIN_ITERS [100000], LR [1e-4], MIN_LR [1e-5], LR_WARMUP_ITERS [a tenth
# of the decay, at most LR_WARMUP_ITERS_MAX [2000]], LR_DECAY_STYLE [cosine], INIT_METHOD_STD [0.008],
# ZERO_STAGE [1], PRECISION [fp32; fp16 with dynamic loss scaling: launch/mpi-16B-fp16.sh],
# SAVE_INTERVAL [500], EVAL_INTERVAL [1000], EVAL_ITERS [10], LOG_INTERVAL [1], DEVICE [cuda],
# WEIGHT_DECAY [0.1], CLIP_GRAD [1.0], ADAM_BETA2 [0.95], RECOMPUTE [full], MODEL_NAME [gpt2-16b],
# DATA_PATH, CHECKPOINT_PATH, TENSORBOARD_PATH, VOCAB_FILE, MERGE_FILE, BUILD_DIR, TRIDENT_DRY_RUN,
# NON_PERSISTENT_SAVE_INTERVAL and LOCAL_CKPT_DIR (run-one-node.sh: e.g. every 50 iterations into
# each node's NVMe, between the SAVE_INTERVAL saves); extra arguments go to trident-train.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The model: keep in step with configs/gpt2-16b.yaml.
export MODEL_NAME=${MODEL_NAME:-gpt2-16b}
export NLAYERS=${NLAYERS:-40}
export NHIDDEN=${NHIDDEN:-5760}
export NHEADS=${NHEADS:-48}
export SEQ_LEN=${SEQ_LEN:-2048}
export INIT_METHOD_STD=${INIT_METHOD_STD:-0.008}  # ~sqrt(2 / (5 * hidden)) for a 5760-wide model

# The split and the batch. The seed gives tp4/pp8 and no batch sizes; with micro batch 1 and
# global batch 512, each of dp4's pipelines runs 128 micro-batches per step (bubble ~5%).
export N_GPUS=${N_GPUS:-32}
export TP_SIZE=${TP_SIZE:-4}
export PP_SIZE=${PP_SIZE:-8}
export ZERO_STAGE=${ZERO_STAGE:-1}
export MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}
export GLOBAL_BATCH_SIZE=${GLOBAL_BATCH_SIZE:-512}

# The schedule (GPT-3 13B-like: peak 1e-4, cosine to a tenth, 2000 warm-up iterations; a
# shorter run warms up for a tenth of its decay, as run-one-node.sh's default).
export TRAIN_ITERS=${TRAIN_ITERS:-100000}
export LR=${LR:-1e-4}
export MIN_LR=${MIN_LR:-1e-5}
export LR_DECAY_STYLE=${LR_DECAY_STYLE:-cosine}
export LR_WARMUP_ITERS_MAX=${LR_WARMUP_ITERS_MAX:-2000}
export WEIGHT_DECAY=${WEIGHT_DECAY:-0.1}
export CLIP_GRAD=${CLIP_GRAD:-1.0}
export ADAM_BETA2=${ADAM_BETA2:-0.95}
export PRECISION=${PRECISION:-fp32}
# The seed's cards have 16 GB. A layer's stored activations at tp4 are about 7 x hidden
# values a token (LayerNorm outputs and residuals whole; QKV, attention and MLP split four
# ways): 7 * 5760 * 2048 tokens * 4 bytes = 330 MB a layer in fp32, x 5 layers x 8
# micro-batches in flight on the first stage = 13 GB, beside ~5 GB of weights, gradients
# and ZeRO-1 Adam state. Recomputing every layer keeps only its output: 47 MB a layer.
export RECOMPUTE=${RECOMPUTE:-full}
export SAVE_INTERVAL=${SAVE_INTERVAL:-500}
export EVAL_INTERVAL=${EVAL_INTERVAL:-1000}
export EVAL_ITERS=${EVAL_ITERS:-10}
export LOG_INTERVAL=${LOG_INTERVAL:-1}
export DEVICE=${DEVICE:-cuda}

exec "$here/run-one-node.sh" "$@"
