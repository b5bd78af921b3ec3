#!/usr/bin/env bash
# trident-generate end to end: a gpt2-tiny-shaped model trained on the demo corpus (GPT-2
# vocabulary) at tp2 x pp2, saved, and consolidated to tp1 by trident-convert. Generation
# from either checkpoint gives the same bytes (greedy, and seeded top-k/top-p sampling);
# the same seed repeats, another seed differs; prompts come from flags (a comma is part of
# a prompt; --prompt repeats) and a file (CRLF line ends give the same prompts), the
# JSON-lines output parses and names each prompt; unconditional samples come in batches
# and Megatron's --genfile lines agree with them; prompt + generated tokens stop at the
# model's sequence length; Megatron's flags (the model's shape, --micro-batch-size,
# --recompute) and launch/run-inf.sh work; under mpirun -np 2 it runs tensor-parallel (the
# same text) with --tensor-model-parallel-size 2 and refuses to run two copies without, or
# ranks given other prompts or sampling flags. Bad
# input is one line and exit 2, with no output file left behind.
#   tests/e2e/generate.sh <trident-train> <trident-preprocess> <trident-generate> <trident-convert> <repo> <gpt2 dir>
set -uo pipefail
train=$1 preprocess=$2 generate=$3 convert=$4 repo=$5 vocab=$6
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$repo/tools/make-demo-data.sh" "$tmp/demo.jsonl" >/dev/null
"$preprocess" --input "$tmp/demo.jsonl" --json-keys text --output-prefix "$tmp/demo" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt" --append-eod --workers 2 >/dev/null 2>&1
words=(--vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt")
if ! timeout 300 mpirun --oversubscribe -np 4 --bind-to none "$train" --config "$repo/configs/gpt2-tiny.yaml" \
    --device cpu --data-path "$tmp/demo_text_document" "${words[@]}" --split 949,50,1 --seq-length 32 \
    --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --train-iters 40 --lr 2e-3 \
    --min-lr 2e-4 --lr-warmup-iters 5 --log-interval 20 --eval-iters 0 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --save "$tmp/ckpt" >"$tmp/train.log" 2>&1; then
  cat "$tmp/train.log"
  echo "FAIL: training the model to generate from"
  exit 1
fi
"$convert" --load "$tmp/ckpt" --save "$tmp/tp1" >/dev/null || { echo "FAIL: trident-convert"; exit 1; }

gen() { "$generate" --device cpu "${words[@]}" "$@"; }
prompt="The history of the"
gen --load "$tmp/ckpt" --prompt "$prompt" --greedy --out-seq-length 12 >"$tmp/greedy.out" 2>"$tmp/greedy.err" ||
  fail "greedy generation: $(cat "$tmp/greedy.err")"
grep -q "^=== sample 1 ===$" "$tmp/greedy.out" && grep -qF "$prompt" "$tmp/greedy.out" &&
  ok "greedy: $(sed -n 2p "$tmp/greedy.out" | head -c 120)" || fail "greedy output: $(cat "$tmp/greedy.out")"
gen --load "$tmp/tp1" --prompt "$prompt" --greedy --out-seq-length 12 >"$tmp/greedy1.out" 2>/dev/null
cmp -s "$tmp/greedy.out" "$tmp/greedy1.out" && ok "tp2 x pp2 and consolidated tp1 checkpoints: same greedy text" ||
  fail "tp1 checkpoint generates differently"
sampled() { gen --load "$1" --prompt "$prompt" --top-k 50 --top-p 0.95 --temperature 0.9 --seed "$2" --out-seq-length 24; }
sampled "$tmp/ckpt" 5 >"$tmp/s5a.out" 2>/dev/null
sampled "$tmp/tp1" 5 >"$tmp/s5b.out" 2>/dev/null
sampled "$tmp/ckpt" 6 >"$tmp/s6.out" 2>/dev/null
cmp -s "$tmp/s5a.out" "$tmp/s5b.out" && ok "seed 5 twice (two layouts): same text" || fail "seed 5 does not repeat"
cmp -s "$tmp/s5a.out" "$tmp/s6.out" && fail "seeds 5 and 6 gave the same text" || ok "seed 6 differs"

# A comma is part of the prompt (cxxopts would split a vector flag there); --prompt repeats.
gen --load "$tmp/ckpt" --prompt "Hello world, this is" --prompt "a, b, c" --prompt "last" --greedy --out-seq-length 3 \
  --sample-output-file "$tmp/comma.jsonl" >"$tmp/comma.out" 2>/dev/null || fail "prompts with commas"
if python3 - "$tmp/comma.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["prompt"] for r in rows] == ["Hello world, this is", "a, b, c", "last"], rows
PY
then ok "--prompt with commas: three prompts, each whole, in order"; else fail "comma prompts: $(cat "$tmp/comma.jsonl")"; fi
# Bytes that are not UTF-8 (here half a character in the prompt; a sample can end inside one):
# U+FFFD on stdout, as in the JSON lines, so both carry the same valid text.
gen --load "$tmp/ckpt" --prompt $'Half \xe4\xb8 a character' --greedy --out-seq-length 3 \
  --sample-output-file "$tmp/half.jsonl" >"$tmp/half.out" 2>/dev/null || fail "a prompt with half a character"
if python3 - "$tmp/half.out" "$tmp/half.jsonl" <<'PY'
import json, sys
out = open(sys.argv[1], "rb").read().decode("utf-8")  # raises on invalid UTF-8
row = json.loads(open(sys.argv[2]).read())
assert row["prompt"] == "Half \ufffd a character", row
assert row["prompt"] + row["text"] in out, (out, row)
PY
then ok "half a character: U+FFFD on stdout and in the JSON line"; else fail "invalid UTF-8 on stdout: $(od -c "$tmp/half.out" | head -3)"; fi

printf 'First prompt\n\nSecond one\n' >"$tmp/prompts.txt"
gen --load "$tmp/ckpt" --sample-input-file "$tmp/prompts.txt" --out-seq-length 8 --sample-output-file "$tmp/out.jsonl" \
  >/dev/null 2>&1 || fail "prompts from a file"
if python3 - "$tmp/out.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["prompt"] for r in rows] == ["First prompt", "Second one"], rows
assert all(isinstance(r["text"], str) and 1 <= r["tokens"] <= 8 for r in rows), rows
PY
then ok "JSON lines: two prompts, each continued"; else fail "JSON lines output"; fi

# Windows line ends: each prompt loses its '\r' and the "\r\n"-only line is skipped, so the
# greedy samples and their JSON lines are byte for byte those of the same prompts with "\n".
printf 'First prompt\nSecond one\n' >"$tmp/lf.txt"
printf 'First prompt\r\n\r\nSecond one\r\n' >"$tmp/crlf.txt"
for f in lf crlf; do
  gen --load "$tmp/ckpt" --sample-input-file "$tmp/$f.txt" --greedy --out-seq-length 8 \
    --sample-output-file "$tmp/$f.jsonl" >"$tmp/$f.out" 2>/dev/null || fail "prompts from $f.txt"
done
if cmp -s "$tmp/lf.out" "$tmp/crlf.out" && cmp -s "$tmp/lf.jsonl" "$tmp/crlf.jsonl" &&
   python3 - "$tmp/crlf.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["prompt"] for r in rows] == ["First prompt", "Second one"], rows
PY
then ok "CRLF prompt file: same prompts and greedy samples as with LF"
else fail "CRLF prompt file: $(cat "$tmp/crlf.jsonl") vs $(cat "$tmp/lf.jsonl")"; fi

gen --load "$tmp/ckpt" --num-samples 3 --batch-size 2 --out-seq-length 6 --seed 3 >"$tmp/uncond.out" 2>/dev/null
[[ $(grep -c '^=== sample [0-9]* (unconditional) ===$' "$tmp/uncond.out") -eq 3 ]] && ok "3 unconditional samples in batches of 2" ||
  fail "unconditional samples: $(cat "$tmp/uncond.out")"

# Sequence length 32: "Hello world" is 2 tokens (15496, 995), so 30 more fill it, whatever
# --out-seq-length says (Megatron's rule: the last token at index seq_length - 1).
gen --load "$tmp/ckpt" --prompt "Hello world" --ignore-eos --out-seq-length 100 \
  --sample-output-file "$tmp/long.jsonl" >/dev/null 2>&1 || fail "a long continuation"
n=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["tokens"])' "$tmp/long.jsonl")
[[ $n -eq 30 ]] && ok "prompt + generated = the sequence length, 32 (30 new tokens)" ||
  fail "$n new tokens after a 2-token prompt in a sequence of 32"

