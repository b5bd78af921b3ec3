#!/usr/bin/env bash
# trident-train on .bin/.idx data that cannot train as asked (tiny model, CPU):
#  - int32 tokens of another vocabulary (ids past the tokenizer's 512): a warning at start
#    that int32 data for a vocabulary this small is unusual, then one error line naming the
#    .bin, the id and the vocabulary size, exit 2;
#  - int64 tokens that do not fit int32: one error line naming the .bin and the value;
#  - --split 969,30,1 over 10 documents (boundaries 9.69, 9.99, 10 rounded) leaves no
#    validation and no test documents: one warning each, naming the flag, the prefix and
#    its document count; training runs;
#  - with MPI, 2 ranks: the warnings once (rank 0; also that an unwritable --data-cache-path
#    keeps the index maps in memory), the bad ids end the job (no hang), and
#    rank 0 builds first: with a corrupt .idx that only rank 0 reads, the job ends with one
#    line, rank 0's, naming the file, and rank 1 builds nothing (it neither builds alongside
#    rank 0 nor waits for it forever).
# Usage: data_checks.sh TRAIN_BINARY REPO [MPI: ON when the build has MPI]
set -uo pipefail
train=$1
repo=$2
with_mpi=${3:-OFF}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok $*"; }

# make_data PREFIX DTYPE_CODE DOCS TOKENS_PER_DOC BAD_ID: Megatron's .bin/.idx written here
# (struct codes: 4 int32, 5 int64, 8 uint16); token t of document d is (7 d + t) % 500, and
# BAD_ID (when not 0) replaces the middle token of every document.
make_data() {
  python3 - "$@" <<'EOF'
import struct, sys
prefix, code, docs, n, bad = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
fmt, size = {4: ("i", 4), 5: ("q", 8), 8: ("H", 2)}[code]
tokens = []
for d in range(docs):
    doc = [(7 * d + t) % 500 for t in range(n)]
    if bad:
        doc[n // 2] = bad
    tokens += doc
with open(prefix + ".bin", "wb") as f:
    f.write(struct.pack(f"<{len(tokens)}{fmt}", *tokens))
idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, docs, docs + 1)
idx += struct.pack(f"<{docs}i", *[n] * docs)
idx += struct.pack(f"<{docs}q", *[d * n * size for d in range(docs)])
idx += struct.pack(f"<{docs + 1}q", *range(docs + 1))
with open(prefix + ".idx", "wb") as f:
    f.write(idx)
EOF
}
python3 -c 'print("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(507)]))' \
  >"$tmp/vocab.txt"  # 512 ids
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --seq-length 16 --micro-batch-size 2
      --global-batch-size 4 --train-iters 4 --lr-warmup-iters 1 --log-interval 1 --eval-interval 2 --eval-iters 1
      --vocab-file "$tmp/vocab.txt" --tokenizer-type BertWordPieceLowerCase --data-cache-path "$tmp/cache")

# expect_error NAME LOG RC WANT_RC PATTERN...: exit status WANT_RC ("failed": any but 0 and
# timeout's 124), one error line, every pattern in it
expect_error() {
  local name=$1 log=$2 rc=$3 want=$4
  shift 4
  local line rc_ok=0
  line=$(grep 'trident-train: error' "$log")
  if [[ $want == failed ]]; then [[ $rc -ne 0 && $rc -ne 124 ]] && rc_ok=1; else [[ $rc -eq $want ]] && rc_ok=1; fi
  if [[ $rc_ok -eq 0 || $(grep -c 'trident-train: error' "$log") -ne 1 ]]; then
    fail "$name: exit $rc (want $want), error lines:"; cat "$log"; return
  fi
  for p in "$@"; do
    grep -qF -- "$p" <<<"$line" || { fail "$name: '$p' not in: $line"; return; }
  done
  ok "$name: $line"
}

# ---- ids of another vocabulary
make_data "$tmp/foreign" 4 40 30 600
"$train" "${args[@]}" --data-path "$tmp/foreign" >"$tmp/foreign.log" 2>&1
expect_error "ids past the vocabulary" "$tmp/foreign.log" $? 2 "$tmp/foreign.bin" "token id 600" "512"
grep -q '^ iteration ' "$tmp/foreign.log" && fail "ids past the vocabulary: an iteration was logged"
if grep -q "warning: $tmp/foreign: int32 tokens" "$tmp/foreign.log"; then
  ok "int32 data for a 512-id vocabulary: $(grep 'warning: .*int32' "$tmp/foreign.log")"
else
  fail "no warning for int32 data with a 512-id vocabulary"; cat "$tmp/foreign.log"
fi

# ---- int64 ids that int32 cannot hold
make_data "$tmp/wide" 5 40 30 8589934592
"$train" "${args[@]}" --data-path "$tmp/wide" >"$tmp/wide.log" 2>&1
expect_error "int64 id past int32" "$tmp/wide.log" $? 2 "$tmp/wide.bin" "8589934592"

