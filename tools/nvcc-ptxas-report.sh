#!/usr/bin/env bash
# nvcc-ptxas-report.sh REPORT_DIR COMPILER ARGS...: the CUDA compiler launcher of
# trident_cuda (kernels/cuda/CMakeLists.txt). Runs the compile it is given with ptxas's
# resource report added (-Xptxas -v), keeps the report as REPORT_DIR/<object>.ptxas and
# passes the compiler's other output lines through, so the build shows what it showed
# without it. trident_cuda's objects depend on this script, so that a changed launcher
# recompiles them (Make does not rerun a compile whose command alone changed).
# tools/check-cuda-spills.sh --reports REPORT_DIR reads the reports (the ctest test
# cuda_register_spills): the build's own compile of every kernel is checked, not a second
# one.
set -uo pipefail
dir=$1
shift
obj=""
prev=""
for a in "$@"; do
  [[ "$prev" == "-o" ]] && obj=$a
  prev=$a
done
[[ -n "$obj" ]] || exec "$@"  # not a compile to an object file: nothing to report
mkdir -p "$dir"
report="$dir/$(basename "$obj").ptxas"
rm -f "$report"
"$@" -Xptxas -v > "$report.tmp" 2>&1
rc=$?
# Only what -v adds is left out: ptxas's other lines (e.g. its "(C7515) Potential
# Performance Loss: wgmma ... serialized" advisories) still reach the build's output.
grep -v -E '^ptxas info +: +([0-9]+ bytes gmem|Compiling entry function|Function properties for|Used [0-9]+ registers|Compile time)|^ +[0-9]+ bytes stack frame' \
  "$report.tmp" >&2
if [[ $rc -eq 0 ]]; then
  mv "$report.tmp" "$report"
else
  rm -f "$report.tmp"
fi
exit $rc