# Megatron's --genfile: {"text", "length", "finished"} per unconditional sample, the same
# samples as --sample-output-file; "finished" is a sample that drew <|endoftext|> before
# --out-seq-length. --micro-batch-size is --batch-size; --recompute changes nothing.
uncond=(--load "$tmp/ckpt" --num-samples 5 --micro-batch-size 2 --out-seq-length 6 --seed 11)
gen "${uncond[@]}" --genfile "$tmp/gen.json" --sample-output-file "$tmp/gen-out.jsonl" >"$tmp/gen.out" 2>/dev/null ||
  fail "--genfile"
gen "${uncond[@]}" --recompute >"$tmp/gen-recompute.out" 2>/dev/null || fail "--recompute"
gen "${uncond[@]/--micro-batch-size/--batch-size}" >"$tmp/gen-batch.out" 2>/dev/null || fail "--batch-size"
cmp -s "$tmp/gen.out" "$tmp/gen-recompute.out" && cmp -s "$tmp/gen.out" "$tmp/gen-batch.out" &&
  ok "--recompute and --batch-size: the same samples" || fail "--recompute or --batch-size changed the samples"
if python3 - "$tmp/gen.json" "$tmp/gen-out.jsonl" 6 <<'PY'
import json, sys
gen = [json.loads(l) for l in open(sys.argv[1])]
out = [json.loads(l) for l in open(sys.argv[2])]
limit = int(sys.argv[3])
assert len(gen) == 5 and len(out) == 5, (gen, out)
for g, o in zip(gen, out):
    assert sorted(g) == ["finished", "length", "text"], g
    assert g["text"] == o["text"] and g["length"] == o["tokens"], (g, o)
    assert g["finished"] == (g["length"] < limit), g
