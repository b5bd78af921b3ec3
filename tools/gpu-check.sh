#!/usr/bin/env bash
# gpu-check.sh: the one script to run on a GPU machine. It gets a build (a carried bundle,
# an existing build directory, or a fresh -j16 build), runs the CUDA tests, then
# trident-bench on the GPU, and ends with ONE summary: per kernel the achieved GB/s or
# TFLOP/s against the ceilings measured in the same run (a device copy, an 8192^3 bf16
# cuBLASLt GEMM), causal attention (head dim 64) forward+backward TFLOP/s, and tokens/s and
# MFU (Megatron's model FLOPs, throughput.h's dense peak) for gpt2-124m, -345m and -1.3b
# training on one GPU in bf16 and fp16 (and once more in bf16 with the attention tiles and
# opt-in kernels the kernel table found faster, "model+tuned"; and gpt2-1.3b with 8
# micro-batches a step, "x8", as configs accumulate), and the per-op time shares of profiled
# gpt2-124m and gpt2-1.3b bf16 steps. Meant to finish in well under 8 minutes. A kernel table
# that dies in a row (a CUDA error aborts trident-bench) is rerun past that row, so that one
# bad kernel costs its row and a failed step, not the rows after it.
#
# The GPU machine (the device tool; /work/.library/device/README.md) gets the working tree
# plus up to 8 ignored paths named in `carry`, 64 MiB in all, and cannot install packages,
# so a build is best made HERE and carried as a compressed bundle:
#
#   1. Here (no GPU needed; -j2 on a shared machine):
#        tools/gpu-check.sh --make-bundle
#      builds the bundle's targets in build-gpu/ (sm_90a only, Release), or in the CUDA
#      build that TRIDENT_BUILD_DIR names (a no-op when it is up to date: no stale
#      executables travel), stamps the bundle with `git describe --always --dirty` of the
#      build's source tree, and writes build-gpu-bundle/trident-gpu.tar.xz: the executables,
#      the ctest files and every shared library they need except glibc, the driver and
#      NCCL (too large; the machine's CUDA toolkit and PyTorch carry it, and cuBLASLt,
#      which trident loads on its first GEMM).
#   2. Through the device tool (one call; the script itself stays inside ~8 minutes):
#        run(command="bash tools/gpu-check.sh", carry=["build-gpu-bundle", "data/gpt2"], timeout_s=600)
#      It unpacks the bundle into build-gpu/, rewrites the ctest files' paths to this
#      checkout, and finds libnccl.so.2 and libcublasLt.so.13 on the machine (system, CUDA
#      toolkit or the PyTorch wheels). Logs are copied to $OUT (gpu-check.log and one per
#      step) when $OUT is set.
#
# Without a bundle it builds on the machine into build-gpu/ (cmake, -j16, sm_90a), after
# checking the Debian packages the CMake needs: it names the missing ones and builds what
# it can (no tests without GoogleTest, no NCCL without Open MPI); without the libraries
# every build needs (OpenBLAS, yaml-cpp, cxxopts, nlohmann-json, xxhash, utf8proc, lzma,
# simdjson, protobuf) nothing builds and the summary says so.
#
# Environment: TRIDENT_BUILD_DIR (use this build, skip bundle and build), GPU_CHECK_QUICK=1
# (small kernel inputs, two training configs: a smoke run), GPU_CHECK_SKIP_TESTS=1,
# GPU_CHECK_BUDGET_S (400: no run starts after this many seconds but the first training row,
# the largest model's; the kernel table's 180 s limit shrinks to end 10 s before it, to no
# less than 60 s), GPU_CHECK_TESTS_S (240: the CUDA tests' time limit), GPU_CHECK_CONFIGS
# ("gpt2-124m:16 ..." model:micro-batch pairs to train, or "none"), GPU_CHECK_DTYPES
# ("bf16 fp16"), GPU_CHECK_NCU=0 (no Nsight Compute profile of the attention kernels),
# GPU_CHECK_GENERATE=0 (no generation runs), GPU_CHECK_DEADLINE_S (540: every step's time
# limit is cut to end 15 s before it, so that the summary is printed inside the device tool's
# 600 s), GPU_CHECK_ROW_S (60: a kernel-table row that runs longer, a hung kernel, is killed and
# the table rerun past it; both are limits, 0 is none left, not "off"). A TERM or INT still prints the summary of what ran.
# Exit status: 0 when every step ran and every test passed, 1 otherwise (the summary
# says which step failed), 3 at once on a machine where nvidia-smi lists no GPU.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bundle_dir=$repo/build-gpu-bundle
bundle=$bundle_dir/trident-gpu.tar.xz
t_start=$(date +%s)
elapsed() { echo $(($(date +%s) - t_start)); }
say() { echo "[gpu-check $(elapsed)s] $*"; }

# ---- here: make the bundle -------------------------------------------------------------
if [[ ${1:-} == --make-bundle ]]; then
  set -e
  build=${TRIDENT_BUILD_DIR:-$repo/build-gpu}
  if [[ -z ${TRIDENT_BUILD_DIR:-} ]]; then
    cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a
  fi
  # Always: a given build may be older than its sources, and would be packed as it is.
  nice -n 10 cmake --build "$build" -j"${JOBS:-2}" --target trident-bench trident-train trident-generate \
    cuda_backend_tests nccl_comm_tests
  # The tree the build compiles (a given build may belong to another checkout).
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  src=${src:-$repo}
  # trident-train: tests/e2e/cuda_vs_cpu.sh (ctest -L cuda) runs it on the GPU and on the CPU;
  # trident-generate: the decoding throughput below.
  exes=(tools/trident-bench tools/trident-train tools/trident-generate tests/cuda/cuda_backend_tests
    tests/cuda/nccl_comm_tests)
  for e in "${exes[@]}"; do [[ -x $build/$e ]] || { echo "gpu-check: $build/$e is missing" >&2; exit 1; }; done
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/build-gpu/lib"
  for e in "${exes[@]}"; do
    mkdir -p "$stage/build-gpu/$(dirname "$e")"
    cp "$build/$e" "$stage/build-gpu/$e"
    strip --strip-unneeded "$stage/build-gpu/$e" 2>/dev/null || true
  done
  # ctest's files (paths rewritten on the machine), gtest's discovered test lists and the
  # label files trident_add_gtest writes included.
  # Copied after the executables and touched: gtest's include files re-run test discovery
  # (with this machine's CMake modules) when an executable is newer than its test list.
  (cd "$build" && find . -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' -o -name '*_labels.cmake') |
    while read -r f; do mkdir -p "$stage/build-gpu/$(dirname "$f")"; cp "$build/$f" "$stage/build-gpu/$f"; done
  find "$stage/build-gpu" -name '*.cmake' -exec touch {} +
  # Shared libraries, except glibc's, the driver's, and the CUDA libraries the machine has.
  skip='^(libc|libm|libmvec|libdl|libpthread|librt|ld-linux-x86-64|libcuda|libnvidia|libcublasLt|libcublas|libnccl|linux-vdso)\.'
  for e in "${exes[@]}"; do ldd "$build/$e"; done | awk '/=> \//{print $1, $3}' | sort -u |
    while read -r name path; do
      [[ $name =~ $skip ]] && continue
      cp -L "$path" "$stage/build-gpu/lib/$name"
    done
  echo "$build" >"$stage/build-gpu/.bundle-build-dir"
  echo "$src" >"$stage/build-gpu/.bundle-source-dir"
  # -dirty: the executables hold uncommitted changes of that tree.
  git -C "$src" describe --always --dirty >"$stage/build-gpu/.bundle-commit" 2>/dev/null || true
  mkdir -p "$bundle_dir"
  # The executables each link the CUDA kernels (~20 MB of device code apiece): a dictionary
  # that spans them all stores those once (53 MB -> 17 MB on 2026-11-30; 64 MiB may travel).
  tar -C "$stage" -cf - build-gpu | xz -6 --lzma2=preset=6,dict=256MiB >"$bundle.tmp"
  mv "$bundle.tmp" "$bundle"
  echo "gpu-check: wrote $bundle ($(du -h "$bundle" | cut -f1)) from $src at $(cat "$stage/build-gpu/.bundle-commit"); libraries: $(ls "$stage/build-gpu/lib" | tr '\n' ' ')"
  echo "run it with the device tool: run(command=\"bash tools/gpu-check.sh\", carry=[\"build-gpu-bundle\", \"data/gpt2\"], timeout_s=600)"
  exit 0
fi

# ---- on the GPU machine -----------------------------------------------------------------
# Without a GPU nothing here can pass: say so before building or leaving logs (exit 3).
# (GPU_CHECK_WITHOUT_GPU=1: tests/e2e/gpu_check.sh runs the logic with a stand-in bench.)
if [[ -z ${GPU_CHECK_WITHOUT_GPU:-} ]] && ! compgen -G "/dev/nvidia[0-9]*" >/dev/null &&
   [[ -z $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) ]]; then
  echo "gpu-check: no GPU visible (no /dev/nvidia*, nvidia-smi lists none): nothing to check on this machine" >&2
  exit 3
