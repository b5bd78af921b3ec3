#!/usr/bin/env bash
# Megatron's timers (--timing-log-level, --timing-log-option, --log-timers-to-tensorboard) on
# a tiny model, CPU:
#  - level 2 prints Megatron's block after every log line, and its times hold together:
#    forward-backward contains forward-compute and backward-compute, and forward-backward
#    plus optimizer fit in the iteration's elapsed time;
#  - level 1 prints only level-1 timers, level 0 (the default) none;
#  - --log-timers-to-tensorboard writes "<name>-time" scalars (seconds an iteration);
#  - --log-energy without an energy counter (the CPU's): a note;
#  - --log-throughput: Megatron's TFLOP/s/GPU field, its current FLOPs over the iteration time;
#  - with pipeline stages under mpirun (2 ranks, pp 2), the transfers' timers.
# Usage: timers.sh TRAIN REPO [MPIRUN]
set -uo pipefail
train=$1 repo=$2 mpirun=${3:-}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok $*"; }
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --mock-data --train-iters 6 --lr-warmup-iters 1
      --log-interval 3 --eval-iters 0)

# check_block LOG LEVEL: every log line is followed by a block of the level's timers whose
# times hold together. Prints what it found; exits non-zero on a mismatch.
check_block() {
  python3 - "$1" "$2" <<'PY'
import re, sys
lines, level = open(sys.argv[1]).read().split("\n"), int(sys.argv[2])
level2 = {"forward-compute", "backward-compute", "batch-generator"}
blocks = 0
for i, line in enumerate(lines):
    if not line.startswith(" iteration "):
        continue
    elapsed = float(re.search(r"elapsed time per iteration \(ms\): ([0-9.]+)", line).group(1))
    if lines[i + 1] != "(min, max) time across ranks (ms):":
        sys.exit(f"no timer block after: {line[:40]}")
    t, j = {}, i + 2
    while j < len(lines) and lines[j].startswith("    "):
        m = re.fullmatch(r"    ([a-z-]+) \.+: \(([0-9.]+), ([0-9.]+)\)", lines[j])
        if not m or len(lines[j].split(":")[0]) != 52:
            sys.exit(f"not Megatron's format: {lines[j]!r}")
        t[m.group(1)] = (float(m.group(2)), float(m.group(3)))
        j += 1
    blocks += 1
    names = set(t)
    want = {"forward-backward", "optimizer", "optimizer-clip-main-grad", "optimizer-inner-step"}
    if not want <= names:
        sys.exit(f"missing {want - names}")
    if (level == 2) != (level2 <= names) or (level == 1 and names & level2):
        sys.exit(f"level {level} timers: {sorted(names)}")
    fb, opt = t["forward-backward"][1], t["optimizer"][1]
    if level == 2 and fb + 0.02 < t["forward-compute"][1] + t["backward-compute"][1]:
        sys.exit(f"forward-backward {fb} < forward-compute + backward-compute {t['forward-compute'][1] + t['backward-compute'][1]}")
    if fb + opt > elapsed * 1.02 + 0.1:
        sys.exit(f"forward-backward {fb} + optimizer {opt} > elapsed {elapsed}")
if blocks != 2:
    sys.exit(f"{blocks} timer blocks, expected 2")
print(f"2 blocks; the last: forward-backward {fb} ms, optimizer {opt} ms, elapsed {elapsed} ms")
PY
}

"$train" "${args[@]}" --timing-log-level 2 --tensorboard-dir "$tmp/tb" --log-timers-to-tensorboard >"$tmp/l2.log" 2>&1 ||
  { cat "$tmp/l2.log"; fail "the level-2 run"; }
if found=$(check_block "$tmp/l2.log" 2); then ok "level 2: $found"; else fail "level 2: $found"; cat "$tmp/l2.log"; fi
"$train" "${args[@]}" --timing-log-level 1 >"$tmp/l1.log" 2>&1 || { cat "$tmp/l1.log"; fail "the level-1 run"; }
if found=$(check_block "$tmp/l1.log" 1); then ok "level 1: $found"; else fail "level 1: $found"; cat "$tmp/l1.log"; fi
"$train" "${args[@]}" >"$tmp/l0.log" 2>&1 || { cat "$tmp/l0.log"; fail "the level-0 run"; }
if ! grep -q "time across ranks" "$tmp/l0.log" && ! grep -q "note: .*timing" "$tmp/l0.log"; then
  ok "level 0 prints no timers"
else
  fail "level 0 printed timers"; cat "$tmp/l0.log"
fi
"$train" "${args[@]}" --timing-log-level 1 --timing-log-option max >"$tmp/max.log" 2>&1
if grep -qE '^    forward-backward \.+: [0-9]+\.[0-9]{2}$' "$tmp/max.log" && grep -q '^max time across ranks (ms):$' "$tmp/max.log"; then
  ok "--timing-log-option max"
else
  fail "--timing-log-option max"; cat "$tmp/max.log"
fi
"$train" "${args[@]}" --timing-log-option median >"$tmp/bad.log" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "^trident-train: error: --timing-log-option: unknown option 'median'" "$tmp/bad.log" &&
  ok "a bad --timing-log-option: $(cat "$tmp/bad.log")" || { fail "a bad --timing-log-option: rc $rc"; cat "$tmp/bad.log"; }

