#!/usr/bin/env bash
# Megatron-DeepSpeed's --log-optimizer-states-to-tensorboard on a tiny model, CPU:
#  - the 12 "optimizer/<name>" scalars (and their "vs tokens" twins, at the consumed tokens)
#    at each --tensorboard-log-interval, equal to the statistics computed in double from
#    the Adam state and weights that the same iteration's checkpoint holds (bf16: the fp32
#    master weights);
#  - under mpirun (4 ranks: tp 2 x dp 2 with ZeRO-1 and without, and tp 2 x pp 2), the same
#    values as the serial run: every parameter counted once whatever the layout (the state
#    sharded over the data-parallel ranks or replicated there);
#  - without the flag, no optimizer/ scalars.
# Usage: optimizer_states.sh TRAIN REPO [MPIRUN]
set -uo pipefail
train=$1 repo=$2 mpirun=${3:-}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok $*"; }
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --mock-data --train-iters 6 --lr-warmup-iters 1
      --log-interval 3 --eval-iters 0 --tensorboard-log-interval 3 --log-optimizer-states-to-tensorboard)

events() {  # <tensorboard dir> <out>: the scalars as "tag step value" lines
  python3 "$repo/tests/unit/train/read_tfevents.py" "$1"/events.out.tfevents.* | python3 -c '
import struct, sys
for line in sys.stdin:
    f = line.split()
    if f[0] == "scalar" and f[2] != "-":
        print(bytes.fromhex(f[2]).decode().replace(" ", "_"), f[1], struct.unpack("<f", struct.pack("<I", int(f[3], 16)))[0])
' >"$2"
}

# The run's scalars at iterations 3 and 6 against its checkpoint of iteration 6.
check_against_checkpoint() {  # <tensorboard dir> <checkpoint dir> <label>
  events "$1" "$tmp/$3.events"
  python3 - "$tmp/$3.events" "$2" "$repo/tests/e2e" <<'PY'
import glob, math, os, struct, sys
sys.path.insert(0, sys.argv[3])
from ckpt_tools_check import read_st

tb = {}
for line in open(sys.argv[1]):
    tag, step, value = line.split()
    tb[(tag, int(step))] = float(value)
names = ["variance_l2", "variance_sqrt_l2", "momentum_l2", "weight_l2", "variance_l1", "variance_sqrt_l1",
         "momentum_l1", "weight_l1", "variance_abs_max", "variance_sqrt_abs_max", "momentum_abs_max",
         "weight_abs_max"]
files = glob.glob(os.path.join(sys.argv[2], "iter_0000006", "*", "optim_*.safetensors"))
if len(files) != 1:
    sys.exit(f"optimizer files: {files}")
state, _ = read_st(files[0])
by_kind = {"master": [], "exp_avg": [], "exp_avg_sq": []}
for key, (dt, shape, values, raw) in state.items():
    by_kind[key.split("|")[1]].extend(values)
w, m, v = by_kind["master"], by_kind["exp_avg"], by_kind["exp_avg_sq"]
want = {
    "variance_l2": math.sqrt(math.fsum(x * x for x in v)),
    "variance_sqrt_l2": math.sqrt(math.fsum(v)),
    "momentum_l2": math.sqrt(math.fsum(x * x for x in m)),
    "weight_l2": math.sqrt(math.fsum(x * x for x in w)),
    "variance_l1": math.fsum(v),
    "variance_sqrt_l1": math.fsum(math.sqrt(x) for x in v),
    "momentum_l1": math.fsum(abs(x) for x in m),
    "weight_l1": math.fsum(abs(x) for x in w),
    "variance_abs_max": max(v),
    "variance_sqrt_abs_max": math.sqrt(max(v)),
    "momentum_abs_max": max(abs(x) for x in m),
    "weight_abs_max": max(abs(x) for x in w),
}
tokens = 6 * 8 * 64  # iterations x global batch x sequence
worst = 0.0
for n in names:
    tag = "optimizer/" + n
    for key in [(tag, 3), (tag, 6), (tag + "_vs_tokens", 3 * 8 * 64), (tag + "_vs_tokens", tokens)]:
        if key not in tb:
            sys.exit(f"no scalar {key}")
    if tb[(tag, 6)] != tb[(tag + "_vs_tokens", tokens)]:
        sys.exit(f"{tag}: {tb[(tag, 6)]} at the iteration, {tb[(tag + '_vs_tokens', tokens)]} against tokens")
    worst = max(worst, abs(tb[(tag, 6)] - want[n]) / want[n])
    if abs(tb[(tag, 6)] - want[n]) > 2e-6 * want[n]:
        sys.exit(f"{tag}: {tb[(tag, 6)]}, the checkpoint's state gives {want[n]}")
if tb[("optimizer/momentum_l2", 3)] == tb[("optimizer/momentum_l2", 6)]:
    sys.exit("momentum_l2 did not change between iterations 3 and 6")
extra = sorted({t for t, _ in tb if t.startswith("optimizer/")} - {"optimizer/" + n for n in names}
               - {"optimizer/" + n + "_vs_tokens" for n in names})
if extra:
    sys.exit(f"unexpected tags {extra}")
print(f"12 statistics x 2 axes at iterations 3 and 6; at 6 within {worst:.1e} of the checkpoint's "
      f"(momentum_l2 {tb[('optimizer/momentum_l2', 6)]:.4g}, weight_abs_max {tb[('optimizer/weight_abs_max', 6)]:.4g})")
PY
}