fi
logdir=${OUT:-$repo/build-gpu-logs}  # build*/ is ignored: logs never travel
mkdir -p "$logdir"
main_log=$logdir/gpu-check.log
# tee ignores TERM and INT: when the run is stopped, the summary still reaches the log.
exec > >(trap '' TERM INT; exec tee "$main_log") 2>&1
tee_pid=$!
exec {to_tee}>&1  # on_stop prints there: a signal may come while a step's output goes to its log
status=0
failed_steps=()
fail() { status=1; failed_steps+=("$1"); say "FAILED: $1"; }
# The whole run ends by GPU_CHECK_DEADLINE_S, less 15 s for the summary: limit <seconds> is
# that many, or the time left if less (0: none). run_limited <seconds> <command...> runs the
# command under timeout with that limit (and a KILL 5 s after its TERM); with under 5 s left it
# runs nothing (status 124).
deadline_s=${GPU_CHECK_DEADLINE_S:-540}
limit() {
  local left=$((deadline_s - 15 - $(elapsed)))
  ((left < 0)) && left=0
  echo $(($1 < left ? $1 : left))
}
# The command runs in the background and is waited for: a TERM to this script is handled at
# once (wait returns), not when the command ends; on_stop stops the command (in_flight).
in_flight=""
run_limited() {
  local s rc
  s=$(limit "$1")
  shift
  ((s >= 5)) || return 124
  # -k: a command that ignores the TERM is killed 5 s later. {to_tee}>&-: children do not hold
  # tee's pipe, or one left running would keep tee, and so this script, from ending.
  timeout -k 5 "$s" "$@" {to_tee}>&- &
  in_flight=$!
  wait "$in_flight"
  rc=$?
  in_flight=""
  return $rc
}
# Per-step logs are written here and folded into training.log as each step ends: at most 8
# files come back from $OUT, and a run stopped early must leave its logs there too.
step_logs=$(mktemp -d)
keep_log() {  # keep_log <log>: appends a step's log to training.log under its name
  { echo "==== $(basename "$1") ===="; cat "$1"; } >>"$logdir/training.log" 2>/dev/null
  rm -f "$1"
}

