#!/usr/bin/env bash
# Generation from a model trained with Megatron's NullTokenizer (--tokenizer-type NullTokenizer
# --vocab-size V: texts are token ids separated by spaces, V the end of document), on the CPU:
# trident-generate and trident-text-generation-server read prompts of ids and write ids apart.
# The reference is the server given the same prompt as token ids (no tokenizer on the way in):
# greedy continuations equal, and every text is its tokens written out in decimal.
#   tests/e2e/generate_null_tokenizer.sh <trident-train> <trident-generate> <trident-text-generation-server> <repo>
set -uo pipefail
train=$1 generate=$2 server=$3 repo=$4
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
server_pid=
trap '[[ -n $server_pid ]] && kill -9 "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
null=(--tokenizer-type NullTokenizer --vocab-size 300)

# Random weights far from uniform (init std 0.5), so greedy choices have no near ties.
if ! timeout 300 "$train" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --mock-data "${null[@]}" \
    --seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 \
    --init-method-std 0.5 --lr 1e-6 --min-lr 0 --lr-warmup-iters 0 --eval-iters 0 --save "$tmp/ckpt" >"$tmp/train.log" 2>&1; then
  cat "$tmp/train.log"
  echo "FAIL: training the NullTokenizer model"
  exit 1
fi

"$generate" --device cpu --load "$tmp/ckpt" "${null[@]}" --greedy --out-seq-length 8 --prompt "17 4 9" \
  --prompt "300 250" --sample-output-file "$tmp/greedy.jsonl" >"$tmp/greedy.out" 2>"$tmp/greedy.err" ||
  fail "trident-generate: $(tail -1 "$tmp/greedy.err")"
# stdout: each sample the prompt, then its generated ids behind one space each.
if python3 - "$tmp/greedy.out" "$tmp/greedy.jsonl" <<'PY'
import json, re, sys
out = open(sys.argv[1]).read().split("\n")
lines = [json.loads(l) for l in open(sys.argv[2])]
assert [l["prompt"] for l in lines] == ["17 4 9", "300 250"], lines
for k, l in enumerate(lines):
    assert re.fullmatch(r"( (\d+))+", l["text"]), l  # " 12 7 ..." after the prompt
    ids = [int(x) for x in l["text"].split()]
    assert len(ids) == l["tokens"] and all(0 <= i <= 300 for i in ids), l
    assert len(ids) <= 8, l  # without the end of document that ended it
    assert out[2 * k + 1] == l["prompt"] + l["text"], (out, l)
print(f"ok: trident-generate: \"17 4 9\" ->{lines[0]['text']}, \"300 250\" ->{lines[1]['text']}")
PY
then :; else fail "trident-generate's NullTokenizer samples (above): $(cat "$tmp/greedy.out")"; fi

# A prompt that ends in a space: the generated ids follow it without another.
"$generate" --device cpu --load "$tmp/ckpt" "${null[@]}" --greedy --out-seq-length 8 --prompt "17 4 9 " \
  >"$tmp/spaced.out" 2>&1 && [[ $(sed -n 2p "$tmp/spaced.out") == "17 4 9 $(sed -n 2p "$tmp/greedy.out" | cut -c8-)" ]] &&
  ok "prompt \"17 4 9 \": $(sed -n 2p "$tmp/spaced.out")" || fail "a prompt ending in a space: $(cat "$tmp/spaced.out")"

# One-line errors naming the flag or the prompt.
expect_error() {  # expect_error WHAT TEXT ARGS...
  local what=$1 text=$2
  shift 2
  "$generate" --device cpu --load "$tmp/ckpt" --greedy --out-seq-length 2 "$@" >/dev/null 2>"$tmp/err"
  local rc=$?
  if [[ $rc == 2 && $(wc -l <"$tmp/err") == 1 ]] && grep -qF -- "$text" "$tmp/err"; then
    ok "$what: $(cat "$tmp/err")"
  else
    fail "$what: exit $rc: $(cat "$tmp/err")"
  fi
}
expect_error "a word that is no id" '--prompt: NullTokenizer: "x"' "${null[@]}" --prompt "17 x"
expect_error "an id past the vocabulary" '--prompt (#2): NullTokenizer: "301"' "${null[@]}" --prompt 1 --prompt "4 301"
expect_error "another vocabulary than the checkpoint's" "--vocab-size: the tokenizer has 300 tokens but the checkpoint's model 301" \
  --tokenizer-type NullTokenizer --vocab-size 299 --prompt 1
expect_error "no --vocab-size" "--vocab-size is required for NullTokenizer" --tokenizer-type NullTokenizer --prompt 1
# GPT-2's files given too (a launcher's defaults) are ignored, as by Megatron: the same sample.
"$generate" --device cpu --load "$tmp/ckpt" "${null[@]}" --vocab-file no-such --merge-file no-such --greedy \
  --out-seq-length 8 --prompt "17 4 9" >"$tmp/files.out" 2>"$tmp/files.err" &&
  [[ $(sed -n 2p "$tmp/files.out") == $(sed -n 2p "$tmp/greedy.out") ]] &&
  ok "--vocab-file and --merge-file ignored with NullTokenizer: $(sed -n 2p "$tmp/files.out")" ||
  fail "GPT-2's files with NullTokenizer: $(cat "$tmp/files.err")"
