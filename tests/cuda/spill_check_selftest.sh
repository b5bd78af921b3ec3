#!/usr/bin/env bash
# The register-spill check itself (no GPU needed): tools/nvcc-ptxas-report.sh, the build's
# CUDA compiler launcher, keeps ptxas's report of a compile, and tools/check-cuda-spills.sh
# --reports reads it:
# - a kernel made to spill (96 live floats under a 32-register bound) fails the check
#   (exit 1) and is the one flagged, a file of clean kernels passes (exit 0);
# - one report of two architectures (sm_80 and sm_90a in one compile, as the build does)
#   gives each its rows, and a spill in a __noinline__ function called by a clean kernel is
#   flagged for both;
# - a file without a report, or a report without the asked architecture, is an error
#   (exit 2), never a pass;
# - a compile that fails keeps its exit status and leaves no report, and the compiler's
#   own messages still reach the build's output.
# Usage: spill_check_selftest.sh NVCC REPO
set -euo pipefail
nvcc=$1 repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
launch="$repo/tools/nvcc-ptxas-report.sh"
check="$repo/tools/check-cuda-spills.sh"
fail() { echo "FAIL: $*"; exit 1; }

cat > "$tmp/spills.cu" <<'EOF'
__global__ void __launch_bounds__(1024, 2) must_spill(float* out, const float* in) {
  float v[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) v[i] = in[threadIdx.x + i * 1024];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 96; ++i) s += v[i];
#pragma unroll
  for (int i = 0; i < 96; ++i) out[threadIdx.x + i * 1024] = v[i] * s;
}
__global__ void stays_clean(float* out, const float* in) { out[threadIdx.x] = 2.f * in[threadIdx.x]; }
EOF
cat > "$tmp/helper.cu" <<'EOF'
__device__ __noinline__ void spills_inside(float* out, const float* in) {
  float v[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) v[i] = in[threadIdx.x + i * 1024];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 96; ++i) s += v[i];
#pragma unroll
  for (int i = 0; i < 96; ++i) out[threadIdx.x + i * 1024] = v[i] * s;
}
__global__ void __launch_bounds__(1024, 2) calls_helper(float* out, const float* in) { spills_inside(out, in); }
EOF
cat > "$tmp/clean.cu" <<'EOF'
__global__ void doubles(float* out, const float* in) { out[threadIdx.x] = 2.f * in[threadIdx.x]; }
EOF
printf '__global__ void broken( { }\n' > "$tmp/broken.cu"

for f in spills clean; do
  "$launch" "$tmp/reports" "$nvcc" -arch=sm_80 -c "$tmp/$f.cu" -o "$tmp/$f.cu.o" ||
    fail "launcher: compile of $f.cu failed"
  [[ -s "$tmp/reports/$f.cu.o.ptxas" && -s "$tmp/$f.cu.o" ]] || fail "launcher: no report or object for $f.cu"
done

rc=0
"$check" --reports "$tmp/reports" --arch 80 "$tmp/spills.cu" > "$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"
[[ $rc -eq 1 ]] || fail "a spilling kernel gave exit $rc, not 1"
grep -q 'must_spill .*<-- SPILLS' "$tmp/out" || fail "must_spill not flagged"
grep -q 'stays_clean ' "$tmp/out" || fail "stays_clean is not listed"
grep 'stays_clean' "$tmp/out" | grep -q SPILLS && fail "stays_clean flagged"
"$check" --reports "$tmp/reports" --arch 80 "$tmp/clean.cu" > "$tmp/out" 2>&1 || fail "a clean file failed the check"
grep -q 'doubles' "$tmp/out" || fail "the clean kernel is not listed"

"$launch" "$tmp/reports" "$nvcc" -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
  -c "$tmp/helper.cu" -o "$tmp/helper.cu.o" || fail "launcher: compile of helper.cu failed"
rc=0
"$check" --reports "$tmp/reports" --arch "80;90a" "$tmp/helper.cu" > "$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"
[[ $rc -eq 1 ]] || fail "a spilling __noinline__ function gave exit $rc, not 1"
for a in sm_80 sm_90a; do
  grep -q "^$a .*spills_inside .*<-- SPILLS" "$tmp/out" || fail "spills_inside not flagged for $a"
  grep "^$a .*calls_helper " "$tmp/out" | grep -qv SPILLS || fail "calls_helper not listed clean for $a"
done

rc=0
"$check" --reports "$tmp/reports" --arch 80 "$tmp/broken.cu" > "$tmp/out" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q 'no ptxas report' "$tmp/out" || fail "a file without a report gave exit $rc"
rc=0
"$check" --reports "$tmp/reports" --arch 90a "$tmp/clean.cu" > "$tmp/out" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q 'no kernels for sm_90a' "$tmp/out" || fail "a missing architecture gave exit $rc"

rc=0
"$launch" "$tmp/reports" "$nvcc" -arch=sm_80 -c "$tmp/broken.cu" -o "$tmp/broken.cu.o" 2> "$tmp/err" || rc=$?
[[ $rc -ne 0 ]] || fail "a broken compile passed the launcher"
[[ ! -e "$tmp/reports/broken.cu.o.ptxas" ]] || fail "a broken compile left a report"
grep -q 'error' "$tmp/err" || fail "the compiler's error did not reach stderr"
echo "spill check self-test: OK"
