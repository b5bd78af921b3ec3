#!/usr/bin/env bash
# trident-bench --kernels-quick: exits 0 everywhere. Without a GPU (or without the CUDA
# backend) it prints one "no GPU" line and measures nothing; with one it prints the kernel
# table ending with the peaks it measured.
#   tests/e2e/bench_kernels.sh <trident-bench>
set -uo pipefail
bench=$1
out=$("$bench" --kernels-quick 2>&1)
rc=$?
echo "$out"
if [[ $rc -ne 0 ]]; then echo "FAIL: trident-bench --kernels-quick exited $rc"; exit 1; fi
if grep -q "no GPU" <<<"$out"; then
  [[ $(wc -l <<<"$out") -eq 1 ]] || { echo "FAIL: expected one line without a GPU"; exit 1; }
  echo "ok: no GPU, skipped cleanly"
  exit 0
fi
grep -q "^peaks measured in this run" <<<"$out" || { echo "FAIL: no peaks line"; exit 1; }
echo "ok: kernel table on the GPU"