PY
then ok "--genfile: 5 samples of Megatron's fields, agreeing with --sample-output-file"
else fail "--genfile: $(cat "$tmp/gen.json")"; fi
gen --load "$tmp/ckpt" --num-samples 2 --ignore-eos --out-seq-length 100 --genfile "$tmp/full.json" >/dev/null 2>&1
python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["length"], r["finished"]) for r in rows] == [(31, False)] * 2, rows' "$tmp/full.json" &&
  ok "--genfile: an unconditional sample fills the 31 positions after <|endoftext|>, unfinished" ||
  fail "full-length unconditional samples: $(cat "$tmp/full.json")"

# The model-shape flags of the training run are accepted (and change nothing); another
# value is one line naming the flag and both values (below); --seq-length sets the longest
# sample, up to the learned positions.
shape=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --tokenizer-type GPT2BPETokenizer)
gen --load "$tmp/ckpt" --prompt "$prompt" --greedy --out-seq-length 12 "${shape[@]}" >"$tmp/shape.out" 2>/dev/null
cmp -s "$tmp/greedy.out" "$tmp/shape.out" && ok "the training run's shape flags: accepted, the same text" ||
  fail "shape flags: $(cat "$tmp/shape.out")"

# launch/run-inf.sh (the seed's single-GPU inference script) under mpirun -np 1, run by sh.
rc=0
env CHECKPOINT_PATH="$tmp/ckpt" BUILD_DIR="$(cd "$(dirname "$generate")/.." && pwd)" DEVICE=cpu \
  VOCAB_FILE="$vocab/gpt2-vocab.json" MERGE_FILE="$vocab/gpt2-merges.txt" NUM_SAMPLES=3 MICRO_BATCH_SIZE=2 \
  OUT_SEQ_LENGTH=5 NLAYERS=2 NHIDDEN=64 NHEADS=4 SEQ_LEN=32 GENFILE="$tmp/inf/samples.json" \
  mpirun -np 1 sh "$repo/launch/run-inf.sh" >"$tmp/inf.out" 2>"$tmp/inf.err" || rc=$?
