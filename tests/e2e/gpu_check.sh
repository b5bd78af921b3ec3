#!/usr/bin/env bash
# tools/gpu-check.sh's logic without a GPU: a stand-in trident-bench (a script that logs its
# arguments and TRIDENT_ATTN_* environment and prints the lines gpu-check parses) runs in
# place of the real one. Checks:
#   - every training config runs once per dtype with one micro-batch per step;
#   - the head dim whose fastest attention tiles are not "defaults" (D128: gpt2-1.3b) trains
#     once more in bf16 with exactly those variables set, and D64 configs do not;
#   - gpt2-1.3b trains with 8 micro-batches a step (global batch 8 x micro batch) and the
#     tiles; the variables do not leak into later runs (the profiled steps);
#   - the summary holds the rows and "result: OK", exit 0; a failing training run gives
#     "result: FAILED" and exit 1; tiles whose GPU test failed are marked UNVERIFIED;
#   - a kernel table cut short (an abort) keeps its rows in the summary, and without its
#     "fastest attention tiles" lines nothing trains with tiles; one that dies in a row that
#     --kernels-progress names is rerun past it (--kernels-resume), with the choices the rerun
#     makes from the rows --kernels-results kept, and Nsight Compute's replays leave that row
#     out (--kernels-skip); a row that hangs is killed after GPU_CHECK_ROW_S and rerun past too;
#   - the run ends by GPU_CHECK_DEADLINE_S with its summary; a TERM ends the step in flight and
#     prints the summary; a failing generation bench keeps the lines it printed;
#   - when the wgmma test did not pass (a crash here), fastest tiles with a wgmma kernel are
#     not trained with, and the summary says so; likewise the atomic-dQ wgmma backward and
#     the two-warpgroup dK/dV blocks, each with its own test;
#   - the summary ends with issue 7's targets read off the tables (a kernel's share of the
#     copy rate, attention TFLOP/s at head dim 64, gpt2-1.3b bf16 MFU), and beside the
#     attention target its rate at T 4096 and 16384 and the cost of attention dropout, also of
#     the forward alone with each way of the mask (a FAILED row is left out, whatever its
#     message ends with), beside the memory-bound ones the
#     opt-in kernels' rows (the LayerNorm ring, the bias-gradient epilogue), and beside the
#     attention target the atomic-dQ backward's and the two-warpgroup backward's;
#   - the kernel table gets 180 s; past the time budget (-1 here) it gets 60 s, and of the
#     training rows only the first, gpt2-1.3b bf16, runs.
#   tests/e2e/gpu_check.sh <repo root>
set -uo pipefail
repo=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build/tools"
fake=$work/build/tools/trident-bench
cat >"$fake" <<'EOF'
#!/usr/bin/env bash
echo "$* | $(env | grep -E '^TRIDENT_(ATTN|LN|GEMM)_' | sort | tr '\n' ' ')" >>"$FAKE_BENCH_CALLS"
if [[ $1 == --kernels ]]; then
  # FAKE_BENCH_CRASH: "row" dies in row 7 and a rerun past it (--kernels-resume 7) goes on as
  # trident-bench's does (no header; the choices made from --kernels-results' rows, without it
  # none); "hang" hangs in row 7 instead of dying; "always" dies in row 7 whatever it is told;
  # "outside" dies between rows (the progress file empty). $3: --kernels-progress's file.
  if [[ -n ${FAKE_BENCH_CRASH:-} && ($* != *--kernels-resume* || $FAKE_BENCH_CRASH == always) ]]; then
    echo "kernel                       shape                                 ms/call     achieved   of peak"
    echo "layernorm fwd                32768x2048 bf16                        0.0882    3048 GB/s     71.4%"
    [[ $FAKE_BENCH_CRASH == outside ]] || echo "7 attention D64: attn fwd, wgmma" >"$3"
    [[ $FAKE_BENCH_CRASH == hang ]] && exec sleep 300
    echo "trident-bench: CUDA error an illegal instruction was encountered" >&2
    exit 134
  fi
  if [[ $* == *"--kernels-resume 7"* ]]; then
    echo "attn fwd, wgmma              B16 T1024 H32 D64 bf16             FAILED: skipped: the run before died in it (a rerun past it)"
    echo "attn bwd, 2-consumer ws      B8 T1024 H16 D128 bf16                 0.3500  245.4 TF/s     31.5%"
    echo "peaks measured in this run: device copy 3900 GB/s (read + write), bf16 GEMM 780.0 TFLOP/s"
    if [[ $* != *--kernels-results* ]]; then
      echo "no tile or opt-in choices: a rerun past row 7 measures part of the table"
      exit 0
    fi
    echo "fastest attention tiles, D64: defaults"
    echo "fastest attention tiles, D128: TRIDENT_ATTN_BWD_WS=1"
    echo "faster opt-in kernels: defaults"
    exit 0
  fi
  echo "kernel                       shape                                 ms/call     achieved   of peak"
  echo "layernorm fwd                32768x2048 bf16                        0.0882    3048 GB/s     71.4%"
  echo "layernorm fwd, walking warps 32768x2048 bf16                        0.0801    3356 GB/s     78.6%"
  echo "layernorm bwd                32768x2048 bf16                    FAILED: an illegal memory access 71.0%"
  echo "gelu bwd                     32768x8192 bf16                        0.4120    3910 GB/s     91.6%"
  echo "attention fwd (causal)       B8 T1024 H16 D128 bf16                 0.5000   68.7 TF/s      9.0%"
  echo "attention fwd+bwd (causal)   B16 T1024 H32 D64 bf16                 2.0435  117.7 TF/s     14.8%"
  echo "attention bwd (causal)       B16 T1024 H32 D64 bf16                 1.0690  160.7 TF/s     20.2%"
  echo "attn bwd, wgmma, atomic dQ   B16 T1024 H32 D64 bf16                 0.9000  190.9 TF/s     24.0%"
  echo "attention fwd (causal)       B16 T1024 H32 D64 bf16                 0.3300  208.2 TF/s     26.1%"
  echo "attn fwd, wgmma, 2-wg        B16 T1024 H32 D64 bf16                 0.3000  229.1 TF/s     28.7%"
  echo "attn bwd, wgmma, 2-wg dQ     B16 T1024 H32 D64 bf16                 1.0300  166.8 TF/s     20.9%"
  echo "attn bwd, wgmma, 2-wg dK/dV  B16 T1024 H32 D64 bf16                 1.0100  170.1 TF/s     21.4%"
  echo "attn bwd, wgmma atomic, 2-wg B16 T1024 H32 D64 bf16                 0.8500  202.1 TF/s     25.4%"
  echo "attn fwd+bwd, dropout 0.1    B16 T1024 H32 D64 bf16                 3.0653   78.5 TF/s      9.9%"
  echo "attn fwd, dropout 0.1        B16 T1024 H32 D64 bf16                 0.6000  114.5 TF/s     14.3%"
  echo "attn fwd, dropout, mask ahead B16 T1024 H32 D64 bf16, 34816 KiB mask 0.4000  171.8 TF/s     21.5%"
  echo "attention fwd+bwd, 4x T      B4 T4096 H32 D64 bf16                  6.1000  157.7 TF/s     19.9%"
  echo "attention fwd+bwd, 16x T     B1 T16384 H32 D64 bf16                22.000  174.9 TF/s     22.1%"
  echo "attn fwd, wgmma              B16 T1024 H32 D64 bf16                 0.3600  190.8 TF/s     23.9%"
  echo "attn bwd, warp-spec dK/dV    B16 T1024 H32 D64 bf16                 0.9500  180.8 TF/s     22.6%"
  echo "attn bwd, warp-spec dQ       B16 T1024 H32 D64 bf16                 0.9200  186.7 TF/s     23.4%"
  echo "attn bwd, warp-spec 32q both B16 T1024 H32 D64 bf16                 0.8800  195.2 TF/s     24.4%"
  echo "attn bwd, warp-spec bulk dQ  B16 T1024 H32 D64 bf16                 0.8100  212.1 TF/s     26.5%"
  echo "attn bwd, 2-consumer ws      B16 T1024 H32 D64 bf16                 0.8300  207.0 TF/s     25.9%"
  echo "attention fwd, 16x T         B1 T16384 H32 D64 bf16                 2.6000  422.9 TF/s     52.8%"
  echo "attn fwd, 1-wg wgmma, 16x T  B1 T16384 H32 D64 bf16                 4.4000  249.9 TF/s     31.3%"
  if [[ -n ${FAKE_BENCH_ABORT:-} ]]; then
    echo "trident-bench: CUDA error an illegal instruction was encountered" >&2
    exit 134
  fi
  echo "attn fwd, wgmma              B8 T1024 H16 D128 bf16                 0.2500  137.4 TF/s     18.0%"
  echo "attention bwd (causal)       B8 T1024 H16 D128 bf16                 0.4000  214.7 TF/s     27.5%"
  echo "attn bwd, 2-consumer ws      B8 T1024 H16 D128 bf16                 0.3500  245.4 TF/s     31.5%"
  echo "peaks measured in this run: device copy 3900 GB/s (read + write), bf16 GEMM 780.0 TFLOP/s"
  echo "fastest attention tiles, D64: defaults"
  echo "fastest attention tiles, D128: ${FAKE_BENCH_D128:-TRIDENT_ATTN_FWD_DB=1 TRIDENT_ATTN_BWD_DB=1}"
  echo "faster opt-in kernels: ${FAKE_BENCH_OPT_INS:-defaults}"
  exit 0
