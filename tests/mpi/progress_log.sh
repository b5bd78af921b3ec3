#!/usr/bin/env bash
# Megatron's --log-progress: a run of 2 ranks saving every 2 iterations to 4, resumed by a job
# with SLURM_JOB_ID 77 to 6, then by one process with --async-save to 8, leave in --save's
# progress.txt the lines Megatron writes: each job's "Starting job", each save's iteration,
# throughputs and FLOPs (Megatron's formula, per iteration 12 B s l h^2 (2 + s/h + 4 + V/(2 l h)),
# counted on from the checkpoint by the resumed runs) and tokens, the job id and the world size;
# with --async-save "Saving async checkpoint" at the save and "Saved async checkpoint" at its
# commit; a --finetune run's FLOPs go on from the checkpoint's. Without --save, a note says
# there is no progress.txt; one that does not read stops the run at its start.
# Usage: progress_log.sh TRAIN_BINARY REPO
set -u
train=$1
repo=$2
# shellcheck source=tests/mpi/mpi_test_lib.sh
source "$repo/tests/mpi/mpi_test_lib.sh"
run=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --mock-data --lr-warmup-iters 1 --lr-decay-iters 10
     --eval-iters 0 --micro-batch-size 2 --global-batch-size 8)
args=("${run[@]}" --save "$tmp/ckpt" --save-interval 2 --log-progress)
launch 2 --train-iters 4 >"$tmp/a.log" 2>&1 || fail "the first run"
SLURM_JOB_ID=77 timeout 300 mpirun --oversubscribe -np 2 --bind-to none -x SLURM_JOB_ID "$train" "${args[@]}" \
  --train-iters 6 --load "$tmp/ckpt" >"$tmp/b.log" 2>&1 || fail "the resumed run"
launch 1 --train-iters 8 --load "$tmp/ckpt" --async-save >"$tmp/c.log" 2>&1 || fail "the run of one process"
# --finetune restarts the iterations, not the FLOPs (Megatron's count goes on).
launch 1 --train-iters 2 --load "$tmp/ckpt" --finetune >"$tmp/f.log" 2>&1 || fail "the fine-tuning run"
if python3 - "$tmp/ckpt/progress.txt" <<'PY'; then
import datetime, sys
B, s, l, h, V = 8, 64, 2, 64, 512  # gpt2-tiny: global batch, sequence, layers, width, padded vocabulary
# Megatron-LM's num_floating_point_operations (2025): per token and layer the QKV, causal scores
# (counted at half), output projection and MLP, then the logits; 3 x 2: forward and backward, FMA.
attention = 3 * 2 * (h * 3 * h + h * s / 2 * 2 + h * h)
mlp = 3 * 2 * h * (4 * h) * 2
flops = B * s * (l * (attention + mlp) + 3 * 2 * h * V)
saved = lambda it: [f"Saved checkpoint", f"Iteration: {it}", None, None,
                    f"Floating-point operations: {it * flops:.2e}", f"Tokens (in billions): {it * B * s / 10**9:.2f}"]
expected = [("", 2, ["Starting job"]), ("", 2, saved(2)), ("", 2, saved(4)), ("77", 2, ["Starting job"]),
            ("77", 2, saved(6)), ("", 1, ["Starting job"]),
            ("", 1, ["Saving async checkpoint"] + saved(8)[1:]), ("", 1, ["Saved async checkpoint", "Iteration: 8"]),
            ("", 1, ["Starting job"]), ("", 1, saved(2)[:4] + [f"Floating-point operations: {10 * flops:.2e}",
                                                              f"Tokens (in billions): {2 * B * s / 10**9:.2f}"])]
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == len(expected), lines
for line, (job, gpus, event) in zip(lines, expected):
    f = line.split("\t")
    datetime.datetime.strptime(f[0], "%Y-%m-%d %H:%M:%S")
    assert f[1] == f"Job ID: {job}" and f[2] == f"# GPUs: {gpus}", line
    assert len(f) == 3 + len(event), line
    for got, want, k in zip(f[3:], event, range(len(event))):
        if want is None:  # a throughput: "Job throughput: X TFLOP/s/GPU", "Cumulative throughput: ..."
            name, value = got.split(": ")
            assert name == ("Job throughput", "Cumulative throughput")[k - 2] and value.endswith(" TFLOP/s/GPU"), line
            assert float(value.split()[0]) >= 0, line
        else:
            assert got == want, (line, want)
print(f"{len(lines)} progress lines as Megatron writes them; {flops:.6g} FLOPs an iteration")
PY
  python3 -c '
import json, sys
def flops(path):
    return json.load(open(path))["trainer_state"]["num_floating_point_operations_so_far"]
got = [flops(sys.argv[1]), flops(sys.argv[2])]
sys.exit(any(abs(g - w) > 1e-9 * w for g, w in zip(got, [3422552064, 4278190080])))' \
    "$tmp/ckpt/iter_0000008/metadata.json" "$tmp/ckpt/iter_0000002/metadata.json" ||
    fail "the checkpoint does not record the FLOPs so far"
else
  fail "progress.txt"; cat "$tmp/ckpt/progress.txt"
fi
"$train" "${run[@]}" --train-iters 2 --log-progress >"$tmp/d.log" 2>&1
grep -q -- "--log-progress (without --save)" "$tmp/d.log" && echo "ok: --log-progress without --save: a note" ||
  fail "no note for --log-progress without --save"
# A progress.txt that does not read stops the run at its start, in one line, before any training.
mkdir -p "$tmp/garbled" && echo "not a progress line" >"$tmp/garbled/progress.txt"
"$train" "${run[@]}" --train-iters 2 --save "$tmp/garbled" --log-progress >"$tmp/g.log" 2>"$tmp/g.err"
rc=$?
if [[ $rc -eq 2 && $(wc -l <"$tmp/g.err") -eq 1 ]] && grep -qF "$tmp/garbled/progress.txt:1: not a progress line" "$tmp/g.err" &&
    ! grep -q '^ iteration' "$tmp/g.log"; then
  echo "ok: $(cat "$tmp/g.err")"
else
  fail "a garbled progress.txt: rc $rc"; cat "$tmp/g.err"
fi
[[ $fails -eq 0 ]]
