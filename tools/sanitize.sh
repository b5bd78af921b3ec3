#!/usr/bin/env bash
# Builds the CPU backend under AddressSanitizer and UndefinedBehaviorSanitizer into
# ${BUILD_DIR:-<repo>/build-asan} (RelWithDebInfo, CUDA off) and runs the tests there: reads
# and writes out of bounds or after free, undefined behaviour (a null pointer given to memcpy,
# a signed overflow, a misaligned load) and, in the tests that start no MPI job, leaks.
# Arguments go to both ctest runs (e.g. -R Checkpoint). Exit status: 0 when every test passed.
#
# Not part of tests/run.sh: on 2 cores the build takes about 35 minutes and the tests about 55
# (2026-12-07, 839 tests). Needs what tools/install-deps.sh --tests installs (GCC's runtimes).
#
# Under the sanitizers:
#  - LeakSanitizer crashes in an Open MPI process ("Tracer caught signal 11"), and Open MPI
#    keeps memory to the end: leaks are looked for in the tests that start no job, not in
#    those labelled e2e or mpi;
#  - allocator_may_return_null: an allocation too large fails as it does without ASan (the
#    out-of-memory tests), not as ASan's abort;
#  - left out: e2e_launch_scripts (its `ulimit -v` leaves no room for ASan's shadow memory)
#    and e2e_train_bad_flags (its 48 TiB allocation adds ASan's warning to the one error line
#    the test asks for).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$repo/build-asan}
njobs=${JOBS:-$(nproc)}
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S "$repo" -B "$build" -DTRIDENT_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build" -j "$njobs"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
job_labels='e2e|mpi'  # the tests that start trident's programs or mpirun
left_out='^(e2e_launch_scripts|e2e_train_bad_flags)$'
cd "$build"
status=0
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
  ctest -j "$njobs" --timeout 1800 -LE "$job_labels" "$@" || status=1
ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
  ctest -j "$njobs" --timeout 1800 -L "$job_labels" -E "$left_out" "$@" || status=1
exit $status