# TensorBoard: a "<name>-time" scalar an iteration, in seconds, below the iteration's time.
python3 "$repo/tests/unit/train/read_tfevents.py" "$tmp"/tb/* >"$tmp/events.txt"
if found=$(python3 - "$tmp/events.txt" "$tmp/l2.log" <<'PY'
import re, struct, sys
got = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "scalar" and f[2] != "-":
        got.setdefault(bytes.fromhex(f[2]).decode(), {})[int(f[1])] = struct.unpack("<f", struct.pack("<I", int(f[3], 16)))[0]
need = ["forward-backward-time", "forward-compute-time", "backward-compute-time", "optimizer-time"]
for name in need:
    if sorted(got.get(name, {})) != list(range(1, 7)):
        sys.exit(f"{name}: iterations {sorted(got.get(name, {}))}")
slowest = max(float(x) for x in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", open(sys.argv[2]).read()))
fb = got["forward-backward-time"]
# the first iteration is the slowest (allocations); the line of iterations 1-3 averages it
if not all(0 < v < 3 * slowest / 1000 for v in fb.values()):
    sys.exit(f"forward-backward-time {fb} against {slowest} ms")
print(f"{len(got)} tags; forward-backward-time at 6: {fb[6]:.5f} s")
PY
); then ok "TensorBoard: $found"; else fail "TensorBoard: $found"; fi

# --log-energy on the CPU backend (no energy counter): one note, no energy fields, the run ends well.
"$train" "${args[@]}" --log-energy >"$tmp/energy.log" 2>&1
rc=$?
if [[ $rc -eq 0 && $(grep -c '^trident: note: --log-energy: the cpu backend has no energy counter: no energy logged$' "$tmp/energy.log") -eq 1 ]] &&
    ! grep -q 'energy per GPU\|Total training energy' "$tmp/energy.log" && [[ $(grep -c '^ iteration ' "$tmp/energy.log") -eq 2 ]]; then
  ok "--log-energy without a counter: $(grep 'log-energy' "$tmp/energy.log")"
else
  fail "--log-energy on the CPU: rc $rc"; cat "$tmp/energy.log"
fi

# --log-throughput: Megatron's field after the iteration time, its FLOPs (gpt2-tiny: B 8, s 64,
# l 2, h 64, V 512, the causal scores at half) over the line's iteration time; with
# --log-timers-to-tensorboard a "throughput" scalar.
"$train" "${args[@]}" --log-throughput --tensorboard-dir "$tmp/tb-throughput" --log-timers-to-tensorboard \
  >"$tmp/throughput.log" 2>&1 || fail "the --log-throughput run"
python3 "$repo/tests/unit/train/read_tfevents.py" "$tmp"/tb-throughput/* >"$tmp/throughput-events.txt"
if found=$(python3 - "$tmp/throughput.log" "$tmp/throughput-events.txt" <<'PY'
import re, sys
B, s, l, h, V = 8, 64, 2, 64, 512
flops = B * s * (l * (3 * 2 * (h * 3 * h + h * s / 2 * 2 + h * h) + 3 * 2 * h * 4 * h * 2) + 3 * 2 * h * V)
import struct
scalars = {}  # the throughput scalar by iteration, in full (the line rounds to 0.1 TFLOP/s)
for x in open(sys.argv[2]):
    f = x.split()
    if f[0] == "scalar" and f[2] != "-" and bytes.fromhex(f[2]).decode() == "throughput":
        scalars[int(f[1])] = struct.unpack("<f", struct.pack("<I", int(f[3], 16)))[0]
lines = [x for x in open(sys.argv[1]) if x.startswith(" iteration ")]
for line in lines:
    m = re.search(r"iteration +([0-9]+)/.* elapsed time per iteration \(ms\): ([0-9.]+) \| throughput per GPU "
                  r"\(TFLOP/s/GPU\): ([0-9.]+) \| learning rate", line)
    if not m:
        sys.exit(f"no throughput field after the time: {line}")
    want = flops / (float(m.group(2)) / 1e3) / 1e12  # the time is printed to 0.1 ms
    got = scalars.get(int(m.group(1)), -1)
    tolerance = 0.001 + 0.06 / float(m.group(2))  # the time is printed to 0.1 ms
    if abs(got - want) > tolerance * want or m.group(3) != f"{got:.1f}":
        sys.exit(f"iteration {m.group(1)}: {got} TFLOP/s/GPU ({m.group(3)} printed), the time gives {want:.5f}")
if len(lines) != 2:
    sys.exit(f"{len(lines)} lines")
print(f"2 lines, the last: {got:.5f} TFLOP/s/GPU at {m.group(2)} ms, its FLOPs {flops:.6g} an iteration")
PY
); then ok "--log-throughput: $found"; else fail "--log-throughput: $found"; fi

if [[ -n $mpirun ]]; then
  "$mpirun" --oversubscribe -np 2 "$train" "${args[@]}" --pipeline-model-parallel-size 2 --timing-log-level 2 \
    --timing-log-option all >"$tmp/pp.log" 2>&1 || { cat "$tmp/pp.log"; fail "the pp2 run"; }
  if grep -q '^times across ranks (ms):$' "$tmp/pp.log" && grep -q '^  forward-recv:$' "$tmp/pp.log" &&
      grep -q '^  backward-send:$' "$tmp/pp.log" && grep -q '^  embedding-grads-all-reduce:$' "$tmp/pp.log" &&
      [[ $(grep -c '^     rank  1: ' "$tmp/pp.log") -ge 8 ]]; then
    ok "pp 2: the transfers' and the embedding's timers of both ranks"
  else
    fail "pp 2"; cat "$tmp/pp.log"
  fi
fi
echo "timer checks failing: $fails"
[[ $fails -eq 0 ]]