# ---- a split left without documents
make_data "$tmp/few" 8 10 60 0
"$train" "${args[@]}" --data-path "$tmp/few" --split 969,30,1 >"$tmp/few.log" 2>&1
rc=$?
want_valid="warning: --split 969,30,1 leaves no validation documents in $tmp/few (10 documents): no validation"
want_test="warning: --split 969,30,1 leaves no test documents in $tmp/few (10 documents): no test"
if [[ $rc -eq 0 && $(grep -cF "$want_valid" "$tmp/few.log") -eq 1 && $(grep -cF "$want_test" "$tmp/few.log") -eq 1 ]] &&
   ! grep -q 'validation loss' "$tmp/few.log" && [[ $(grep -c '^ iteration ' "$tmp/few.log") -eq 4 ]]; then
  ok "empty validation and test splits: one warning each, 4 iterations, no evaluation"
else
  fail "empty splits (exit $rc)"; cat "$tmp/few.log"
fi
"$train" "${args[@]}" --data-path "$tmp/few" --split 1,1,1 >"$tmp/few111.log" 2>&1 || fail "--split 1,1,1 run failed"
grep -q 'warning' "$tmp/few111.log" && fail "a warning with every split non-empty: $(grep warning "$tmp/few111.log")"

# ---- two ranks
if [[ $with_mpi == ON ]]; then
  mpi() { timeout 120 mpirun --oversubscribe -np 2 --bind-to none "$train" "${args[@]}" "$@"; }
  mpi --data-path "$tmp/few" --split 969,30,1 --data-cache-path "$tmp/cache2" >"$tmp/np2_few.log" 2>&1
  rc=$?
  if [[ $rc -eq 0 && $(grep -cF "$want_valid" "$tmp/np2_few.log") -eq 1 ]]; then
    ok "np2: the empty-split warning once"
  else
    fail "np2 empty splits (exit $rc)"; cat "$tmp/np2_few.log"
  fi
  # A cache folder that cannot be made (it would lie under a file): both ranks keep their maps
  # in memory and train; the warning comes once, from rank 0.
  : >"$tmp/a-file"
  mpi --data-path "$tmp/few" --split 1,1,1 --data-cache-path "$tmp/a-file/cache" >"$tmp/np2_nocache.log" 2>&1
  rc=$?
  if [[ $rc -eq 0 && $(grep -c "warning: cannot write the index cache $tmp/a-file/cache/" "$tmp/np2_nocache.log") -eq 3 &&
        $(grep -c '^ iteration ' "$tmp/np2_nocache.log") -eq 4 ]]; then
    ok "np2: an unwritable cache folder warned once per index map (3: train, valid, test), not once per rank"
  else
    fail "np2 unwritable cache folder (exit $rc)"; cat "$tmp/np2_nocache.log"
  fi
  mpi --data-path "$tmp/foreign" >"$tmp/np2_foreign.log" 2>&1
  rc=$?
  if [[ $rc -ne 0 && $rc -ne 124 ]] && grep -qF "$tmp/foreign.bin" "$tmp/np2_foreign.log" &&
     grep -qF "token id 600" "$tmp/np2_foreign.log"; then
    ok "np2: ids past the vocabulary end the job (exit $rc)"
  else
    fail "np2 ids past the vocabulary (exit $rc)"; cat "$tmp/np2_foreign.log"
  fi
  # Every rank identifies its data before anything is built (same_data_check.h), and rank 0
  # builds the index maps before the others: its failure stops them all with its message.
  # Rank 0's .idx is a FIFO held open until the test lets it go, then fails (a FIFO is not a
  # regular file, which an index must be to be mapped); rank 1 (mpirun's MPMD form) reads good
  # data with a cache folder of its own, which must stay empty: rank 1 waits for rank 0
  # instead of building alongside it. Wanted: one error line, rank 0's, naming its .idx.
  mkfifo "$tmp/held.idx"
  : >"$tmp/held.bin"
  timeout 120 mpirun --oversubscribe --bind-to none -np 1 "$train" "${args[@]}" --data-path "$tmp/held" \
    : -np 1 "$train" "${args[@]}" --data-path "$tmp/few" --data-cache-path "$tmp/cache-rank1" >"$tmp/np2_held.log" 2>&1 &
  job=$!
  sleep 3
  built_early=$(find "$tmp/cache-rank1" -type f 2>/dev/null | wc -l)
  timeout 60 bash -c ': >"$1"' _ "$tmp/held.idx" &  # returns once rank 0 has it open
  release=$!
  wait "$job"
  rc=$?
  : <>"$tmp/held.idx"  # lets the writer go if rank 0 never opened it
  wait "$release"
  if [[ $built_early -ne 0 || $(find "$tmp/cache-rank1" -type f 2>/dev/null | wc -l) -ne 0 ]]; then
    fail "np2: rank 1 built index maps before rank 0 had built (or after rank 0 failed)"; cat "$tmp/np2_held.log"
  else
    expect_error "np2: a corrupt .idx on rank 0 alone, rank 1 waiting" "$tmp/np2_held.log" "$rc" failed \
      "$tmp/held.idx" "not a regular file"
    grep -q "error on rank 1" "$tmp/np2_held.log" && fail "np2: rank 1 reported an error of its own"
  fi
fi
[[ $fails -eq 0 ]]
