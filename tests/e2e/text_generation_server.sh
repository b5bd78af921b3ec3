#!/usr/bin/env bash
# trident-text-generation-server end to end, over HTTP on the CPU: a GPT-2-vocabulary model
# (2 layers, 48 learned positions, trained 32) saved by trident-train; the server's greedy
# text equals trident-generate's, prompts of different lengths together equal them alone,
# logprobs agree with scoring, seeds repeat, concurrent clients, stop_on_eol, beam search,
# /completions streamed as server-sent events (joined, the unstreamed answer; a client that
# leaves mid-stream ends its request early, at tp1 and tp2),
# Megatron's 400 messages, the learned-positions and --max-tokens-to-oom limits
# (text_generation_server_check.py); SIGTERM closes it with exit 0; under mpirun -np 2 at
# tensor-parallel 2 (launch/run-text-generation-server.sh) the same responses (sampled and
# beam ones included); a port in use and bad flags are one line and exit 2.
#   tests/e2e/text_generation_server.sh <trident-train> <trident-generate> <trident-text-generation-server> <repo> <gpt2 dir>
set -uo pipefail
train=$1 generate=$2 server=$3 repo=$4 vocab=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
pids=()
# `timeout` leads a process group: the server, or mpirun and its ranks, go with it.
trap 'for p in "${pids[@]}"; do kill -9 -- "-$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
words=(--vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt")
check="$repo/tests/e2e/text_generation_server_check.py"

# Random weights far from uniform (init std 0.5), so greedy choices have no near ties.
if ! timeout 300 "$train" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --mock-data --vocab-size 50257 \
    --seq-length 32 --max-position-embeddings 48 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 \
    --init-method-std 0.5 --lr 1e-6 --min-lr 0 --lr-warmup-iters 0 --eval-iters 0 --save "$tmp/ckpt" >"$tmp/train.log" 2>&1; then
  cat "$tmp/train.log"
  echo "FAIL: training the model to serve"
  exit 1
fi
"$generate" --device cpu --load "$tmp/ckpt" "${words[@]}" --greedy --out-seq-length 10 --seq-length 48 \
  --prompt "The history of the" --prompt "Hello world, this is a longer prompt about" \
  --sample-output-file "$tmp/greedy.jsonl" >/dev/null 2>&1 || fail "trident-generate's reference"

# start_server LOG COMMAND...: starts it in the background (pid in $server_pid) and waits for
# the line that names its port (in $port).
start_server() {
  local log=$1
  shift
  timeout 600 "$@" 2>"$log" &
  server_pid=$!
  pids+=("$server_pid")
  port=
  for _ in $(seq 600); do
    port=$(sed -n 's|.* at http://0.0.0.0:\([0-9]*\)/api (PUT)$|\1|p' "$log")
    [[ -n $port ]] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: the server did not start: $(cat "$log")"
  return 1
}

# stop_server NAME [PID]: SIGTERM to PID (default: the server), then the server must end by
# itself (exit status in $stopped_rc).
stop_server() {
  kill -TERM "${2:-$server_pid}"
  for _ in $(seq 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$server_pid" 2>/dev/null; then
    fail "$1: still running 30 s after SIGTERM"
    kill -9 -- "-$server_pid"
  fi
  wait "$server_pid"
  stopped_rc=$?
}

# With the flags Megatron's server scripts pass (the shape ones checked, the others accepted).
if start_server "$tmp/tp1.log" "$server" --device cpu --load "$tmp/ckpt" "${words[@]}" --port 0 \
    --max-tokens-to-oom 200 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-layers 2 \
    --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 48 --tokenizer-type GPT2BPETokenizer \
    --micro-batch-size 1 --out-seq-length 1024 --temperature 1.0 --top_p 0.9 --seed 42 --use-checkpoint-args \
    --no-load-optim --no-load-rng; then
  ok "serving on port $port"
  python3 "$check" "$port" "$tmp/greedy.jsonl" || fail "HTTP checks (above)"
  python3 "$check" "$port" --dump "$tmp/tp1.json" || fail "tp1 responses"
  python3 "$check" "$port" --leave "$tmp/tp1.log" || fail "tp1: clients that leave mid-stream"
  # A second server on the same port: one line, exit 2.
  timeout 60 "$server" --device cpu --load "$tmp/ckpt" "${words[@]}" --port "$port" --host 0.0.0.0 >"$tmp/busy.out" 2>&1
  rc=$?
  [[ $rc == 2 && $(wc -l <"$tmp/busy.out") == 1 ]] && grep -q "cannot listen there" "$tmp/busy.out" &&
    ok "port $port in use: $(cat "$tmp/busy.out")" || fail "port in use: exit $rc, $(cat "$tmp/busy.out")"
  stop_server tp1
  [[ $stopped_rc == 0 ]] && grep -q "stop signal: closing" "$tmp/tp1.log" && ok "SIGTERM: closed, exit 0" ||
    fail "SIGTERM: exit $stopped_rc, $(tail -3 "$tmp/tp1.log")"
  grep -q "1 prompts, tokens_to_generate 10: " "$tmp/tp1.log" && ok "requests logged" ||
    fail "no request log line: $(head -5 "$tmp/tp1.log")"
  # The greedy completions sent behind a slow request were decoded in batches of several.
  together=$(grep -c "requests decoded together" "$tmp/tp1.log")
  ((together >= 8)) && ok "$together answers decoded in batches of requests" ||
    fail "only $together answers decoded in batches of requests"
fi

# Tensor-parallel 2 through launch/run-text-generation-server.sh (run by sh), with the seed's
# variables.
if start_server "$tmp/tp2.log" env TP_SIZE=2 CHECKPOINT_PATH="$tmp/ckpt" VOCAB_FILE="$vocab/gpt2-vocab.json" \
    MERGE_FILE="$vocab/gpt2-merges.txt" BUILD_DIR="$(dirname "$(dirname "$server")")" PORT=0 DEVICE=cpu \
    MAX_TOKENS_TO_OOM=200 mpirun --oversubscribe -np 2 --bind-to none sh "$repo/launch/run-text-generation-server.sh"; then
  python3 "$check" "$port" --dump "$tmp/tp2.json" || fail "tp2 responses"
  python3 "$check" "$port" --leave "$tmp/tp2.log" || fail "tp2: clients that leave mid-stream"
  grep -q "requests decoded together" "$tmp/tp2.log" && ok "tp2: a batch of requests sent to rank 1 as one order" ||
    fail "tp2: no batch of requests formed"
  if python3 - "$tmp/tp1.json" "$tmp/tp2.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
texts = lambda r: r["text"] if "text" in r else [c["text"] for c in r["choices"]]
for key in a:
    assert texts(a[key]) == texts(b[key]), (key, a[key], b[key])
pairs = [(x, y) for la, lb in zip(a["greedy"]["logprobs"], b["greedy"]["logprobs"]) for x, y in zip(la, lb)]
for ca, cb in zip(a["completions"]["choices"], b["completions"]["choices"]):
    assert ca["logprobs"]["tokens"] == cb["logprobs"]["tokens"]
    pairs += list(zip(ca["logprobs"]["token_logprobs"][1:], cb["logprobs"]["token_logprobs"][1:]))
worst = max(abs(x - y) for x, y in pairs)
assert worst < 1e-4, worst
print(f"ok: tensor-parallel 2: the same greedy, sampled, beam, completions and streamed texts as tp1, logprobs within {worst:.2g}")
PY
  then :; else fail "tp2 responses differ from tp1's"; fi
  # SIGTERM to rank 0, the pid its start line names (mpirun's own SIGTERM kills the job, and
  # its output with it): rank 0 closes, tells rank 1, and the job exits 0.
  rank0=$(sed -n 's|.*, pid \([0-9]*\)) at http://.*|\1|p' "$tmp/tp2.log")
  if [[ -n $rank0 ]]; then
    stop_server "mpirun -np 2" "$rank0"
    [[ $stopped_rc == 0 ]] && grep -q "stop signal: closing" "$tmp/tp2.log" &&
      ok "tp2: SIGTERM to rank 0 closes the job, exit 0" || fail "tp2 after SIGTERM: exit $stopped_rc, $(tail -5 "$tmp/tp2.log")"
  else
    fail "tp2: no pid in the start line: $(head -3 "$tmp/tp2.log")"
  fi
fi

expect_error() {  # expect_error WHAT PATTERN FLAGS...
  local what=$1 pattern=$2
  shift 2
  timeout 60 "$server" --device cpu "${words[@]}" "$@" >"$tmp/err.out" 2>&1
  local rc=$?
  [[ $rc == 2 && $(wc -l <"$tmp/err.out") == 1 ]] && grep -q -- "$pattern" "$tmp/err.out" &&
    ok "$what: $(cat "$tmp/err.out")" || fail "$what: exit $rc, $(cat "$tmp/err.out")"
}
expect_error "a port past 65535" "--port" --load "$tmp/ckpt" --port 70000
expect_error "a negative --temperature" "--temperature must be" --load "$tmp/ckpt" --temperature -1
expect_error "--top_p past 1" "--top_p must be in \[0, 1\]" --load "$tmp/ckpt" --top_p 5
expect_error "no --load" "--load" --port 0
expect_error "a shape flag that differs" "--num-layers" --load "$tmp/ckpt" --num-layers 3
expect_error "--seq-length past the learned positions" "--seq-length" --load "$tmp/ckpt" --seq-length 49
if ((fails)); then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all text-generation server checks passed"
