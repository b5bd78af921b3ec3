#!/usr/bin/env bash
# `sh script.sh` (dash on Debian, bash in POSIX mode elsewhere) runs again under plain bash.
if [ -z "${BASH_VERSION:-}" ] || shopt -qo posix; then exec env -u POSIXLY_CORRECT bash "$0" "$@"; fi
# The 16B GPT-2 over many nodes in fp16 with dynamic loss scaling: launch/mpi-run-16B.sh with
# PRECISION=fp16 (trident-train --fp16 and no fixed --loss-scale; the scale starts at
# INITIAL_LOSS_SCALE [65536], halves on overflow after HYSTERESIS [2] bad steps, never below
# MIN_LOSS_SCALE [1], and doubles after LOSS_SCALE_WINDOW [1000] clean steps).
#   HOSTFILE=hosts DATA_PATH=/data/my-gpt2_text_document launch/mpi-16B-fp16.sh [trident-train args]
# Reads every variable of mpi-run-16B.sh, single-16B.sh and run-one-node.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PRECISION=fp16
export INITIAL_LOSS_SCALE=${INITIAL_LOSS_SCALE:-65536}
export MIN_LOSS_SCALE=${MIN_LOSS_SCALE:-1}
export LOSS_SCALE_WINDOW=${LOSS_SCALE_WINDOW:-1000}
export HYSTERESIS=${HYSTERESIS:-2}
exec "$here/mpi-run-16B.sh" "$@"