fi
if [[ $1 == --generate ]]; then
  echo "prefill: 8 x 512 tokens in 10.0 ms: 409600 tokens/s"
  echo "decode: 8 x 128 tokens in 100.0 ms: 10240 tokens/s"
  [[ -n ${FAKE_BENCH_GEN_FAIL:-} ]] && { echo "trident-bench: CUDA error in sample_logits"; exit 3; }
  echo "sampled decode: 9000 tokens/s on the device, 8000 on the host"
  exit 0
fi
[[ -n ${FAKE_BENCH_FAIL:-} && $* == *"$FAKE_BENCH_FAIL"* ]] && { echo "fake failure"; exit 3; }
[[ -n ${FAKE_BENCH_TRAIN_SLEEP:-} ]] && sleep "$FAKE_BENCH_TRAIN_SLEEP"
# A process left running (a stray daemon of a step): it must not hold the script's output open.
[[ -n ${FAKE_BENCH_ORPHAN:-} ]] && (setsid sleep 40 >/dev/null 2>&1 &)
[[ $* == *--bench-no-profile* ]] || echo "op  ms  share"
echo "step time: 100.0 ms | tokens per second: 81920.0 | model TFLOP/s: 400.0000 | MFU: 40.4%"
EOF
chmod +x "$fake"