if [[ $rc -eq 0 ]] && python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3 and all(r["length"] <= 5 and r["finished"] == (r["length"] < 5) for r in rows), rows
' "$tmp/inf/samples.json"
then ok "launch/run-inf.sh under mpirun -np 1: 3 samples in GENFILE"
else fail "launch/run-inf.sh: rc=$rc $(cat "$tmp/inf.err")"; fi

# Under mpirun -np 2 without --tensor-model-parallel-size 2 it would run two copies writing
# one file: one line, nothing written.
rc=0
mpirun --oversubscribe -np 2 "$generate" --device cpu "${words[@]}" --load "$tmp/ckpt" --num-samples 1 \
  --genfile "$tmp/np2.json" >"$tmp/np2.out" 2>"$tmp/np2.err" || rc=$?
n=$(grep -c '^trident-generate: error: --tensor-model-parallel-size 1: the job has 2 processes' "$tmp/np2.err")
[[ $rc -ne 0 && $n -eq 1 && ! -e $tmp/np2.json && ! -s $tmp/np2.out ]] &&
  ok "mpirun -np 2 without tp 2: one error line, nothing written" || fail "mpirun -np 2: rc=$rc $(cat "$tmp/np2.err")"
# Tensor-parallel decoding (each rank holds half the heads, MLP columns and vocabulary): the
# same samples as one process, greedy and seeded top-k/top-p, from rank 0 alone.
for mode in "--greedy" "--top-k 40 --top-p 0.9 --seed 11"; do
  read -r -a m <<<"$mode"
  gen --load "$tmp/tp1" --prompt "$prompt" "${m[@]}" --out-seq-length 12 >"$tmp/tp1.out" 2>/dev/null
  mpirun --oversubscribe -np 2 "$generate" --device cpu "${words[@]}" --load "$tmp/ckpt" --prompt "$prompt" "${m[@]}" \
    --out-seq-length 12 --tensor-model-parallel-size 2 --sample-output-file "$tmp/tp2.json" >"$tmp/tp2.out" \
    2>"$tmp/tp2.err"
  if [[ -s $tmp/tp1.out ]] && cmp -s "$tmp/tp1.out" "$tmp/tp2.out" && [[ $(wc -l <"$tmp/tp2.json") -eq 1 ]]; then
    ok "tp 2 under mpirun, $mode: the one-process text"
  else
    fail "tp 2, $mode: $(cat "$tmp/tp2.err")"; diff "$tmp/tp1.out" "$tmp/tp2.out"
  fi
done

# An MPMD launch whose ranks were given other prompts or sampling flags would draw other tokens
# and run their tensor-parallel collectives out of step: one line before any decoding.
for other in "--prompt other" "--top-k 3"; do
  read -r -a o <<<"$other"
  rc=0
  timeout 60 mpirun --oversubscribe -np 1 "$generate" --device cpu "${words[@]}" --load "$tmp/ckpt" --prompt "$prompt" \
    --tensor-model-parallel-size 2 --out-seq-length 4 --sample-output-file "$tmp/mpmd.json" : -np 1 "$generate" \
    --device cpu "${words[@]}" --load "$tmp/ckpt" --prompt "$prompt" --tensor-model-parallel-size 2 --out-seq-length 4 \
    "${o[@]}" >"$tmp/mpmd.out" 2>"$tmp/mpmd.err" || rc=$?
  n=$(grep -c '^trident-generate: error: rank 1 was started with other flags than rank 0: ' "$tmp/mpmd.err")
  [[ $rc -eq 2 && $n -eq 1 && ! -e $tmp/mpmd.json ]] &&
    ok "tp 2, rank 1 given $other: $(grep '^trident-generate: error' "$tmp/mpmd.err")" ||
    fail "tp 2, rank 1 given $other: rc=$rc $(cat "$tmp/mpmd.err")"
done

