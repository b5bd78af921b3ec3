#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest.
# Works on a clean Debian machine as root; safe to run again.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
"$repo/tools/install-deps.sh" --tests
"$repo/tools/get-gpt2-vocab.sh" "$repo/data/gpt2" >/dev/null
export BUILD_DIR=${BUILD_DIR:-$repo/build}
"$repo/tools/build.sh"
# Tests run several ranks on two cores: each test sets its ranks' OMP_NUM_THREADS, which
# OpenBLAS's OpenMP build follows; the pin below holds a fallback pthreads OpenBLAS to one.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# Two tests run at once on two cores: OpenMP threads that spin at their barriers (libgomp's
# default) then wait for a thread the other test holds the core from, every parallel region
# (measured: a 0.4 s test took 9 s beside its twin, 100 s in CI; passive: 1 s). Alone, a
# sleeping barrier costs a test ~1%.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 600 -j "${CTEST_JOBS:-2}" "$@"