# ---- issue 7's targets, read off the tables ----------------------------------------------------
# target_lines <kernel table> <training row...>: one line per target (kernels/cuda/
# PERFORMANCE.md): the memory-bound kernels at >= 80% of the copy rate, causal attention
# fwd+bwd at head dim 64 near FlashAttention-2's ~280 TFLOP/s, gpt2-1.3b bf16 at >= 50% MFU.
# at_least <value> <threshold>: "yes" when value >= threshold, else "no".
at_least() { awk -v v="$1" -v t="$2" 'BEGIN { print (v >= t ? "yes" : "no") }'; }
target_lines() {
  local table=$1 name pct tf row mfu long times plain drop bwd atomic fwd two_fwd two_dq two_dkdv two_both two_atomic
  shift
  local bw=() walking saved ahead fwd_drawn fwd_saved fwd_ahead
  # kernel_row <name> <field>: a field of the kernel row with that name ($NF: "of peak", $(NF-3):
  # ms). A row: the name in 28 columns, the shape, ms, the rate and its unit, "of peak" last;
  # or the name, the shape and "FAILED: <why>" (left out).
  kernel_row() {
    awk -v n="$1" "!/ FAILED: / { k = substr(\$0, 1, 28); sub(/ +\$/, \"\", k); if (k == n) { print $2; exit } }" \
      <<<"$table"
  }
  for name in "layernorm fwd" "layernorm bwd" "residual+layernorm fwd" "dropout+residual+LN fwd" "gelu fwd" \
    "gelu bwd" "erf GELU fwd" "erf GELU bwd" "adamw" "adamw multi-tensor" "cross-entropy (2 passes)"; do
    pct=$(kernel_row "$name" '$NF')
    [[ -n $pct ]] || continue
    bw+=("$name $pct ($(at_least "${pct%\%}" 80))")
  done
  ((${#bw[@]} > 0)) && echo "memory-bound kernels >= 80% of the copy rate: $(IFS=';'; echo "${bw[*]}" | sed 's/;/; /g')"
  # Beside them, not a target of issue 7: one decoding step's attention over the KV cache
  # (kernels/cuda/PERFORMANCE.md, 2026-12-04).
  dec=()
  for name in "attn decode, 124m x1" "attn decode, 124m x8" "attn decode, 1.3b x1" "attn decode, 124m x1, scalar" \
    "attn decode, 124m x8, scalar"; do
    pct=$(kernel_row "$name" '$NF')
    [[ -n $pct ]] && dec+=("${name#attn decode, } $pct")
  done
  ((${#dec[@]} > 0)) && echo "  (beside them) decode attention step, of the copy rate: $(IFS=';'; echo "${dec[*]}" | sed 's/;/; /g')"
  # Beside them, not targets: the kernels that opt-in switches give, whose rows say whether
  # the defaults still hold (kernels/cuda/PERFORMANCE.md).
  walking=$(kernel_row "layernorm fwd, walking warps" '$NF')
  [[ -n $walking ]] &&
    echo "  (beside it) layernorm fwd with its next rows in registers (TRIDENT_LN_FWD_RING=0): $walking"
  # d64 <row name regex> <awk expression>: the expression on that row's head-dim-64 timing
  # (a row that timed: "ms  rate TF/s  share", not FAILED).
  # dim_row <head dim> <row name regex> <awk expression>: the same at any head dim.
  dim_row() { awk "/^$2/ && / D$1 / && !/ FAILED: / { print $3; exit }" <<<"$table"; }
  d64() { dim_row 64 "$@"; }
  tf=$(d64 'attention fwd\+bwd \(causal\)' '$(NF-2)')
  if [[ -n $tf ]]; then
    echo "causal attention fwd+bwd, head dim 64, T 1024: $tf TFLOP/s (target ~280: $(at_least "$tf" 280))"
  fi
  # Beside the target, not targets: the same tokens at 4x and 16x the sequence
  # (FlashAttention-2's published rates grow with it; T 16384 is their longest point), and
  # what training's attention dropout costs.
  for times in 4 16; do
    long=$(d64 "attention fwd\\+bwd, ${times}x T" '$(NF-2) " " substr($0, match($0, / T[0-9]+ /) + 2, RLENGTH - 3)')
    [[ -n $long ]] && echo "  (beside it) head dim 64, T ${long#* }: ${long% *} TFLOP/s"
  done
  # The wgmma backward with dQ by float atomics (opt-in until timed: PERFORMANCE.md, 2026-12-01).
  bwd=$(d64 'attention bwd \(causal\)' '$(NF-3)')
  atomic=$(d64 'attn bwd, wgmma, atomic dQ +B[0-9]' '$(NF-3)')  # not the two-warpgroup row
  if [[ -n $bwd && -n $atomic ]]; then
    echo "  (beside it) head dim 64 backward with dQ added by the dK/dV kernel (TRIDENT_ATTN_BWD_WGMMA=1" \
      "TRIDENT_ATTN_BWD_ATOMIC=1): $atomic ms against the default's $bwd ms"
  fi
  # Two warpgroups a block, 128 rows sharing each streamed tile (opt-ins until timed:
  # PERFORMANCE.md, 2026-12-01): the forward, and the backward's dQ kernel, dK/dV kernel,
  # both, and the dK/dV kernel with atomic dQ. A row that did not time reads "-".
  fwd=$(d64 'attention fwd \(causal\)' '$(NF-3)')
  two_fwd=$(d64 'attn fwd, wgmma, 2-wg' '$(NF-3)')
  two_dq=$(d64 'attn bwd, wgmma, 2-wg dQ' '$(NF-3)')
  two_dkdv=$(d64 'attn bwd, wgmma, 2-wg dK\/dV' '$(NF-3)')
  two_both=$(d64 'attn bwd, wgmma, 2-wg both' '$(NF-3)')
  two_atomic=$(d64 'attn bwd, wgmma atomic, 2-wg' '$(NF-3)')
  if [[ -n $fwd && -n $two_fwd ]]; then
    echo "  (beside it) head dim 64 forward with two warpgroups a block (TRIDENT_ATTN_FWD_WG=2): $two_fwd ms" \
      "against the default's $fwd ms"
  fi
  # The warp-specialized forward (TMA producer; the default where wgmma runs since
  # PERFORMANCE.md, 2026-12-04 fourth task) against the one-warpgroup wgmma kernel it
  # replaced (TRIDENT_ATTN_FWD_WGMMA=1), and its 128-key ring.
  one_wg=$(d64 'attn fwd, wgmma +B[0-9]' '$(NF-3)')
  ws_fwd128=$(d64 'attn fwd, warp-spec, 128 keys' '$(NF-3)')
  if [[ -n $fwd && -n $one_wg$ws_fwd128 ]]; then
    echo "  (beside it) head dim 64 forward: the one-warpgroup wgmma kernel (TRIDENT_ATTN_FWD_WS=0) ${one_wg:--} ms," \
      "the warp-specialized one with 128 keys a stage ${ws_fwd128:--} ms, against the default's $fwd ms"
  fi
  # The warp-specialized backward kernels (opt-ins until timed: PERFORMANCE.md, 2026-12-04
  # fourth and fifth tasks): dK/dV, dQ, both; the dK/dV kernel by pipelined 32-query halves,
  # alone and with the dQ kernel.
  ws_bwd=$(d64 'attn bwd, warp-spec dK\/dV +B[0-9]' '$(NF-3)')
  ws_dq=$(d64 'attn bwd, warp-spec dQ' '$(NF-3)')
  ws_both=$(d64 'attn bwd, warp-spec both +B[0-9]' '$(NF-3)')
  ws_bwd32=$(d64 'attn bwd, warp-spec 32q +B[0-9]' '$(NF-3)')
  ws_both32=$(d64 'attn bwd, warp-spec 32q both' '$(NF-3)')
  ws_bulk=$(d64 'attn bwd, warp-spec bulk dQ' '$(NF-3)')
  if [[ -n $bwd && -n $ws_bwd$ws_dq$ws_both$ws_bwd32$ws_both32$ws_bulk ]]; then
    echo "  (beside it) head dim 64 backward with the warp-specialized dK/dV kernel (TRIDENT_ATTN_BWD_WS=1) /" \
      "dQ kernel (TRIDENT_ATTN_DQ_WS=1) / both: ${ws_bwd:--} / ${ws_dq:--} / ${ws_both:--} ms; the dK/dV" \
      "kernel by 32-query halves (TRIDENT_ATTN_DKDV_BQ=32) alone / with the dQ kernel: ${ws_bwd32:--} /" \
      "${ws_both32:--} ms; with dQ by bulk adds (TRIDENT_ATTN_BWD_ATOMIC=1): ${ws_bulk:--} ms; against the" \
      "default's $bwd ms"
  fi
  # FlashAttention-3's dK/dV block (two consumer warpgroups, setmaxnreg; opt-in until timed:
  # PERFORMANCE.md, 2026-12-04 sixth task) with the warp-specialized dQ kernel, at D 64 and
  # 128, each against its head dim's default; at D 64 also computing dQ (bulk adds).
  fa3=$(d64 'attn bwd, 2-consumer ws' '$(NF-3)')
  fa3_bulk=$(d64 'attn bwd, 2-consumer bulk dQ' '$(NF-3)')
  bwd128=$(dim_row 128 'attention bwd \(causal\)' '$(NF-3)')
  fa3_128=$(dim_row 128 'attn bwd, 2-consumer ws' '$(NF-3)')
  if [[ -n $bwd && -n $fa3$fa3_bulk$fa3_128 ]]; then
    echo "  (beside it) backward with the two-consumer dK/dV kernel (TRIDENT_ATTN_BWD_WS=1 TRIDENT_ATTN_BWD_WG=2" \
      "TRIDENT_ATTN_DQ_WS=1): head dim 64 ${fa3:--} ms, with dQ by bulk adds instead (TRIDENT_ATTN_BWD_ATOMIC=1," \
      "no DQ_WS) ${fa3_bulk:--} ms, against the default's $bwd ms; head dim 128 ${fa3_128:--} ms against" \
      "${bwd128:--} ms"
  fi
  long_fwd=$(d64 'attention fwd, 16x T' '$(NF-2)')
  long_one=$(d64 'attn fwd, 1-wg wgmma, 16x T' '$(NF-2)')
  if [[ -n $long_fwd && -n $long_one ]]; then
    echo "  (beside it) head dim 64 forward at T 16384: $long_fwd TFLOP/s (the one-warpgroup wgmma kernel:" \
      "$long_one TFLOP/s)"
  fi
  if [[ -n $bwd && -n $two_dq$two_dkdv$two_both$two_atomic ]]; then
    echo "  (beside it) head dim 64 backward with two warpgroups a block (TRIDENT_ATTN_BWD_WGMMA=1 and" \
      "TRIDENT_ATTN_DQ_WG=2 / TRIDENT_ATTN_BWD_WG=2 / both / BWD_WG=2 with atomic dQ): ${two_dq:--} /" \
      "${two_dkdv:--} / ${two_both:--} / ${two_atomic:--} ms against the default's $bwd ms"
  fi
  plain=$(d64 'attention fwd\+bwd \(causal\)' '$(NF-3)')
  drop=$(d64 'attn fwd\+bwd, dropout 0\.1' '$(NF-3)')
  if [[ -n $plain && -n $drop ]]; then
    echo "  (beside it) head dim 64 with dropout 0.1: $drop ms, $(awk -v a="$drop" -v b="$plain" \
      'BEGIN { printf "%.2f", a / b }')x the $plain ms without (2.2x on 2026-11-30, before the 16-bit draws)"
  fi
  saved=$(d64 'attn fwd\+bwd, dropout, saved mask' '$(NF-3)')
  if [[ -n $drop && -n $saved ]]; then
    echo "  (beside it) ... with the mask saved for the backward (TRIDENT_ATTN_SAVE_MASK=1 in training): $saved ms," \
      "$(awk -v a="$saved" -v b="$drop" 'BEGIN { printf "%.2f", a / b }')x the drawn mask's (predicted ~0.8-0.9x)"
  fi
  ahead=$(d64 'attn fwd\+bwd, dropout, mask ahead' '$(NF-3)')
  if [[ -n $drop && -n $ahead && -n $plain ]]; then
    echo "  (beside it) ... with the saved mask drawn ahead by its own kernel (TRIDENT_ATTN_MASK_AHEAD=1): $ahead ms," \
      "$(awk -v a="$ahead" -v b="$drop" 'BEGIN { printf "%.2f", a / b }')x the drawn mask's, $(awk -v a="$ahead" \
      -v b="$plain" 'BEGIN { printf "%.2f", a / b }')x no dropout's (predicted ~0.75-0.8x and ~1.2-1.25x)"
  fi
  fwd_drawn=$(d64 'attn fwd, dropout 0\.1' '$(NF-3)')
  fwd_saved=$(d64 'attn fwd, dropout, saved mask' '$(NF-3)')
  fwd_ahead=$(d64 'attn fwd, dropout, mask ahead' '$(NF-3)')
  if [[ -n $fwd_drawn$fwd_saved$fwd_ahead ]]; then
    echo "  (beside it) ... the forward alone: drawn ${fwd_drawn:--} / drawn and saved ${fwd_saved:--} / drawn ahead" \
      "and read ${fwd_ahead:--} ms against ${fwd:--} ms without dropout"
  fi
  for row in "$@"; do
    [[ $row =~ ^gpt2-1\.3b\ +bf16\  ]] || continue  # the default settings' row, not "+tuned" or "x8"
    mfu=$(awk '{ print $NF }' <<<"$row")
    [[ $mfu == *% ]] || continue
    echo "gpt2-1.3b bf16 MFU, one GPU, one micro-batch a step: $mfu (target 50%: $(at_least "${mfu%\%}" 50))"
  done
}

# ---- the summary ----------------------------------------------------------------------------
# print_summary: what ran, read off the steps' variables (the steps not reached keep their "not
# run"); finish: the summary, then the exit. A TERM or INT (the device tool's limit, a person)
# ends the step in flight and finishes with what ran.
print_summary() {
  echo
  echo "==================== trident gpu-check summary ($(elapsed)s) ===================="
  echo "GPU:    ${gpu_line:-none}"
  echo "build:  $build_how"
  echo "tests:  $tests_line"
  echo
  echo "kernels (achieved against this run's measured peaks):"
  echo "$kernel_table"
  for r in ${variant_notes[@]+"${variant_notes[@]}"}; do echo "$r"; done
  echo
  echo "training, one GPU, seq 1024, synthetic tokens, $steps timed steps (MFU: Megatron model FLOPs / dense peak):"
  printf '%-18s %-5s %4s %10s %12s %10s %7s\n' model dtype mb "step ms" "tokens/s" "TFLOP/s" MFU
  for r in ${train_rows[@]+"${train_rows[@]}"}; do echo "$r"; done
  for r in ${tuned_lines[@]+"${tuned_lines[@]}"}; do echo "  $r"; done
  echo
  echo "ncu (attention kernels): $ncu_line"
  echo "generation (KV cache, one process): $gen_line"
  echo "generation bench (gpt2-124m bf16, 8 prompts of 512 tokens, 128 new; ragged: prompts of 64..512): $gen_bench_line"
  [[ -n $gen_profile_line ]] && echo "  $gen_profile_line"
  [[ -n $gen_sampled_line ]] && echo "  $gen_sampled_line"
  [[ -n $gen_tuned_line ]] && echo "$gen_tuned_line" | sed 's/^/  /'
  echo
  echo "where the step time goes (profiled: synchronised after every op):"
  ((${#profile_tables[@]} > 0)) || echo "not run"
  for t in ${profile_tables[@]+"${profile_tables[@]}"}; do echo "$t"; echo; done
  echo "targets (issue 7):"
  target_lines "$kernel_table" ${train_rows[@]+"${train_rows[@]}"} | sed 's/^/  /'
  echo
  if ((status == 0)); then
    echo "result: OK"
  else
    echo "result: FAILED: $(IFS=';'; echo "${failed_steps[*]}")"
  fi
}
finish() {
  rm -rf "$step_logs"
  print_summary
  exec >&- 2>&- {to_tee}>&-
  wait "$tee_pid" 2>/dev/null
  exit $status
}
# A signal is handled inside whatever step was running, whose redirections (to its log) hold
# copies of tee's pipe: the summary goes to tee by to_tee, and tee ends when this script has.
on_stop() {
  trap - TERM INT
  exec >&"$to_tee" 2>&1
  if [[ -n $in_flight ]]; then
    kill -TERM "$in_flight" 2>/dev/null
    # Up to 3 s for it to end (run_limited's timeout ends with its command), so that its log
    # is whole when it is kept below.
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do kill -0 "$in_flight" 2>/dev/null || break; sleep 0.2; done
  fi
  for l in "$step_logs"/train-*.log; do [[ -f $l ]] && keep_log "$l"; done
  rm -rf "$step_logs"
  # Stopped during the kernel table: the rows it printed.
  if [[ $kernel_table == "not run" && -s $logdir/kernels.log ]]; then
    kernel_table=$(sed -n '/^kernel /,$p' "$logdir/kernels.log")
  fi
  fail "stopped by SIG$1 at $(elapsed)s"
  print_summary
  exit $status
}
# What the summary reads, as it stands before each step has run (set -u).
gpu_line="" build_how="not reached" tests_line="not run" kernel_table="not run" steps=5 ncu_line="not run"
gen_line="not run" gen_bench_line="not run" gen_profile_line="" gen_sampled_line="" gen_tuned_line=""
variant_notes=() train_rows=() tuned_lines=() profile_tables=()
trap 'on_stop TERM' TERM
trap 'on_stop INT' INT

say "host $(hostname), $(nproc) cores; repo $repo"
gpu_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
say "GPU: ${gpu_line:-none visible to nvidia-smi}"

# Libraries the machine must provide: NCCL and cuBLASLt (too large to carry).
find_lib() {  # find_lib <soname>: the directory holding it, or nothing
  local p
  p=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')
  if [[ -z $p ]]; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
      [[ -e $d/$1 ]] && { p=$d/$1; break; }
    done
  fi
  if [[ -z $p ]]; then
    p=$(find /opt /usr/local /usr/lib -name "$1" 2>/dev/null | head -1)
  fi
  [[ -n $p ]] && dirname "$p"
}
extra_ld=""
for so in libnccl.so.2 libcublasLt.so.13 libcudart.so.13; do
  d=$(find_lib "$so")
  if [[ -n $d ]]; then
    say "$so: $d"
    extra_ld=$extra_ld:$d
  else
    say "$so: NOT FOUND on this machine"
    # trident loads libcublasLt on its first GEMM (kernels/cuda/cublaslt_loader.h), so the
    # ldd check below cannot see it missing.
    [[ $so == libcublasLt.* ]] && fail "$so not found (every GEMM needs it)"
  fi
done

# ---- the build ---------------------------------------------------------------------------
build=""
build_how=""
if [[ -n ${TRIDENT_BUILD_DIR:-} ]]; then
  build=$TRIDENT_BUILD_DIR
  build_how="given (TRIDENT_BUILD_DIR)"
elif [[ -f $bundle ]]; then
  say "unpacking $bundle"
  rm -rf "$repo/build-gpu"
  unxz_cat() {  # xz, or Python's lzma where xz-utils is missing
    if command -v xz >/dev/null; then xz -dc "$1"; else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; fi
  }
  if unxz_cat "$bundle" | tar -C "$repo" -xf -; then
    build=$repo/build-gpu
    old_src=$(cat "$build/.bundle-source-dir")
    old_build=$(cat "$build/.bundle-build-dir")
    # The ctest files name the bundle maker's paths: point them at this checkout.
    find "$build" -name '*.cmake' -print0 | xargs -0 sed -i -e "s#$old_build#$build#g" -e "s#$old_src#$repo#g"
    # The machine's own C++ runtime is newer and NCCL may need it: prefer it over ours.
    mkdir -p "$build/lib/shadowed"
    for l in libstdc++.so.6 libgcc_s.so.1 libgomp.so.1; do
      if [[ -e $build/lib/$l ]] && ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$l "; then
        mv "$build/lib/$l" "$build/lib/shadowed/"
      fi
    done
    build_how="carried bundle (commit $(cat "$build/.bundle-commit" 2>/dev/null))"
  else
    fail "unpack the bundle"
  fi
fi
if [[ -z $build ]]; then
  build=$repo/build-gpu
  missing=()
  have_hdr() { [[ -n $(find /usr/include /usr/local/include -maxdepth 3 -path "*$1" 2>/dev/null | head -1) ]]; }
  # Every build needs these (top-level CMakeLists and csrc/*): package name, a header it installs.
  for pair in libopenblas-openmp-dev:cblas.h libyaml-cpp-dev:yaml-cpp/yaml.h libcxxopts-dev:cxxopts.hpp \
              nlohmann-json3-dev:nlohmann/json.hpp libxxhash-dev:xxhash.h libutf8proc-dev:utf8proc.h \
              liblzma-dev:lzma.h libsimdjson-dev:simdjson.h libprotobuf-dev:google/protobuf/message_lite.h; do
    have_hdr "${pair#*:}" || missing+=("${pair%%:*}")
  done
  command -v protoc >/dev/null || missing+=(protobuf-compiler)
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  can_build=$(( ${#missing[@]} == 0 ))
  have_gtest=1
  have_hdr gtest/gtest.h || { missing+=(libgtest-dev); have_gtest=0; }
  have_mpi=1
  command -v mpicxx >/dev/null || { missing+=(libopenmpi-dev); have_mpi=0; }
  ((${#missing[@]})) && say "missing Debian packages for a build here: ${missing[*]}"
  flags=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a)
  ((have_gtest)) || flags+=(-DTRIDENT_TESTS=OFF)
  ((have_mpi)) || flags+=(-DTRIDENT_MPI=OFF)
  say "building in $build (-j16) ${flags[*]}"
  if ((!can_build)); then
    fail "build: required packages missing (${missing[*]}); carry a bundle (tools/gpu-check.sh --make-bundle)"
    build_how="no build: missing ${missing[*]}"
  elif cmake -S "$repo" -B "$build" "${flags[@]}" >"$logdir/build.log" 2>&1 &&
     cmake --build "$build" -j16 --target trident-bench trident-train trident-generate \
       $( ((have_gtest)) && echo cuda_backend_tests) \
       $( ((have_gtest && have_mpi)) && echo nccl_comm_tests) >>"$logdir/build.log" 2>&1; then
    build_how="built here${missing:+ without ${missing[*]}}"
  else
    grep -E "Could NOT find|not found|error" "$logdir/build.log" | head -20
    fail "build (see build.log)"
    build_how="build FAILED"
  fi
fi
export LD_LIBRARY_PATH="$build/lib$extra_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bench=$build/tools/trident-bench
if [[ -x $bench ]] && ! ldd "$bench" | grep -q "not found"; then
  say "trident-bench loads: ok"
else
  [[ -x $bench ]] && ldd "$bench" | grep "not found"
  fail "trident-bench does not load"
fi

# ---- CUDA tests ----------------------------------------------------------------------------
tests_line="not run"
tests_rc=0
if [[ -z ${GPU_CHECK_SKIP_TESTS:-} && -f $build/CTestTestfile.cmake ]]; then
  # Not here: the register-spill check and its self-test (ptxas reports of the bundle
  # maker's build; no GPU needed) and the CPU emulation of the attention kernels (no GPU
  # needed either; their "emulated" label does not reach the discovered tests, so they go
  # by name); the -np 2 test needs mpirun.
  exclude='cuda_register_spills|cuda_spill_check|Emulated|emulated'
  # The -np 2 tests need an mpirun (the H200 machines have one: both passed there 2026-11-29).
  command -v mpirun >/dev/null || { exclude="$exclude|_np2"; say "no mpirun here: the -np 2 tests are left out"; }
  say "ctest -L cuda -E '$exclude'"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  run_limited "${GPU_CHECK_TESTS_S:-240}" ctest --test-dir "$build" -L cuda -E "$exclude" -j8 --timeout 120 \
    --output-on-failure >"$logdir/ctest.log" 2>&1
  rc=$?
  tests_rc=$rc
  tests_line=$(grep -E "tests passed|tests failed" "$logdir/ctest.log" | tail -1)
  skipped=$(grep -c '\*\*\*Skipped' "$logdir/ctest.log")
  tests_line="${tests_line:-no result (rc $rc)}; $skipped skipped"
  if ((rc != 0)); then
    fail "CUDA tests (see ctest.log)"
    grep -E "\*\*\*Failed|\*\*\*Timeout|Not Run|\(Failed\)|\(Timeout\)" "$logdir/ctest.log" | head -20
  fi
  # Some tests skip on one GPU (the multi-GPU ones, fp32 cases of 16-bit kernels); half or more
  # mean the tests saw no GPU (a driver the runtime does not take, say): nothing was checked.
  total=$(sed -nE 's/.* tests failed out of ([0-9]+).*/\1/p' "$logdir/ctest.log" | tail -1)
  if ((${total:-0} > 0 && 2 * skipped >= ${total:-0})); then
    fail "CUDA tests: $skipped of $total skipped (did they see the GPU? see ctest.log)"
    grep -m3 -B2 '\*\*\*Skipped' "$logdir/ctest.log"
  fi
  say "tests: $tests_line"
fi

# ---- kernels ----------------------------------------------------------------------------
# watch_rows <limit s> <row s> <progress file> <command...>: the command in the background,
# stopped past the limit (status 124) or when the row that the progress file names has run for
# more than <row s> (status 125; the file still names it): a hung kernel (a barrier that never
# completes) costs its row, not the rest of the table's time.
watch_rows() {
  local lim=$1 row_s=$2 progress=$3 pid start since now seen="" cur
  shift 3
  "$@" {to_tee}>&- &
  pid=$!
  in_flight=$pid
  start=$(elapsed)
  since=$start
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.2
    now=$(elapsed)
    cur=$(cat "$progress" 2>/dev/null)
    [[ $cur != "$seen" ]] && { seen=$cur; since=$now; }
    if [[ -n $cur ]] && ((now - since > row_s)); then
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      in_flight=""
      return 125
    fi
    if ((now - start >= lim)); then
      kill -TERM "$pid" 2>/dev/null
      sleep 1
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      in_flight=""
      return 124
    fi
  done
  wait "$pid"
  local rc=$?
  in_flight=""
  return $rc
}
kernel_table="not run"
dead_rows=()  # the rows that died or hung: Nsight Compute's replays below leave them out
if [[ -x $bench ]]; then
  kflag=--kernels
  [[ -n ${GPU_CHECK_QUICK:-} ]] && kflag=--kernels-quick
  # 180 s at most, and done 10 s before the budget when the tests ran long (their limit plus
  # 180 would pass it, and every training row would be skipped); at least 60 s. A table cut
  # short keeps the rows printed so far, the new kernels' rows (last) lost first.
  bench_s=$((${GPU_CHECK_BUDGET_S:-400} - 10 - $(elapsed)))
  ((bench_s > 180)) && bench_s=180
  ((bench_s < 60)) && bench_s=60
  bench_s=$(limit "$bench_s")
  row_s=${GPU_CHECK_ROW_S:-60}
  say "trident-bench $kflag (time limit ${bench_s}s, ${row_s}s a row)"
  # A run that dies in a row (a CUDA error aborts the process: a new kernel's first run,
  # say) or hangs there, which --kernels-progress names, is rerun past that row, up to three
  # times within the first run's time limit: one bad kernel costs its row, not the rest of
  # the table. The reruns read the rows before theirs from --kernels-results, so the table's
  # choices (fastest tiles, faster opt-ins) still compare every row. A death outside every row
  # (the file empty), or no further on than the last, ends it.
  progress=$step_logs/kernels-progress  # not in $logdir: $OUT brings back a few files only
  results=$step_logs/kernels-results
  resume=()
  last_row=0
  deadline=$(($(elapsed) + bench_s))
  : >"$logdir/kernels.log"
  for attempt in 1 2 3 4; do
    : >"$progress"
    watch_rows "$bench_s" "$row_s" "$progress" "$bench" "$kflag" --kernels-progress "$progress" \
      --kernels-results "$results" "${resume[@]}" >>"$logdir/kernels.log" 2>&1
    rc=$?
    ((rc == 0)) && break
    row=0 row_name=""
    [[ -s $progress ]] && read -r row row_name <"$progress"
    # A row that hung or aborted the process; not one in flight when the table's time ran out.
    # (Its name, "SECTION: ROW", is --kernels-skip's: of one head dim's section only.)
    ((rc != 124 && rc != 137)) && [[ -n $row_name ]] && dead_rows+=("$row_name")
    if ((rc == 124 || rc == 137 || row <= last_row)); then  # out of time, or no row to skip
      fail "trident-bench $kflag (rc $rc${row_name:+, in row $row: $row_name})"
      break
    fi
    how="died in"
    ((rc == 125)) && how="hung (over ${row_s} s) in"
    fail "trident-bench $kflag: $how row $row ($row_name), rc $rc"
    bench_s=$((deadline - $(elapsed)))
    ((attempt < 4 && bench_s >= 30)) || break
    say "trident-bench $kflag $how row $row ($row_name): rerun past it (time limit ${bench_s}s)"
    resume=(--kernels-resume "$row")
    last_row=$row
  done
  rm -f "$progress" "$results"
  cat "$logdir/kernels.log"
  kernel_table=$(sed -n '/^kernel /,$p' "$logdir/kernels.log")
  [[ -n $kernel_table ]] || kernel_table=$(tail -3 "$logdir/kernels.log")
fi

# ---- training throughput ------------------------------------------------------------------
# model:micro-batch; one GPU, sequence 1024, synthetic tokens, 2 warm-up + 5 timed steps.
configs=(gpt2-124m:16 gpt2-345m:16 gpt2-1.3b:8)
read -ra dtypes <<<"${GPU_CHECK_DTYPES:-bf16 fp16}"
steps=5
if [[ -n ${GPU_CHECK_QUICK:-} ]]; then configs=(gpt2-124m:8); steps=2; fi
# GPU_CHECK_CONFIGS="model:mb ..." replaces the list; GPU_CHECK_CONFIGS=none skips training.
if [[ -n ${GPU_CHECK_CONFIGS:-} ]]; then read -ra configs <<<"${GPU_CHECK_CONFIGS/none/}"; fi
train_rows=()
# The training rows run without dropout (trident-train's default is Megatron's 0.1): the
# MFU target compares with llm.c, which has none, and with the figures in PERFORMANCE.md.
# "attn fwd+bwd, dropout 0.1" in the kernel table and the dropout rows price it.
no_dropout=(--hidden-dropout 0 --attention-dropout 0)
# train_row <model> <mb> <dtype> <log> [label] [global batch]: one timed training run (the
# environment's attention tiles; one micro-batch per step unless a global batch is given),
# appended to train_rows.
train_row() {
  local model=$1 mb=$2 dt=$3 log=$4 label=${5:-$1} gb=${6:-$2} scale=() rc line step_ms tps tflops mfu
  # fp16: a dynamic scale that starts at 2^12, not 2^32, so the timed steps are not
  # overflow-skipped steps (which leave out the optimizer).
  [[ $dt == fp16 ]] && scale=(--initial-loss-scale 4096)
  run_limited 100 "$bench" --config "$repo/configs/$model.yaml" --device cuda --"$dt" --micro-batch-size "$mb" \
    --global-batch-size "$gb" --train-iters "$steps" --lr-warmup-iters 0 --eval-iters 0 --bench-warmup 2 \
    "${no_dropout[@]}" --bench-no-profile "${scale[@]}" >"$log" 2>&1
  rc=$?
  line=$(grep "tokens per second" "$log")
  if ((rc != 0)) || [[ -z $line ]]; then
    fail "training $label $dt (rc $rc)"
    tail -3 "$log"
    train_rows+=("$(printf '%-18s %-5s %4s   FAILED (rc %s): %s' "$label" "$dt" "$mb" "$rc" "$(tail -1 "$log")")")
    keep_log "$log"
    return
  fi
  keep_log "$log"
  step_ms=$(sed -E 's/.*step time: ([0-9.]+) ms.*/\1/' <<<"$line")
  tps=$(sed -E 's/.*tokens per second: ([0-9.]+).*/\1/' <<<"$line")
  tflops=$(sed -E 's/.*model TFLOP\/s: ([0-9.]+).*/\1/' <<<"$line")
  mfu=$(sed -nE 's/.*MFU: ([0-9.]+%).*/\1/p' <<<"$line")
  train_rows+=("$(printf '%-18s %-5s %4s %10s %12s %10s %7s' "$label" "$dt" "$mb" "$step_ms" "$tps" "$tflops" "${mfu:-n/a}")")
}
past_budget() { (($(elapsed) > ${GPU_CHECK_BUDGET_S:-400})); }  # keep the whole run under ~8 minutes
if [[ -x $bench ]]; then
  # The first row (the largest model, the first dtype: bf16) trains even past the budget:
  # it is the MFU target. It starts by ~390 s unless the tests ended past ~330 s (the
  # table keeps 60 s), and its 100 s limit keeps the run inside the device tool's 600 s.
  first_row=1
  for ((i = ${#configs[@]} - 1; i >= 0; i--)); do  # the largest model first: it is the MFU target
    c=${configs[i]}
    model=${c%%:*}
    mb=${c##*:}
    for dt in "${dtypes[@]}"; do
      if ((!first_row)) && past_budget; then
        train_rows+=("$(printf '%-18s %-5s %4s   skipped: past the time budget' "$model" "$dt" "$mb")")
        fail "training $model $dt: no time left"
        continue
      fi
      first_row=0
      say "training $model $dt, micro batch $mb"
      train_row "$model" "$mb" "$dt" "$step_logs/train-$model-$dt.log"
    done
  done
fi
# ---- the same in bf16 with what the kernel table found faster than the defaults ----------
# trident-bench --kernels prints "fastest attention tiles, D<head dim>: VAR=value ..." and
# "faster opt-in kernels: VAR=1 ..." (each "defaults" when nothing beat them); each config
# whose head dim has non-default tiles, or every config when an opt-in kernel was faster,
# trains once more with them, so that one run measures what making them the defaults
# (AttnTiles, the opt-ins' switches) would give.
tuned_lines=()
largest_tuned=""
# A variant whose GPU test did not pass still times: say so beside its figures. The mma.sync
# tile variants are CudaAttention.TunedVariantsMatchCpu's, the wgmma kernels (the defaults on
# this GPU) WgmmaMatchesCpu's and ForwardMatchesCpu's / BackwardMatchesCpu's, the wgmma
# backward with dQ by atomics WgmmaAtomicDqMatchesCpu's, the two-warpgroup blocks (any of
# the TRIDENT_ATTN_*_WG=2) WgmmaTwoWarpgroupsMatchCpu's, the warp-specialized forward's
# 128-key ring (TRIDENT_ATTN_FWD_WS=1 with a key tile), dK/dV kernel (TRIDENT_ATTN_BWD_WS=1) and
# dQ kernel (TRIDENT_ATTN_DQ_WS=1) WgmmaWarpSpecializedMatchesCpu's.
# did_not_pass <test>: ctest.log names it failed, timed out, crashed or not run, or the
# tests were cut off by GPU_CHECK_TESTS_S and no line says that it passed.
did_not_pass() {
  [[ -f $logdir/ctest.log ]] || return 1
  grep -Eiq "$1.*(failed|timeout|exception|aborted|not run)|failed.*$1" "$logdir/ctest.log" ||
    { ((tests_rc == 124)) && ! grep -q "$1.*Passed" "$logdir/ctest.log"; }
}
unverified=""
variant_notes=()
for t in TunedVariantsMatchCpu WgmmaMatchesCpu WgmmaAtomicDqMatchesCpu WgmmaTwoWarpgroupsMatchCpu \
  WgmmaWarpSpecializedMatchesCpu; do
  did_not_pass "$t" && variant_notes+=("UNVERIFIED: CudaAttention.$t did not pass (see ctest.log): its variants' rows time kernels that may be wrong")
done
did_not_pass TunedVariantsMatchCpu &&
  unverified=" (UNVERIFIED: CudaAttention.TunedVariantsMatchCpu did not pass, see ctest.log)"
[[ -f $logdir/ctest.log ]] ||
  variant_notes+=("note: the CUDA tests did not run in this call: the variants' rows and the +tuned runs are checked by an earlier call's tests only")
wgmma_ok=1
did_not_pass WgmmaMatchesCpu && wgmma_ok=0
wgmma_atomic_ok=1  # the wgmma backward with dQ by atomics (opt-in) has a test of its own
did_not_pass WgmmaAtomicDqMatchesCpu && wgmma_atomic_ok=0
wgmma_2wg_ok=1  # likewise the two-warpgroup blocks of any kernel (opt-in)
did_not_pass WgmmaTwoWarpgroupsMatchCpu && wgmma_2wg_ok=0
wgmma_ws_ok=1  # and the warp-specialized kernels asked for (the opt-ins among them)
did_not_pass WgmmaWarpSpecializedMatchesCpu && wgmma_ws_ok=0
# The faster opt-in kernels, less those whose GPU test did not pass (opt_in_test: the tests
# that compare each with the CPU or with the kernel it would replace).
declare -A opt_in_test=([TRIDENT_LN_FWD_RING=0]=RowsPerWarpSameBits [TRIDENT_GEMM_AUTOTUNE=1]=AutotunedAlgorithmsMatchCpu
  [TRIDENT_GEMM_GEMV=1]=SmallRowsGemvMatchesCpu)
opt_ins=""
# A rerun past a row makes no choices (it measured part of the table): say so.
no_choice=$(grep -m1 '^no tile or opt-in choices: ' "$logdir/kernels.log" 2>/dev/null)
[[ -n $no_choice ]] && tuned_lines+=("no +tuned rows: ${no_choice#no tile or opt-in choices: }")
if [[ -f $logdir/kernels.log ]]; then
  for kv in $(sed -nE 's/^faster opt-in kernels: (.*)/\1/p' "$logdir/kernels.log" | tail -1); do
    [[ $kv == defaults ]] && continue
    if [[ -n ${opt_in_test[$kv]:-} ]] && did_not_pass "${opt_in_test[$kv]}"; then
      tuned_lines+=("not trained with $kv: its GPU test did not pass")
      continue
    fi
    opt_ins+="${opt_ins:+ }$kv"
  done
fi
if [[ -x $bench && -f $logdir/kernels.log ]]; then
  for ((i = ${#configs[@]} - 1; i >= 0; i--)); do  # the largest model first
    c=${configs[i]}
    model=${c%%:*}
    mb=${c##*:}
    yaml=$repo/configs/$model.yaml
    hidden=$(sed -nE 's/^hidden-size: *([0-9]+).*/\1/p' "$yaml")
    heads=$(sed -nE 's/^num-attention-heads: *([0-9]+).*/\1/p' "$yaml")
    [[ -n $hidden && -n $heads ]] || continue
    d=$((hidden / heads))
    tiles=$(sed -nE "s/^fastest attention tiles, D$d: (.*)/\1/p" "$logdir/kernels.log" | tail -1)
    if ((!wgmma_ok)) && [[ $tiles == *WGMMA=1* ]]; then
      tuned_lines+=("$model: not trained with $tiles: CudaAttention.WgmmaMatchesCpu did not pass")
      tiles=""
    elif ((!wgmma_atomic_ok)) && [[ $tiles == *BWD_WGMMA=1* && $tiles == *BWD_ATOMIC=1* ]]; then
      tuned_lines+=("$model: not trained with $tiles: CudaAttention.WgmmaAtomicDqMatchesCpu did not pass")
      tiles=""
    elif ((!wgmma_2wg_ok)) && [[ $tiles == *_WG=2* ]]; then
      tuned_lines+=("$model: not trained with $tiles: CudaAttention.WgmmaTwoWarpgroupsMatchCpu did not pass")
      tiles=""
    elif ((!wgmma_ws_ok)) && [[ $tiles == *_WS=1* ]]; then
      tuned_lines+=("$model: not trained with $tiles: CudaAttention.WgmmaWarpSpecializedMatchesCpu did not pass")
      tiles=""
    fi
    [[ $tiles == defaults ]] && tiles=""
    tuned="$tiles${tiles:+${opt_ins:+ }}$opt_ins"
    [[ -n $tuned ]] || continue
    if past_budget; then
      tuned_lines+=("$model: skipped ($tuned): past the time budget")
      continue
    fi
    say "training $model bf16, micro batch $mb, tuned: $tuned"
    tuned_lines+=("$model+tuned: $tuned${tiles:+$unverified}")
    for kv in $tuned; do export "${kv?}"; done
    train_row "$model" "$mb" bf16 "$step_logs/train-$model-tuned.log" "$model+tuned"
    for kv in $tuned; do unset "${kv%%=*}"; done
    [[ $c == "${configs[-1]}" ]] && largest_tuned=$tuned
  done
fi
# ---- the largest config as the configs train it: 8 micro-batches per optimizer step -------
# The rows above take one optimizer step per micro-batch, so the whole-model passes (zeroing
# and clipping the gradients, AdamW: ~10 ms of a gpt2-1.3b step) weigh as if nobody
# accumulated; configs/gpt2-1.3b.yaml trains 512 sequences a step (128 micro-batches of 4).
# bf16, with the tuned settings when the kernel table found better ones.
if [[ -x $bench && ${#configs[@]} -gt 0 && -z ${GPU_CHECK_QUICK:-} ]]; then
  c=${configs[-1]}
  model=${c%%:*}
  mb=${c##*:}
  if past_budget; then
    tuned_lines+=("$model x8: skipped: past the time budget")
  else
    say "training $model bf16, 8 micro-batches of $mb a step${largest_tuned:+, tuned: $largest_tuned}"
    for kv in ${largest_tuned:-}; do export "${kv?}"; done
    train_row "$model" "$mb" bf16 "$step_logs/train-$model-accumulate.log" "$model x8${largest_tuned:++tuned}" $((8 * mb))
    for kv in ${largest_tuned:-}; do unset "${kv%%=*}"; done
    tuned_lines+=("$model x8: global batch $((8 * mb)) (8 micro-batches a step)")
  fi
fi
# ---- where the attention kernels stall: Nsight Compute on gpt2-1.3b's shape ---------------
# One launch of each attention kernel variant (trident-bench --kernels-once) under ncu with
# the clocks left alone; the full report goes to ncu-attention.log. GPU_CHECK_NCU=0 skips it.
# After the training runs: when time is short, the MFU figures matter more.
ncu_line="not run"
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [[ -x $bench && ${GPU_CHECK_NCU:-1} != 0 && -n $ncu_bin && -z ${GPU_CHECK_QUICK:-} ]] && past_budget; then
  ncu_line="skipped: past the time budget"
elif [[ -x $bench && ${GPU_CHECK_NCU:-1} != 0 && -n $ncu_bin && -z ${GPU_CHECK_QUICK:-} ]]; then
  # Each call replays a whole section: a row that died or hung in the table would again.
  skip_rows=()
  for r in ${dead_rows[@]+"${dead_rows[@]}"}; do skip_rows+=(--kernels-skip "$r"); done
  ((${#skip_rows[@]})) && say "ncu: leaving out the rows that died or hung: ${dead_rows[*]}"
  say "ncu: attention kernels, B8 T1024 H16 D128"
  run_limited 150 "$ncu_bin" --clock-control none --kernel-name-base demangled -k 'regex:attn_(fwd|bwd_dkdv|bwd_dq)_(mma|wgmma)' \
    -c 40 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    "$bench" --kernels-only "attention D128" --kernels-once ${skip_rows[@]+"${skip_rows[@]}"} >"$logdir/ncu-attention.log" 2>&1
  rc=$?
  # The default wgmma kernels' warp stall reasons (average warps stalled per issued
  # instruction, by reason), which the sections above leave out of their text: ncu-stalls.log.
  run_limited 60 "$ncu_bin" --clock-control none --kernel-name-base demangled \
    -k 'regex:attn_(fwd_ws|(fwd|bwd_dkdv|bwd_dq)_wgmma)_kernel' -c 3 \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    "$bench" --kernels-only "attention D128" --kernels-once ${skip_rows[@]+"${skip_rows[@]}"} >"$logdir/ncu-stalls.log" 2>&1
  stall_rc=$?
  # ... and head dim 64's warp-specialized forward (the default) beside the one-warpgroup
  # wgmma kernel it replaced: the rows "attention fwd", "attn fwd, wgmma" and "attn fwd,
  # warp-specialized". (ncu demangles template arguments as "(int)64".)
  run_limited 60 "$ncu_bin" --clock-control none --kernel-name-base demangled \
    -k 'regex:attn_fwd_(wgmma_kernel<__nv_bfloat16, (\(int\))?64, (\(int\))?64, (\(int\))?1>|ws_kernel<__nv_bfloat16, (\(int\))?64, (\(int\))?64>)' \
    -c 3 \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    "$bench" --kernels-only "attention D64" --kernels-once ${skip_rows[@]+"${skip_rows[@]}"} >>"$logdir/ncu-stalls.log" 2>&1 || stall_rc=$?
  # ... and head dim 64's backward kernels, the defaults beside the warp-specialized ones: the
  # table's first 19 launches of ncu-d64.log's filter, through "attn bwd, 2-consumer bulk dQ".
  run_limited 80 "$ncu_bin" --clock-control none --kernel-name-base demangled \
    -k 'regex:attn_bwd_((dkdv|dq)_wgmma_kernel<__nv_bfloat16, (\(int\))?64, (\(int\))?64|(dkdv|dq)_ws2?_kernel<__nv_bfloat16)' \
    -c 19 --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    "$bench" --kernels-only "attention D64" --kernels-once ${skip_rows[@]+"${skip_rows[@]}"} >>"$logdir/ncu-stalls.log" 2>&1 || stall_rc=$?
  # Head dim 64's wgmma backward kernels with 64-row tiles and the warp-specialized ones, in
  # the table's order: the dK/dV and dQ kernels of the default and the wgmma rows (4), the dQ
  # kernel of the 32-query row (1), the warp-specialized rows (dK/dV, dQ, both, dK/dV by
  # halves, both by halves: 10; dK/dV with dQ by bulk adds: 1; the two-consumer dK/dV kernel
  # with the warp-specialized dQ kernel: 2, and with dQ by bulk adds: 1), the wgmma dK/dV
  # kernel that adds dQ by atomics (1; an opt-in whose float atomics into L2 are what its
  # timing hinges on: see Memory Workload Analysis, L2 hit rate): 20 launches (count again when a row that matches is added
  # before them; 90 s for 13). The two-warpgroup rows after them (timed and not kept on
  # 2026-12-04) are left out. In ncu-d64.log (at most 8 files come back from $OUT).
  run_limited 150 "$ncu_bin" --clock-control none --kernel-name-base demangled \
    -k 'regex:attn_bwd_((dkdv|dq)_wgmma_kernel<__nv_bfloat16, (\(int\))?64, (\(int\))?64|(dkdv|dq)_ws2?_kernel<__nv_bfloat16)' \
    -c 20 --section SpeedOfLight \
    --section Occupancy --section MemoryWorkloadAnalysis \
    "$bench" --kernels-only "attention D64" --kernels-once ${skip_rows[@]+"${skip_rows[@]}"} >"$logdir/ncu-d64.log" 2>&1
  d64_rc=$?
  # ncu heads each kernel's report with its name two spaces in (metrics are four): demangled
  # by default, "void trident::cuda::(anonymous namespace)::attn_fwd_mma_kernel<__nv_bfloat16,
  # 128, 32, 1, 1>(trident::cuda::(anonymous namespace)::AttnParams) (16, 128, 1)x(128, 1, 1),
  # Context 1, ...", or the bare function name (--print-kernel-base function).
  heads='^  ([^ ].*)?attn_(fwd|bwd)'
  ncu_line="rc $rc, $(grep -cE "$heads" "$logdir/ncu-attention.log") kernel reports in ncu-attention.log;"
  ncu_line+=" stall reasons: rc $stall_rc, $(grep -cE "$heads" "$logdir/ncu-stalls.log") kernels in ncu-stalls.log;"
  ncu_line+=" D 64 backward: rc $d64_rc, $(grep -cE "$heads" "$logdir/ncu-d64.log") kernels (in ncu-attention.log)"
  # One line per kernel: its name and template arguments (which tell the tile variants apart),
  # then duration, SM and memory throughput, L2 hit rate (where reported), occupancy.
  ncu_summary() {
    awk -v heads="$heads" '
         $0 ~ heads {name=$0; gsub(/\(anonymous namespace\)::/, "", name); match(name, /attn_(fwd|bwd)/)
                     name=substr(name, RSTART); sub(/ *\(.*$/, "", name); l2=""}
         name && /^    Duration/ {d=$NF" "$(NF-1)}
         name && /^    Compute \(SM\) Throughput/ {sm=$NF}
         name && /^    Memory Throughput/ && $(NF-1) == "%" {mem=$NF}
         name && /^    L2 Hit Rate/ {l2=" | L2 hits " $NF "%"}
         name && /^    Achieved Occupancy/ {print name, "|", d, "| SM", sm "% | mem", mem "%" l2 " | occupancy", $NF "%"; name=""}' \
      "$1" | head -"$2"
  }
  ncu_summary "$logdir/ncu-attention.log" 20
  ncu_summary "$logdir/ncu-d64.log" 20
  { echo; echo "==== head dim 64 backward (B16 T1024 H32) ===="; cat "$logdir/ncu-d64.log"; } >>"$logdir/ncu-attention.log"
  rm -f "$logdir/ncu-d64.log"
fi

# ---- where a step's time goes: profiled runs of the smallest and the largest config ------
# ProfilingBackend synchronises after every op, so these steps are slower than the timed
# ones; the shares tell the next tuning session which kernels matter (a small model has a
# larger share of attention and memory-bound ops than a large one). Skipped in quick mode.
profile_tables=()
if [[ -x $bench && -z ${GPU_CHECK_QUICK:-} && ${#configs[@]} -gt 0 ]]; then
  profile_configs=("${configs[-1]}")
  [[ ${configs[0]} != "${configs[-1]}" ]] && profile_configs=("${configs[0]}" "${configs[-1]}")
  for c in "${profile_configs[@]}"; do
    model=${c%%:*}
    mb=${c##*:}
    if (($(elapsed) > ${GPU_CHECK_BUDGET_S:-400})); then
      profile_tables+=("$model: skipped: past the time budget")
      continue
    fi
    say "profiled step: $model bf16, micro batch $mb"
    log=$step_logs/train-profile-$model.log
    run_limited 100 "$bench" --config "$repo/configs/$model.yaml" --device cuda --bf16 --micro-batch-size "$mb" \
      --global-batch-size "$mb" --train-iters 2 --lr-warmup-iters 0 --eval-iters 0 --bench-warmup 1 \
      "${no_dropout[@]}" >"$log" 2>&1
    rc=$?
    table=$(sed -n '/^op /,$p' "$log")
    ((rc == 0)) && [[ -n $table ]] || table="FAILED (rc $rc): $(tail -1 "$log")"
    profile_tables+=("$model bf16, micro batch $mb:"$'\n'"$table")
    keep_log "$log"
  done
fi
# ---- generation: decoding throughput with the KV cache -------------------------------------
# A one-iteration gpt2-124m bf16 checkpoint (the weights do not matter for speed), then 8
# unconditional samples of 256 tokens decoded together. Needs the GPT-2 vocabulary: carry
# data/gpt2 (tools/get-gpt2-vocab.sh fetches it here).
gen_line="not run"
gpt2_dir=$repo/data/gpt2
[[ -f $gpt2_dir/gpt2-vocab.json ]] || gpt2_dir=$repo/../shared/data/gpt2
if [[ -z ${GPU_CHECK_QUICK:-} && ${GPU_CHECK_GENERATE:-1} != 0 && -x $build/tools/trident-generate &&
      -x $build/tools/trident-train ]]; then
  if [[ ! -f $gpt2_dir/gpt2-vocab.json ]]; then
    gen_line="skipped: no GPT-2 vocabulary (carry data/gpt2)"
  elif (($(elapsed) > ${GPU_CHECK_BUDGET_S:-400})); then
    gen_line="skipped: past the time budget"
  else
    say "generation: gpt2-124m bf16, 8 x 256 tokens"
    gen_dir=$(mktemp -d)
    log=$step_logs/train-generate.log
    if run_limited 60 "$build/tools/trident-train" --config "$repo/configs/gpt2-124m.yaml" --device cuda --bf16 \
         --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --lr-warmup-iters 0 --eval-iters 0 \
         --save "$gen_dir/ckpt" >"$log" 2>&1 &&
       run_limited 60 "$build/tools/trident-generate" --load "$gen_dir/ckpt" --vocab-file "$gpt2_dir/gpt2-vocab.json" \
         --merge-file "$gpt2_dir/gpt2-merges.txt" --num-samples 8 --batch-size 8 --out-seq-length 256 --ignore-eos \
         --top-k 40 --device cuda >/dev/null 2>>"$log"; then
      gen_line=$(sed -n 's/^trident-generate: //p' "$log" | tail -1)
    else
      fail "generation"
      gen_line="FAILED: $(tail -1 "$log")"
    fi
    keep_log "$log"
    rm -rf "$gen_dir"
  fi
fi
# trident-bench --generate: prefill and decoding rates of gpt2-124m bf16 with random weights,
# 8 prompts of 512 tokens, 128 new tokens each (no checkpoint or vocabulary needed), and
# prompts of 64, 128, ..., 512 tokens decoded each at its own length vs every sequence a step
# from the shortest prompt's end (the schedule before 2026-12-04).
gen_bench_line="not run"
gen_profile_line=""  # the default kernels' steps with every op timed (trident-bench's "decode profile:")
gen_sampled_line=""  # sampled steps drawn on the device vs on the host (trident-bench's "sampled decode:")
gen_tuned_line=""    # decoding with the small-M GEMM opt-ins ("decode, GEMMs autotuned ...", "decode, small-M GEMV ...")
if [[ -z ${GPU_CHECK_QUICK:-} && ${GPU_CHECK_GENERATE:-1} != 0 && -x $bench ]]; then
  if (($(elapsed) > ${GPU_CHECK_BUDGET_S:-400})); then
    gen_bench_line="skipped: past the time budget"
  else
    say "trident-bench --generate: gpt2-124m bf16, 8 x (512 + 128) tokens, and prompts of 64..512"
    log=$step_logs/train-generate-bench.log
    run_limited 90 "$bench" --generate --config "$repo/configs/gpt2-124m.yaml" --device cuda --bf16 \
      --micro-batch-size 8 --generate-prompt 512 --generate-tokens 128 --generate-ragged >"$log" 2>&1
    rc=$?
    # The lines printed before a failure are kept (the sampled decode, the first run of
    # sample_logits on a GPU, comes last).
    gen_bench_line=$(grep -E '^(prefill|decode|ragged): ' "$log" | paste -sd ';' -)
    gen_profile_line=$(grep -E '^decode profile' "$log" | head -1)
    gen_sampled_line=$(grep -E '^sampled decode' "$log" | head -1)
    gen_tuned_line=$(grep -E '^decode, ' "$log" | head -2)
    if ((rc == 0)); then
      # The same with the attention kernel generation had before 2026-12-04 (the scalar one
      # for prefill and decoding steps alike): the new kernels' end-to-end gain.
      if TRIDENT_ATTN_DECODE_SCALAR=1 run_limited 60 "$bench" --generate --config "$repo/configs/gpt2-124m.yaml" \
           --device cuda --bf16 --micro-batch-size 8 --generate-prompt 512 --generate-tokens 128 >>"$log" 2>&1; then
        gen_bench_line+="; with TRIDENT_ATTN_DECODE_SCALAR=1: $(grep -E '^(prefill|decode): ' "$log" | tail -2 | paste -sd ';' -)"
      else
        gen_bench_line+="; with TRIDENT_ATTN_DECODE_SCALAR=1: FAILED: $(tail -1 "$log")"
      fi
    else
      fail "trident-bench --generate (rc $rc)"
      gen_bench_line="${gen_bench_line:+$gen_bench_line; }FAILED (rc $rc): $(tail -1 "$log")"
    fi
    keep_log "$log"
  fi
fi

finish