expect_error() {  # expect_error <text in the one error line> <args...>
  local text=$1
  shift
  "$generate" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 || $(wc -l <"$tmp/err") -ne 1 ]] || ! grep -q -- "$text" "$tmp/err" ||
     ! grep -q '^trident-generate: error: ' "$tmp/err"; then
    fail "$* -> rc=$rc, stderr: $(cat "$tmp/err")"
  else
    ok "$(cat "$tmp/err")"
  fi
}
expect_error "--load is required" "${words[@]}" --prompt hi
expect_error "--top-p" --load "$tmp/ckpt" "${words[@]}" --top-p 1.5
expect_error "--temperature" --load "$tmp/ckpt" "${words[@]}" --temperature -1
expect_error "--sample-input-file" --load "$tmp/ckpt" "${words[@]}" --sample-input-file "$tmp/none.txt"
# "word word ... word": one token a word. 31 of them leave room for one token, 32 for none.
words_prompt() { local w; w=$(printf 'word %.0s' $(seq "$1")); echo "${w% }"; }
gen --load "$tmp/ckpt" --prompt "$(words_prompt 31)" --ignore-eos --out-seq-length 5 --sample-output-file "$tmp/31.jsonl" \
  >/dev/null 2>&1 || fail "a 31-token prompt"
n=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["tokens"])' "$tmp/31.jsonl")
[[ $n -eq 1 ]] && ok "a 31-token prompt: 1 new token" || fail "a 31-token prompt: $n new tokens"
expect_error "32 tokens leave no room in the model's sequence length of 32" --load "$tmp/ckpt" "${words[@]}" \
  --prompt "$(words_prompt 32)"
# A prompt too long for the model, from a file: the error names the file and line (all
# prompts are checked before generation starts).
printf 'A short one\n\n%s\n' "$(printf 'word %.0s' {1..40})" >"$tmp/long_prompts.txt"
expect_error "^trident-generate: error: --sample-input-file $tmp/long_prompts.txt line 3: [0-9]* tokens leave no room" \
  --load "$tmp/ckpt" "${words[@]}" --sample-input-file "$tmp/long_prompts.txt"
expect_error "--load" --load "$tmp/nothing" "${words[@]}"
expect_error "^trident-generate: error: --hidden-size 128 differs from the checkpoint's 64 ($tmp/ckpt/iter_0000040/metadata.json)$" \
  --load "$tmp/ckpt" "${words[@]}" --num-layers 2 --hidden-size 128
# --seq-length bounds a sample (Megatron-DeepSpeed's generation): up to the learned positions.
expect_error "--seq-length 64: the checkpoint's model has 32 learned positions" --load "$tmp/ckpt" "${words[@]}" \
  --seq-length 64
gen --load "$tmp/ckpt" --prompt "Hello world" --ignore-eos --out-seq-length 100 --seq-length 16 \
  --sample-output-file "$tmp/short.jsonl" >/dev/null 2>&1 || fail "--seq-length 16"
n=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["tokens"])' "$tmp/short.jsonl")
[[ $n -eq 14 ]] && ok "--seq-length 16: prompt + generated = 16 (14 new tokens)" ||
  fail "$n new tokens after a 2-token prompt with --seq-length 16"
expect_error "--fp16 differs from the checkpoint's fp32 weights" --load "$tmp/ckpt" "${words[@]}" --fp16
expect_error "--sample-output-file" --load "$tmp/ckpt" "${words[@]}" --out-seq-length 2 \
  --sample-output-file "$tmp/no/such/dir/out.jsonl"
[[ -z $(find "$tmp/no" 2>/dev/null) ]] && ok "no partial output file" || fail "an output file was left behind"
[[ ! -s $tmp/out ]] && ok "the bad --sample-output-file is reported before generating" ||
  fail "generated before reporting the bad --sample-output-file: $(cat "$tmp/out")"
# A model of another vocabulary (synthetic tokens, 512) against the GPT-2 tokenizer.
"$train" --config "$repo/configs/gpt2-tiny.yaml" --device cpu --train-iters 1 --lr-warmup-iters 0 --eval-iters 0 \
  --save "$tmp/synthetic" >/dev/null 2>&1
expect_error "the tokenizer has 50257 tokens but the checkpoint's model 512" --load "$tmp/synthetic" "${words[@]}"
echo "generate cases failing: $fails"
((fails == 0))