fail() {  # with the end of the newest gpu-check log, so that a failure seen once can be read
  echo "FAIL: $*"
  local last
  last=$(ls -t "$work"/*.log 2>/dev/null | head -n 1)
  [[ -n $last ]] && { echo "---- the end of $last:"; tail -n 40 "$last"; }
  exit 1
}
run_check() {  # run_check <out dir>: gpu-check with the stand-in, no tests, ncu or generation
  OUT=$1 TRIDENT_BUILD_DIR=$work/build GPU_CHECK_SKIP_TESTS=1 GPU_CHECK_NCU=0 GPU_CHECK_GENERATE=0 \
    FAKE_BENCH_CALLS=$work/calls GPU_CHECK_WITHOUT_GPU=1 bash "$repo/tools/gpu-check.sh" >"$1.log" 2>&1
}

: >"$work/calls"
run_check "$work/ok"
rc=$?
((rc == 0)) || { tail -20 "$work/ok.log"; fail "gpu-check exited $rc"; }
calls=$work/calls
train() { grep -- "--config $repo/configs/$1.yaml" "$calls" | grep -- "$2"; }
for m in gpt2-124m:16 gpt2-345m:16 gpt2-1.3b:8; do
  for dt in bf16 fp16; do
    n=$(train "${m%%:*}" "--$dt --micro-batch-size ${m##*:} --global-batch-size ${m##*:} " | grep -cE -- "--bench-no-profile( --initial-loss-scale 4096)? \| $")
    ((n == 1)) || fail "${m%%:*} $dt: $n default-tile runs, expected 1"
  done
done
tiles="TRIDENT_ATTN_BWD_DB=1 TRIDENT_ATTN_FWD_DB=1 "
n=$(train gpt2-1.3b "--bf16 --micro-batch-size 8 --global-batch-size 8 " | grep -c -- "| $tiles$")
((n == 1)) || fail "gpt2-1.3b with the fastest tiles: $n runs, expected 1"
n=$(train gpt2-1.3b "--micro-batch-size 8 --global-batch-size 64 " | grep -c -- "| $tiles$")
((n == 1)) || fail "gpt2-1.3b with 8 micro-batches a step and the tiles: $n runs, expected 1"
n=$(grep -c "TRIDENT_ATTN" "$calls")
((n == 2)) || fail "$n runs with attention tiles set, expected 2 (they leaked, or D64 got some)"
grep -q "^gpt2-1.3b+tuned    bf16     8      100.0      81920.0" "$work/ok.log" || fail "no gpt2-1.3b+tuned row"
grep -q "^gpt2-1.3b x8+tuned bf16     8" "$work/ok.log" || fail "no gpt2-1.3b x8 row"
grep -q "^result: OK" "$work/ok.log" || fail "no 'result: OK'"
! grep -q "UNVERIFIED" "$work/ok.log" || fail "tiles marked unverified without a failed test"
grep -q "trident-bench --kernels (time limit 180s, 60s a row)" "$work/ok.log" || fail "the kernel table's time limit is not 180 s"
grep -q "^targets (issue 7):" "$work/ok.log" || fail "no targets block"
grep -q "^  memory-bound kernels >= 80% of the copy rate: layernorm fwd 71.4% (no); gelu bwd 91.6% (yes)$" \
  "$work/ok.log" || fail "the memory-bound targets are not read off the kernel table"
grep -q "^    (beside it) layernorm fwd with its next rows in registers (TRIDENT_LN_FWD_RING=0): 78.6%$" \
  "$work/ok.log" || fail "no line for the register-walking LayerNorm"
grep -q "^  causal attention fwd+bwd, head dim 64, T 1024: 117.7 TFLOP/s (target ~280: no)$" "$work/ok.log" ||
  fail "the attention target is not read off the kernel table"
grep -q "^    (beside it) head dim 64, T 4096: 157.7 TFLOP/s$" "$work/ok.log" || fail "no T 4096 attention line"
grep -q "^    (beside it) head dim 64, T 16384: 174.9 TFLOP/s$" "$work/ok.log" || fail "no T 16384 attention line"
grep -q "^    (beside it) head dim 64 with dropout 0.1: 3.0653 ms, 1.50x the 2.0435 ms without " "$work/ok.log" ||
  fail "no attention dropout line"
grep -q "^    (beside it) ... the forward alone: drawn 0.6000 / drawn and saved - / drawn ahead and read 0.4000 ms against 0.3300 ms without dropout$" \
  "$work/ok.log" || fail "no line for the forward with each way of the dropout mask"
grep -q "^    (beside it) head dim 64 backward with dQ added by the dK/dV kernel (TRIDENT_ATTN_BWD_WGMMA=1 TRIDENT_ATTN_BWD_ATOMIC=1): 0.9000 ms against the default's 1.0690 ms$" \
  "$work/ok.log" || fail "no line for the atomic-dQ backward"
grep -q "^    (beside it) head dim 64 forward with two warpgroups a block (TRIDENT_ATTN_FWD_WG=2): 0.3000 ms against the default's 0.3300 ms$" \
  "$work/ok.log" || fail "no line for the two-warpgroup forward"
grep -q "^    (beside it) head dim 64 backward with two warpgroups a block (.*): 1.0300 / 1.0100 / - / 0.8500 ms against the default's 1.0690 ms$" \
  "$work/ok.log" || fail "no line for the two-warpgroup backward"
grep -q "^    (beside it) head dim 64 forward: the one-warpgroup wgmma kernel (TRIDENT_ATTN_FWD_WS=0) 0.3600 ms, the warp-specialized one with 128 keys a stage - ms, against the default's 0.3300 ms$" \
  "$work/ok.log" || fail "no line for the forward kernel the warp-specialized default replaced"
grep -q "^    (beside it) head dim 64 forward at T 16384: 422.9 TFLOP/s (the one-warpgroup wgmma kernel: 249.9 TFLOP/s)$" \
  "$work/ok.log" || fail "no line for the forward at T 16384"
grep -q "^    (beside it) head dim 64 backward with the warp-specialized dK/dV kernel (TRIDENT_ATTN_BWD_WS=1) / dQ kernel (TRIDENT_ATTN_DQ_WS=1) / both: 0.9500 / 0.9200 / - ms; the dK/dV kernel by 32-query halves (TRIDENT_ATTN_DKDV_BQ=32) alone / with the dQ kernel: - / 0.8800 ms; with dQ by bulk adds (TRIDENT_ATTN_BWD_ATOMIC=1): 0.8100 ms; against the default's 1.0690 ms$" \
  "$work/ok.log" || fail "no line for the warp-specialized backward kernels"
grep -q "^    (beside it) backward with the two-consumer dK/dV kernel (TRIDENT_ATTN_BWD_WS=1 TRIDENT_ATTN_BWD_WG=2 TRIDENT_ATTN_DQ_WS=1): head dim 64 0.8300 ms, with dQ by bulk adds instead (TRIDENT_ATTN_BWD_ATOMIC=1, no DQ_WS) - ms, against the default's 1.0690 ms; head dim 128 0.3500 ms against 0.4000 ms$" \
  "$work/ok.log" || fail "no line for the two-consumer dK/dV kernel"
n=$(grep -c "^  gpt2-1.3b bf16 MFU, one GPU, one micro-batch a step: 40.4% (target 50%: no)$" "$work/ok.log")
((n == 1)) || fail "$n MFU target lines, expected 1 (the default-tile gpt2-1.3b bf16 row only)"
echo "ok: default, tuned and accumulating runs as expected; the targets are read off the tables"

: >"$work/calls"
# A failed variant test (a ctest log left where the skipped test step would write it) marks
# the tuned figure as unverified.
mkdir -p "$work/bad"
echo "42/138 Test #42: CudaAttention/CudaAttention.TunedVariantsMatchCpu/bf16 ...***Failed  1.2 sec" \
  >"$work/bad/ctest.log"
FAKE_BENCH_FAIL="gpt2-345m.yaml --device cuda --fp16" run_check "$work/bad"
rc=$?
((rc == 1)) || fail "a failing training run: gpu-check exited $rc, expected 1"
grep -q "^gpt2-345m          fp16    16   FAILED (rc 3)" "$work/bad.log" || fail "no FAILED row for gpt2-345m fp16"
grep -q "^result: FAILED: training gpt2-345m fp16 (rc 3)" "$work/bad.log" || fail "no 'result: FAILED' naming the run"
grep -q "gpt2-1.3b+tuned: TRIDENT_ATTN_FWD_DB=1 TRIDENT_ATTN_BWD_DB=1 (UNVERIFIED" "$work/bad.log" ||
  fail "tiles whose GPU test failed are not marked unverified"
echo "ok: a failing run fails the check and is named; tiles that failed their test are marked"

: >"$work/calls"
# The kernel table dies before its "fastest attention tiles" lines: the rows before stay in
# the summary, the step fails, and nothing trains with tiles.
FAKE_BENCH_ABORT=1 run_check "$work/abort"
rc=$?
((rc == 1)) || fail "an aborted kernel table: gpu-check exited $rc, expected 1"
grep -q "^result: FAILED: trident-bench --kernels (rc 134)" "$work/abort.log" || fail "no 'result: FAILED' naming the bench"
# (grep -q on a process substitution: in a pipe under pipefail, grep's early exit could
# end sed with SIGPIPE once the summary outgrows sed's output buffer.)
grep -q "^attention fwd (causal) .* 68.7 TF/s" <(sed -n '/summary/,$p' "$work/abort.log") ||
  fail "the rows before the abort are not in the summary"
n=$(grep -c "TRIDENT_ATTN" "$calls")
((n == 0)) || fail "$n runs with attention tiles set after the kernel table died, expected 0"
echo "ok: a kernel table cut short keeps its rows; nothing trains with tiles it did not choose"

: >"$work/calls"
# A kernel table that dies in a row with --kernels-progress naming it is rerun past that row:
# the rows after it are in the summary, the death is a failed step naming the row, and the
# rerun's choices (made from the rows --kernels-results kept) are trained with.
# Nsight Compute (a stand-in that logs its command) replays the attention sections without
# the row that died.
mkdir -p "$work/bin"
printf '#!/usr/bin/env bash\necho "ncu $*" >>"$FAKE_BENCH_CALLS"\n' >"$work/bin/ncu"
chmod +x "$work/bin/ncu"
mkdir -p "$work/crash"
OUT=$work/crash TRIDENT_BUILD_DIR=$work/build GPU_CHECK_SKIP_TESTS=1 GPU_CHECK_GENERATE=0 PATH="$work/bin:$PATH" \
  FAKE_BENCH_CALLS=$work/calls GPU_CHECK_WITHOUT_GPU=1 FAKE_BENCH_CRASH=row bash "$repo/tools/gpu-check.sh" \
  >"$work/crash.log" 2>&1
rc=$?
((rc == 1)) || fail "a kernel table that died: gpu-check exited $rc, expected 1"
grep -q "died in row 7 (attention D64: attn fwd, wgmma): rerun past it" "$work/crash.log" || fail "no rerun past the row it died in"
n=$(grep -c -- "--kernels --kernels-progress .* --kernels-results .* --kernels-resume 7 |" "$calls")
((n == 1)) || fail "$n reruns with --kernels-resume 7, expected 1"
grep -q "^result: FAILED: trident-bench --kernels: died in row 7 (attention D64: attn fwd, wgmma), rc 134$" "$work/crash.log" ||
  fail "the death is not a failed step naming the row"
grep -q "^attn bwd, 2-consumer ws .* B8 T1024 H16 D128" <(sed -n '/summary/,$p' "$work/crash.log") ||
  fail "the rows after the row it died in are not in the summary"
n=$(grep -c "| TRIDENT_ATTN_BWD_WS=1 $" "$calls")
((n == 2)) || fail "$n runs with the rerun's choice of tiles, expected 2 (gpt2-1.3b+tuned and x8)"
n=$(grep "^ncu " "$calls" | grep -c -- "--kernels-once --kernels-skip attention D64: attn fwd, wgmma$")
((n == 5)) || fail "$n of the ncu runs leave out the row that died, expected 5: $(grep "^ncu " "$calls" | head -2)"
# Dying in the same row again (no further on), or outside every row: no rerun past it.
for mode in always outside; do
  : >"$calls"
  FAKE_BENCH_CRASH=$mode run_check "$work/crash-$mode"
  rc=$?
  ((rc == 1)) || fail "a kernel table that died ($mode): gpu-check exited $rc, expected 1"
  n=$(grep -c -- "^--kernels " "$calls")
  want=$([[ $mode == always ]] && echo 2 || echo 1)
  ((n == want)) || fail "a kernel table that died ($mode): $n runs, expected $want"
done
echo "ok: a kernel table that dies in a row is rerun past it, once a row, never outside one"

: >"$work/calls"
# A row that hangs (a kernel that never ends) is killed once it has run GPU_CHECK_ROW_S, and
# the table is rerun past it, as past a death.
start=$(date +%s)
GPU_CHECK_ROW_S=2 FAKE_BENCH_CRASH=hang run_check "$work/hang"
rc=$?
took=$(($(date +%s) - start))
((rc == 1)) || fail "a kernel table that hung: gpu-check exited $rc, expected 1"
((took < 60)) || fail "a kernel table that hung: gpu-check took $took s"
grep -q "hung (over 2 s) in row 7 (attention D64: attn fwd, wgmma): rerun past it" "$work/hang.log" || fail "no rerun past the hung row"
grep -q "^result: FAILED: trident-bench --kernels: hung (over 2 s) in row 7 (attention D64: attn fwd, wgmma), rc 125$" "$work/hang.log" ||
  fail "the hang is not a failed step naming the row"
grep -q "^attn bwd, 2-consumer ws .* B8 T1024 H16 D128" <(sed -n '/summary/,$p' "$work/hang.log") ||
  fail "the rows after the hung row are not in the summary"
echo "ok: a row that hangs costs GPU_CHECK_ROW_S and is rerun past ($took s in all)"

: >"$work/calls"
# The whole run ends by GPU_CHECK_DEADLINE_S: each step's limit is cut to the time left (15 s
# kept for the summary), and a step with under 5 s left does not start.
start=$(date +%s)
GPU_CHECK_DEADLINE_S=24 FAKE_BENCH_TRAIN_SLEEP=300 run_check "$work/deadline"
rc=$?
took=$(($(date +%s) - start))
((rc == 1)) || fail "past the deadline: gpu-check exited $rc, expected 1"
((took <= 24)) || fail "past the deadline: gpu-check took $took s, more than GPU_CHECK_DEADLINE_S 24"
grep -q "^gpt2-1.3b          bf16     8   FAILED (rc 124)" "$work/deadline.log" || fail "past the deadline: no row cut short"
grep -q "^result: FAILED: training gpt2-1.3b bf16 (rc 124)" "$work/deadline.log" || fail "past the deadline: no failed step"
echo "ok: the run ends by its deadline with its summary ($took s)"

: >"$work/calls"
# A TERM (the device tool at its limit) stops the step in flight and prints the summary of
# what ran; the step's log is kept.
mkdir -p "$work/term"
# The step's sleep has a length of its own (this test's pid in it), so that looking for it
# finds no other process: an earlier case's, another test's, a shell's command line.
term_sleep=300.$$
OUT=$work/term TRIDENT_BUILD_DIR=$work/build GPU_CHECK_SKIP_TESTS=1 GPU_CHECK_NCU=0 GPU_CHECK_GENERATE=0 \
  FAKE_BENCH_CALLS=$work/calls GPU_CHECK_WITHOUT_GPU=1 FAKE_BENCH_TRAIN_SLEEP=$term_sleep \
  bash "$repo/tools/gpu-check.sh" >"$work/term.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q -- "--config" "$calls" && break; sleep 0.2; done
start=$(date +%s)
kill -TERM "$pid"
wait "$pid"
rc=$?
took=$(($(date +%s) - start))
((rc == 1)) || fail "stopped by TERM: gpu-check exited $rc, expected 1"
((took < 10)) || fail "stopped by TERM: gpu-check took $took s to end"
grep -q "^result: FAILED: .*stopped by SIGTERM at " "$work/term.log" || fail "stopped by TERM: no summary naming the signal"
grep -q "^attention fwd (causal) .* 68.7 TF/s" <(sed -n '/summary/,$p' "$work/term.log") ||
  fail "stopped by TERM: the kernel table is not in the summary"
grep -q "^==== train-gpt2-1.3b-bf16.log ====" "$work/term/training.log" || fail "stopped by TERM: the step's log is lost"
# (the step's own child got the TERM too, from timeout: a loaded machine may take a moment to
# end it, so it has 10 s)
for _ in $(seq 50); do pgrep -f "sleep $term_sleep" >/dev/null || break; sleep 0.2; done
! pgrep -f "sleep $term_sleep" >/dev/null || fail "stopped by TERM: the step in flight still runs"
grep -q "result: FAILED" "$work/term/gpu-check.log" || fail "stopped by TERM: the summary is not in gpu-check.log"
echo "ok: a TERM ends the step in flight and prints the summary ($took s)"

: >"$work/calls"
# A step that leaves a process running does not keep the script from ending.
start=$(date +%s)
GPU_CHECK_CONFIGS=gpt2-124m:16 GPU_CHECK_DTYPES=bf16 FAKE_BENCH_ORPHAN=1 run_check "$work/orphan"
took=$(($(date +%s) - start))
((took < 30)) || fail "a process left running by a step kept gpu-check for $took s"
grep -q "^result: " "$work/orphan.log" || fail "a process left running: no summary"
echo "ok: a process left running by a step does not hold the script ($took s)"

: >"$work/calls"
# The generation bench's lines printed before it failed stay in the summary.
OUT=$work/gen TRIDENT_BUILD_DIR=$work/build GPU_CHECK_SKIP_TESTS=1 GPU_CHECK_NCU=0 GPU_CHECK_CONFIGS=none \
  FAKE_BENCH_CALLS=$work/calls GPU_CHECK_WITHOUT_GPU=1 FAKE_BENCH_GEN_FAIL=1 bash "$repo/tools/gpu-check.sh" \
  >"$work/gen.log" 2>&1
grep -q "^generation bench .*: prefill: 8 x 512 tokens in 10.0 ms: 409600 tokens/s;decode: .*; FAILED (rc 3): trident-bench: CUDA error in sample_logits$" \
  "$work/gen.log" || fail "the generation bench's lines before its failure are lost"
echo "ok: a failing generation bench keeps the lines it printed"

# kept_out <name> <ctest.log line> <D128 tiles> <variable> <test>: the kernel table found
# <tiles> fastest for D128, but <test> did not pass: no training run has <variable> set, and
# the summary names the tiles left out and says the test's rows are unverified.
kept_out() {
  local name=$1 line=$2 tiles=$3 var=$4 test=$5 n
  : >"$work/calls"
  mkdir -p "$work/$name"
  echo "$line" >"$work/$name/ctest.log"
  FAKE_BENCH_D128="$tiles" run_check "$work/$name"
  n=$(grep -c "$var" "$work/calls")
  ((n == 0)) || fail "$name: $n runs with $var set after $test did not pass"
  grep -qF "gpt2-1.3b: not trained with $tiles: CudaAttention.$test did not pass" "$work/$name.log" ||
    fail "$name: the tiles left out are not named so"
  grep -q "^UNVERIFIED: CudaAttention.$test did not pass" "$work/$name.log" ||
    fail "$name: the kernel table does not say that the rows are unverified"
}
# The wgmma test crashed; then the atomic-dQ wgmma test failed while the other passed.
kept_out wgmma "57/138 Test #57: Dtypes/CudaAttention.WgmmaMatchesCpu/bf16 ...Subprocess aborted***Exception:   0.9 sec" \
  "TRIDENT_ATTN_FWD_WGMMA=1 TRIDENT_ATTN_BWD_DB=1" WGMMA WgmmaMatchesCpu
echo "ok: a wgmma test that did not pass keeps the wgmma kernels out of training"
kept_out atomic "58/138 Test #58: Dtypes/CudaAttention.WgmmaAtomicDqMatchesCpu/bf16 ...***Failed   0.9 sec" \
  "TRIDENT_ATTN_BWD_WGMMA=1 TRIDENT_ATTN_BWD_ATOMIC=1" ATOMIC WgmmaAtomicDqMatchesCpu
echo "ok: an atomic-dQ test that did not pass keeps that backward out of training"
kept_out two_wg "59/138 Test #59: Dtypes/CudaAttention.WgmmaTwoWarpgroupsMatchCpu/bf16 ...***Failed   0.9 sec" \
  "TRIDENT_ATTN_BWD_WGMMA=1 TRIDENT_ATTN_BWD_WG=2" BWD_WG= WgmmaTwoWarpgroupsMatchCpu
kept_out two_wg_fwd "59/138 Test #59: Dtypes/CudaAttention.WgmmaTwoWarpgroupsMatchCpu/bf16 ...***Failed   0.9 sec" \
  "TRIDENT_ATTN_FWD_WGMMA=1 TRIDENT_ATTN_FWD_WG=2" FWD_WG= WgmmaTwoWarpgroupsMatchCpu
echo "ok: a two-warpgroup test that did not pass keeps those blocks (forward or backward) out of training"
kept_out warp_specialized "60/138 Test #60: Dtypes/CudaAttention.WgmmaWarpSpecializedMatchesCpu/bf16 ...***Failed   0.9 sec" \
  "TRIDENT_ATTN_FWD_WS=1" FWD_WS= WgmmaWarpSpecializedMatchesCpu
kept_out warp_specialized_dkdv "60/138 Test #60: Dtypes/CudaAttention.WgmmaWarpSpecializedMatchesCpu/bf16 ...***Failed   0.9 sec" \
  "TRIDENT_ATTN_BWD_WS=1" BWD_WS= WgmmaWarpSpecializedMatchesCpu
kept_out warp_specialized_dq "60/138 Test #60: Dtypes/CudaAttention.WgmmaWarpSpecializedMatchesCpu/bf16 ...***Failed   0.9 sec" \
  "TRIDENT_ATTN_DQ_WS=1" DQ_WS= WgmmaWarpSpecializedMatchesCpu
echo "ok: a warp-specialized kernels' test that did not pass keeps them out of training"

: >"$work/calls"
# Two opt-in kernels beat the rows they would replace (the register-walking LayerNorm and a
# switch without a GPU test of its own), and the LayerNorm's GPU test failed: every config
# trains once more with the other switch (gpt2-1.3b with its attention tiles too), never
# with the walking LayerNorm, and the summary says why.
mkdir -p "$work/optin"
echo "12/138 Test #12: Dtypes/ResidualLayerNorm.RowsPerWarpSameBits/bf16 ...***Failed  0.3 sec" \
  >"$work/optin/ctest.log"
FAKE_BENCH_OPT_INS="TRIDENT_LN_FWD_RING=0 TRIDENT_LN_OTHER=1" run_check "$work/optin"
for m in gpt2-124m:16 gpt2-345m:16; do
  n=$(train "${m%%:*}" "--bf16 --micro-batch-size ${m##*:} --global-batch-size ${m##*:} " |
    grep -c -- "| TRIDENT_LN_OTHER=1 $")
  ((n == 1)) || fail "${m%%:*}: $n runs with the faster opt-in kernel alone, expected 1"
done
n=$(train gpt2-1.3b "--bf16 --micro-batch-size 8 --global-batch-size 8 " |
  grep -c -- "| TRIDENT_ATTN_BWD_DB=1 TRIDENT_ATTN_FWD_DB=1 TRIDENT_LN_OTHER=1 $")
((n == 1)) || fail "gpt2-1.3b: $n runs with its tiles and the opt-in kernel, expected 1"
n=$(grep -c "TRIDENT_LN_FWD_RING" "$calls")
((n == 0)) || fail "$n runs with the walking LayerNorm after its GPU test failed"
grep -q "not trained with TRIDENT_LN_FWD_RING=0: its GPU test did not pass" "$work/optin.log" ||
  fail "the opt-in left out is not named so"
grep -q "gpt2-124m+tuned: TRIDENT_LN_OTHER=1$" "$work/optin.log" || fail "no gpt2-124m+tuned line"
echo "ok: faster opt-in kernels train once more, unless their GPU test failed"

: >"$work/calls"
# Past the time budget from the start (the tests and the table ran to their limits).
GPU_CHECK_BUDGET_S=-1 run_check "$work/late"
rc=$?
((rc == 1)) || fail "past the budget: gpu-check exited $rc, expected 1 (rows skipped)"
grep -q "trident-bench --kernels (time limit 60s, 60s a row)" "$work/late.log" || fail "past the budget: the table's limit is not 60 s"
n=$(grep -c -- "--config" "$calls")
((n == 1)) || fail "past the budget: $n training runs, expected 1"
n=$(train gpt2-1.3b "--bf16 --micro-batch-size 8 --global-batch-size 8 " | wc -l)
((n == 1)) || fail "past the budget: gpt2-1.3b bf16 did not train"
grep -q "^gpt2-1.3b          bf16     8      100.0" "$work/late.log" || fail "past the budget: no gpt2-1.3b bf16 row"
grep -q "^gpt2-1.3b          fp16     8   skipped: past the time budget" "$work/late.log" ||
  fail "past the budget: gpt2-1.3b fp16 not skipped"
echo "ok: past the time budget, the largest model still trains once in bf16"
# Without a GPU (where nvidia-smi lists none) the script stops at once: one line, exit 3,
# no build and no logs left in the repository.
if ! compgen -G "/dev/nvidia[0-9]*" >/dev/null && [[ -z $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) ]]; then
  mkdir -p "$work/nogpu"
  OUT=$work/nogpu TRIDENT_BUILD_DIR=$work/build bash "$repo/tools/gpu-check.sh" >"$work/nogpu.out" 2>"$work/nogpu.err"
  rc=$?
  if [[ $rc -eq 3 && ! -s $work/nogpu.out && $(cat "$work/nogpu.err") == "gpu-check: no GPU visible (no /dev/nvidia*, nvidia-smi lists none): nothing to check on this machine" &&
        -z $(ls -A "$work/nogpu") ]]; then
    echo "ok: without a GPU: one line, exit 3, nothing written"
  else
    fail "without a GPU: rc $rc, stdout '$(head -c 200 "$work/nogpu.out")', stderr '$(cat "$work/nogpu.err")'"
  fi
fi