for dtype in bf16 fp32; do
  dtype_flag=()
  [[ $dtype == bf16 ]] && dtype_flag=(--bf16)
  "$train" "${args[@]}" "${dtype_flag[@]}" --tensorboard-dir "$tmp/tb-$dtype" --save "$tmp/ckpt-$dtype" --save-interval 6 \
    >"$tmp/$dtype.log" 2>&1 || { cat "$tmp/$dtype.log"; fail "the serial $dtype run"; continue; }
  if found=$(check_against_checkpoint "$tmp/tb-$dtype" "$tmp/ckpt-$dtype" $dtype); then
    ok "$dtype: $found"
  else
    fail "$dtype: $found"
  fi
done

# Without the flag, no optimizer/ scalars.
without=("${args[@]}")
unset 'without[${#without[@]}-1]'  # the flag is the last word of args
"$train" "${without[@]}" --tensorboard-dir "$tmp/tb-without" >"$tmp/without.log" 2>&1 || fail "the run without the flag"
events "$tmp/tb-without" "$tmp/without.events"
if [[ -s $tmp/without.events ]] && ! grep -q '^optimizer/' "$tmp/without.events"; then
  ok "without the flag: $(wc -l <"$tmp/without.events") scalars, none optimizer/"
else
  fail "without the flag: $(grep -c '^optimizer/' "$tmp/without.events") optimizer/ scalars"
fi

if [[ -n $mpirun ]]; then
  events "$tmp/tb-fp32" "$tmp/serial.events"
  for layout in "--tensor-model-parallel-size 2 --zero-stage 1" "--tensor-model-parallel-size 2 --zero-stage 0" \
                "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"; do
    dir="$tmp/tb-$(echo "$layout" | tr -dc 'a-z0-9')"
    # shellcheck disable=SC2086
    "$mpirun" --oversubscribe -np 4 "$train" "${args[@]}" $layout --tensorboard-dir "$dir" \
      >"$tmp/mpi.log" 2>&1 || { cat "$tmp/mpi.log"; fail "4 ranks, $layout"; continue; }
    events "$dir" "$tmp/mpi.events"
    if found=$(python3 - "$tmp/serial.events" "$tmp/mpi.events" <<'PY'
import sys
def load(path):
    return {(t, int(s)): float(v) for t, s, v in (l.split() for l in open(path)) if t.startswith("optimizer/")}
serial, mpi = load(sys.argv[1]), load(sys.argv[2])
if set(serial) != set(mpi) or len(serial) != 48:
    sys.exit(f"{len(serial)} serial scalars, {len(mpi)} here")
worst = max(abs(mpi[k] - serial[k]) / serial[k] for k in serial)
if worst > 1e-4:
    k = max(serial, key=lambda k: abs(mpi[k] - serial[k]) / serial[k])
    sys.exit(f"{k}: {mpi[k]} against the serial run's {serial[k]}")
print(f"the serial run's 48 scalars within {worst:.1e}")
PY
    ); then ok "4 ranks, $layout: $found"; else fail "4 ranks, $layout: $found"; fi
  done
fi
echo "optimizer-state checks failing: $fails"
[[ $fails -eq 0 ]]