expect_error "--vocab-size with GPT-2's tokenizer" "--vocab-size is NullTokenizer's" --vocab-size 300 --vocab-file v \
  --merge-file m --prompt 1

timeout 300 "$server" --device cpu --load "$tmp/ckpt" "${null[@]}" --port 0 2>"$tmp/server.log" &
server_pid=$!
port=
for _ in $(seq 600); do
  port=$(sed -n 's|.* at http://0.0.0.0:\([0-9]*\)/api (PUT)$|\1|p' "$tmp/server.log")
  [[ -n $port ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z $port ]]; then
  fail "the server did not start: $(cat "$tmp/server.log")"
elif python3 - "$port" "$tmp/greedy.jsonl" <<'PY'
import json, sys, urllib.error, urllib.request
port, lines = sys.argv[1], [json.loads(l) for l in open(sys.argv[2])]

def call(path, body, method="POST"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

# /completions from the prompt's ids: the reference continuation, no tokenizer on the way in.
status, ids_answer = call("/v1/completions", {"prompt": [17, 4, 9], "max_tokens": 8, "temperature": 0, "logprobs": 1})
assert status == 200, ids_answer
reference = ids_answer["choices"][0]["text"]
assert reference == lines[0]["text"], (reference, lines[0])
# The same prompt as text: the same answer, its logprobs' tokens the text's pieces.
status, text_answer = call("/v1/completions", {"prompt": "17 4 9", "max_tokens": 8, "temperature": 0, "logprobs": 1,
                                               "echo": True})
assert status == 200, text_answer
choice = text_answer["choices"][0]
assert choice["text"] == "17 4 9" + reference, choice
# Megatron's logprobs lists: each token its id's text, its offset where that text starts.
lp = choice["logprobs"]
assert lp["tokens"] == choice["text"].split(" "), lp["tokens"]
assert [choice["text"][o:o + len(t)] for o, t in zip(lp["text_offset"], lp["tokens"])] == lp["tokens"], lp
assert lp["text_offset"][:3] == [0, 3, 5], lp["text_offset"]
# A stop string cuts the text where it starts, and the token it starts in is not counted.
ids = reference.split()
own_start, at = [], 0
for i in ids:
    own_start.append(at + 1)
    at += 1 + len(i)
stop = ids[min(2, len(ids) - 1)]
cut = reference.find(stop)
body = {"prompt": "17 4 9", "max_tokens": 8, "temperature": 0, "stop": [stop]}
status, stopped = call("/v1/completions", body)
assert status == 200, stopped
c = stopped["choices"][0]
assert c["text"] == reference[:cut] and c["finish_reason"] == "stop", (c, reference, stop)
assert stopped["usage"]["completion_tokens"] == sum(1 for x in own_start if x < cut), (stopped, own_start, cut)
# Streamed, the same text in pieces.
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps({**body, "stream": True}).encode(),
                             method="POST", headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=120) as r:
    events = [l[6:] for l in r.read().decode().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events
streamed = "".join(ch["text"] for e in events[:-1] for ch in json.loads(e)["choices"])
assert streamed == c["text"], (streamed, c["text"])
# Megatron's PUT /api: the text is the whole sequence's, the segments one a token.
status, api = call("/api", {"prompts": ["17 4 9"], "tokens_to_generate": 8, "top_k": 1}, method="PUT")
assert status == 200, api
# (with the end of document, 300, when that ended it)
assert api["text"][0] in ("17 4 9" + reference, "17 4 9" + reference + " 300"), api
assert api["segments"][0] == api["text"][0].split(" "), api  # Megatron's str(token) each
# A prompt that is no ids is the client's error; stop_on_eol needs a newline token.
status, bad = call("/api", {"prompts": ["17 x"], "tokens_to_generate": 2}, method="PUT")
assert status == 400 and 'NullTokenizer: "x"' in bad["message"], (status, bad)
status, eol = call("/api", {"prompts": ["17"], "tokens_to_generate": 2, "stop_on_eol": True}, method="PUT")
assert status == 400 and "no single token" in eol["message"], (status, eol)
print(f"ok: the server: [17, 4, 9] and \"17 4 9\" ->{reference} (trident-generate's), /api the same; stop "
      f"{stop!r} -> {c['text']!r} ({stopped['usage']['completion_tokens']} tokens), streamed alike; "
      f"a bad prompt 400: {bad['message']}")
PY
then :; else fail "the server's NullTokenizer answers (above)"; fi
[[ -n $server_pid ]] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid"
server_pid=

((fails == 0)) && echo "all NullTokenizer generation checks passed" || echo "$fails failed"
exit $((fails > 0))
