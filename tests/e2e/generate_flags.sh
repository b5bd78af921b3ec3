#!/usr/bin/env bash
# trident-generate's flag checks that need no model: each bad combination is one line that
# names the flags, exit 2, reported before any checkpoint is read (--load names a folder
# that does not exist, so a check made later would name --load instead).
#   tests/e2e/generate_flags.sh <trident-generate> <gpt2 dir>
set -uo pipefail
generate=$1 vocab=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
base=(--load "$tmp/no-checkpoint" --vocab-file "$vocab/gpt2-vocab.json" --merge-file "$vocab/gpt2-merges.txt"
      --device cpu)

expect_error() {  # expect_error <text in the one error line> <args...>
  local text=$1
  shift
  "$generate" "${base[@]}" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 || $(wc -l <"$tmp/err") -ne 1 ]] || ! grep -qF -- "$text" "$tmp/err" ||
     ! grep -q '^trident-generate: error: ' "$tmp/err"; then
    fail "$* -> rc=$rc, stderr: $(cat "$tmp/err")"
  else
    ok "$(cat "$tmp/err")"
  fi
}

# A switch with a value, a value flag followed by a flag, a stray word: each named (cxxopts
# would turn --greedy=false on, write ./--greedy, and ignore the word).
expect_error "--greedy takes no value (write --greedy alone)" --prompt hi --greedy=false
expect_error "--sample-output-file: expected a value, got the flag --greedy" --prompt hi --sample-output-file --greedy
expect_error "unexpected argument 'stray'" --prompt hi stray
# Both spellings of one flag.
expect_error "--top-k and --top_k" --prompt hi --top-k 5 --top_k 7
expect_error "--top-p and --top_p" --prompt hi --top_p 0.9 --top-p 0.5
# One spelling alone is fine: the error is the missing checkpoint.
expect_error "--load" --prompt hi --top_k 5 --top_p 0.9

# --num-samples N > 0 is for unconditional samples: with prompts it is an error naming both flags.
printf 'A prompt\n' >"$tmp/prompts.txt"
expect_error "--num-samples (unconditional samples) cannot be combined with --prompt" --prompt hi --num-samples 3
expect_error "--num-samples (unconditional samples) cannot be combined with --sample-input-file" \
  --sample-input-file "$tmp/prompts.txt" --num-samples 2
expect_error "--load" --num-samples 2
# A directory is not a file of prompts; numbers are Python's float(), not C's hex floats.
expect_error "--sample-input-file: $tmp is a directory, not a file of prompts" --sample-input-file "$tmp"
expect_error "--top-p: expected a number, got \"0x1p-1\"" --prompt hi --top-p 0x1p-1
# 0 is Megatron's prompt mode: fine with prompts, an error without.
expect_error "--load" --sample-input-file "$tmp/prompts.txt" --num-samples 0
expect_error "--num-samples 0 (prompt mode) needs --prompt or --sample-input-file" --num-samples 0

# A --sample-output-file that cannot be written: reported before the checkpoint is read
# (so before anything is generated), and nothing left behind.
expect_error "--sample-output-file: $tmp/no/dir/out.jsonl: no directory $tmp/no/dir" \
  --prompt hi --sample-output-file "$tmp/no/dir/out.jsonl"
mkdir "$tmp/outdir"
expect_error "--sample-output-file: $tmp/outdir is a directory" --prompt hi --sample-output-file "$tmp/outdir"
# A folder where no file can be created (even by root).
if [[ -d /proc ]]; then
  expect_error "--sample-output-file: /proc/trident-out.jsonl: cannot create temporary file" \
    --prompt hi --sample-output-file /proc/trident-out.jsonl
fi
# A writable one: the check leaves no file (the error is the missing checkpoint).
expect_error "--load" --prompt hi --sample-output-file "$tmp/outdir/out.jsonl"
[[ -z $(ls -A "$tmp/outdir") && ! -e "$tmp/no" ]] && ok "no output or temporary file left behind" ||
  fail "left behind: $(ls -A "$tmp/outdir" "$tmp/no" 2>&1)"

