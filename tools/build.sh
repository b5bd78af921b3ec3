#!/usr/bin/env bash
# Configures and builds trident (Release) into ${BUILD_DIR:-<repo>/build}. Extra arguments go to
# CMake's configure step (e.g. -DTRIDENT_CUDA=OFF). The CUDA backend is built when nvcc
# exists (/usr/local/cuda/bin/nvcc), for sm_80 and sm_90a.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
jobs=${JOBS:-$(nproc)}
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$jobs"