# Megatron's flags: --micro-batch-size is --batch-size (both at once: one line); --recompute
# and the model's shape are accepted before the checkpoint is read (the error is --load).
expect_error "--batch-size and --micro-batch-size are the same flag" --num-samples 2 --batch-size 2 --micro-batch-size 2
expect_error "--load" --num-samples 2 --micro-batch-size 2 --recompute --num-layers 24 --hidden-size 1024 \
  --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --tensor-model-parallel-size 1 \
  --tokenizer-type GPT2BPETokenizer --genfile "$tmp/outdir/unconditional.json"
expect_error "--genfile holds unconditional samples (Megatron's format): with prompts use --sample-output-file" \
  --prompt hi --genfile "$tmp/outdir/g.json"
expect_error "--genfile: $tmp/no/dir/g.json: no directory $tmp/no/dir" --genfile "$tmp/no/dir/g.json"
# Two outputs in one file, or an output over its prompts (also spelled differently).
expect_error "--sample-output-file and --genfile name the same file $tmp/outdir/../outdir/s.json: give each its own" \
  --num-samples 2 --sample-output-file "$tmp/outdir/s.json" --genfile "$tmp/outdir/../outdir/s.json"
expect_error "--sample-input-file and --sample-output-file name the same file $tmp/prompts.txt: give each its own" \
  --sample-input-file "$tmp/prompts.txt" --sample-output-file "$tmp/prompts.txt"
expect_error "--num-layers: expected" --prompt hi --num-layers two
# One process per tensor-parallel rank: a lone process with --tensor-model-parallel-size 4
# is one line saying so (e2e_generate runs tp 2 under mpirun); no pipeline parallelism.
expect_error "--tensor-model-parallel-size 4: the job has 1 process;" --prompt hi \
  --tensor-model-parallel-size 4
expect_error "--pipeline-model-parallel-size 2: trident-generate splits a model by tensor parallelism only" \
  --prompt hi --pipeline-model-parallel-size 2
expect_error "--tokenizer-type BertWordPieceLowerCase: trident-generate reads GPT2BPETokenizer" --prompt hi \
  --tokenizer-type BertWordPieceLowerCase
[[ -z $(ls -A "$tmp/outdir") ]] && ok "no output file left behind" || fail "left behind: $(ls -A "$tmp/outdir")"

# Started as one of N > 1 processes by a launcher without MPI (the variables srun and
# mpirun_rsh set): rank 0 says so in one line before anything else, the others exit 2
# silently. (Under mpirun, e2e_generate.)
for launcher in "SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=0" "MV2_COMM_WORLD_SIZE=4 MV2_COMM_WORLD_RANK=0"; do
  read -r -a launcher_env <<<"$launcher"
  env "${launcher_env[@]}" "$generate" "${base[@]}" --prompt hi --sample-output-file "$tmp/outdir/s.json" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [[ $rc -eq 2 && $(wc -l <"$tmp/err") -eq 1 && ! -e $tmp/outdir/s.json ]] &&
    grep -q '^trident-generate: error: the launcher started 4 processes without MPI' "$tmp/err" &&
    ok "$launcher: $(cat "$tmp/err")" || fail "$launcher: rc=$rc $(cat "$tmp/err")"
done
rc=0
env SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=3 "$generate" "${base[@]}" --prompt hi >"$tmp/out" 2>"$tmp/err" || rc=$?
[[ $rc -eq 2 && ! -s $tmp/err && ! -s $tmp/out ]] && ok "rank 3 of 4: exit 2, nothing printed" ||
  fail "rank 3 of 4: rc=$rc, $(cat "$tmp/err")"

echo "generate flag cases failing: $fails"
((fails == 0))
