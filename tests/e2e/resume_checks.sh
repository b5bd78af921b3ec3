#!/usr/bin/env bash
# Resuming, and what a resume finds left in the directories (tiny model, CPU, .bin/.idx data):
#  - a resume the checkpoint cannot serve (a schedule that differs, --train-iters before the
#    checkpoint's iteration) fails with one line before the datasets' index maps are built
#    (no new cache file);
#  - a resumed run reports its peak memory after its first iteration, as a fresh one does;
#  - a checkpoint of a build before the samples took Megatron's order (no trainer_state
#    sample_order) resumes with a note that the order changed, and so does one resumed under
#    another --seed;
#  - a checkpoint temporary of another host is kept and named once; an index-map temporary
#    of a dead build on this host is removed and named;
#  - a metadata.json whose iteration is not its folder's is refused, naming both;
#  - trident-convert takes Megatron's --ckpt-step; its Hugging Face export removes a dead
#    export's temporary, and one that fails (a file-size limit) leaves no folder it made;
#  - one run saves into a directory at a time: a second trident-train or a trident-convert
#    --overwrite into the directory of a running run stops at start naming it; the lock goes
#    with the run; a run that fails at its start leaves no --save directory it created;
#  - Megatron's non-persistent checkpoints replace each other, and a resume (and trident-eval
#    given --non-persistent-ckpt-type) takes the newer;
#  - Megatron's --pretrained-checkpoint fine-tunes while --load holds no checkpoint, then resumes;
#  - Megatron-DeepSpeed's --no-load-lr-state restarts the learning-rate schedule of a resume.
# Usage: resume_checks.sh TRAIN CONVERT REPO EVAL
set -uo pipefail
train=$1
convert=$2
repo=$3
eval_tool=$4
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok $*"; }
host=$(hostname | tr -cd '[:alnum:]' | cut -c1-32)
dead_pid() { sleep 0 & local p=$!; wait "$p"; echo "$p"; }

# 60 documents of 30 tokens of a 512-id WordPiece vocabulary (Megatron's .bin/.idx, int32).
python3 - "$tmp/data" <<'EOF'
import struct, sys
prefix, docs, n = sys.argv[1], 60, 30
tokens = [(7 * d + t) % 500 for d in range(docs) for t in range(n)]
open(prefix + ".bin", "wb").write(struct.pack(f"<{len(tokens)}i", *tokens))
idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, docs, docs + 1)
idx += struct.pack(f"<{docs}i", *[n] * docs) + struct.pack(f"<{docs}q", *[d * n * 4 for d in range(docs)])
idx += struct.pack(f"<{docs + 1}q", *range(docs + 1))
open(prefix + ".idx", "wb").write(idx)
EOF
python3 -c 'print("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(507)]))' \
  >"$tmp/vocab.txt"
args=(--config "$repo/configs/gpt2-tiny.yaml" --device cpu --seq-length 16 --max-position-embeddings 16
      --micro-batch-size 2 --global-batch-size 4 --lr-warmup-iters 1 --log-interval 1 --eval-interval 4
      --eval-iters 1 --vocab-file "$tmp/vocab.txt" --tokenizer-type BertWordPieceLowerCase --data-path "$tmp/data"
      --data-cache-path "$tmp/cache" --save "$tmp/ck" --load "$tmp/ck")
"$train" "${args[@]}" --train-iters 4 >"$tmp/first.log" 2>&1 || { cat "$tmp/first.log"; fail "the first run"; }

# ---- the weight decay is saved as given (0.01); a checkpoint of an older build holds it
# rounded to fp32, which resumes all the same
sched() { python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["trainer_state"]["opt_param_scheduler"]; print(s["start_wd"], s["end_wd"])' "$1"; }
[[ $(sched "$tmp/ck/iter_0000004/metadata.json") == "0.01 0.01" ]] && ok "start_wd and end_wd saved as 0.01" ||
  fail "start_wd, end_wd saved as $(sched "$tmp/ck/iter_0000004/metadata.json")"
mkdir -p "$tmp/older"
cp -r "$tmp/ck/iter_0000004" "$tmp/older/"
echo 4 >"$tmp/older/latest_checkpointed_iteration.txt"
python3 - "$tmp/older/iter_0000004/metadata.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["trainer_state"]["opt_param_scheduler"].update(start_wd=0.009999999776482582, end_wd=0.009999999776482582)
assert m["trainer_state"].pop("sample_order") == "megatron"  # older builds shuffled their own way
json.dump(m, open(sys.argv[1], "w"))
EOF
if "$train" "${args[@]}" --train-iters 4 --load "$tmp/older" --save "$tmp/older" >"$tmp/older.log" 2>&1; then
  ok "a checkpoint with the weight decay rounded to fp32 resumes"
else
  fail "a checkpoint with the weight decay rounded to fp32"; cat "$tmp/older.log"
fi
note="was written by a trident build that shuffled the data its own way; this build orders the samples as Megatron does"
grep -qF "$note" "$tmp/older.log" && ok "a checkpoint of a build before Megatron's sample order: a note says so" ||
  { fail "no note of the older sample order"; cat "$tmp/older.log"; }
mkdir -p "$tmp/seeded"
cp -r "$tmp/ck/iter_0000004" "$tmp/seeded/"
echo 4 >"$tmp/seeded/latest_checkpointed_iteration.txt"
"$train" "${args[@]}" --train-iters 4 --seed 99 --load "$tmp/seeded" --save "$tmp/seeded" >"$tmp/seeded.log" 2>&1
grep -qF "iter_0000004's run ordered its samples with --seed 1234; this run's --seed 99 orders them otherwise" \
  "$tmp/seeded.log" && ok "a resume under another --seed: a note says the sample order differs" ||
  { fail "no note of another --seed"; cat "$tmp/seeded.log"; }
grep -qF "orders them otherwise" "$tmp/older.log" && fail "the --seed note on a resume with the same seed"

# ---- resumes that cannot go on: one line, before the index maps
cache_before=$(ls "$tmp/cache")
"$train" "${args[@]}" --train-iters 40 >"$tmp/longer.log" 2>&1
rc=$?
if [[ $rc -eq 2 && $(ls "$tmp/cache") == "$cache_before" ]] && ! grep -q '^ iteration ' "$tmp/longer.log" &&
    grep -q "^trident-train: error: --load: .*iter_0000004: the learning-rate and weight-decay schedule differs" "$tmp/longer.log"; then
  ok "a schedule that differs fails before any index map is built"
else
  fail "a schedule that differs: rc $rc, cache $(ls "$tmp/cache" | wc -l) files (was $(wc -l <<<"$cache_before"))"
  cat "$tmp/longer.log"
fi
"$train" "${args[@]}" --train-iters 2 --lr-decay-iters 4 >"$tmp/shorter.log" 2>&1
rc=$?
want="is at iteration 4, past this run's last iteration 2 (--train-iters 2): nothing to train; a larger value continues the run"
if [[ $rc -eq 2 && $(ls "$tmp/cache") == "$cache_before" ]] && grep -qF "$want" "$tmp/shorter.log"; then
  ok "--train-iters before the checkpoint's iteration: $(grep error "$tmp/shorter.log")"
else
  fail "--train-iters before the checkpoint's iteration: rc $rc"; cat "$tmp/shorter.log"
fi

# ---- a resumed run, with another host's checkpoint temporary
other=$tmp/ck/iter_0000002.tmp-otherhost-4242-0-1-2
mkdir -p "$other/mp_rank_00"
"$train" "${args[@]}" --train-iters 8 --override-opt_param-scheduler --save-interval 2 >"$tmp/resumed.log" 2>&1
rc=$?
notes=$(grep -c "^trident: note: $other is kept: its save or deletion may still run" "$tmp/resumed.log")
if [[ $rc -eq 0 && $notes -eq 1 && -d $other && $(grep -c '^trident: saved checkpoint' "$tmp/resumed.log") -eq 2 ]]; then
  ok "another host's temporary is kept and named once over two saves"
else
  fail "another host's temporary: rc $rc, $notes notes, $([[ -d $other ]] && echo kept || echo removed)"
  cat "$tmp/resumed.log"
fi
grep -qF "$note" "$tmp/resumed.log" && fail "the note of the older sample order on a checkpoint of this build"
if grep -q '^trident: after the first iteration: [0-9.]* MiB peak memory on rank 0' "$tmp/resumed.log"; then
  ok "the resumed run reports its peak memory"
else
  fail "the resumed run does not report its peak memory"
fi
# The same run again (it loads iteration 8 and only evaluates) after a build of its training
# index map died on this host, leaving a temporary in place of the map.
map=$(ls -t "$tmp/cache"/*_train_indexmap_*.tidx | head -1)  # the resumed run's
rm "$map"
stale_map=$map.tmp.$host.$(dead_pid).abc123
echo partial >"$stale_map"
"$train" "${args[@]}" --train-iters 8 >"$tmp/again.log" 2>&1
rc=$?
if [[ $rc -eq 0 && ! -e $stale_map && -e $map ]] &&
    grep -qF "trident: removed $stale_map, left by an index-map build whose process is gone" "$tmp/again.log"; then
  ok "a dead build's index-map temporary is removed and named"
else
  fail "the index-map temporary: rc $rc, $(ls "$tmp/cache")"; cat "$tmp/again.log"
fi

# ---- metadata.json edited to another iteration than its folder's
mkdir -p "$tmp/edited"
cp -r "$tmp/ck/iter_0000004" "$tmp/edited/"
echo 4 >"$tmp/edited/latest_checkpointed_iteration.txt"
python3 - "$tmp/edited/iter_0000004/metadata.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["iteration"] = 2
json.dump(m, open(sys.argv[1], "w"))
EOF
"$train" "${args[@]}" --train-iters 8 --load "$tmp/edited" --save "$tmp/edited" >"$tmp/edited.log" 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -qF "iter_0000004/metadata.json: says iteration 2, but its folder is iter_0000004" "$tmp/edited.log"; then
  ok "metadata.json of another iteration than its folder: $(grep error "$tmp/edited.log")"
else
  fail "metadata.json of another iteration: rc $rc"; cat "$tmp/edited.log"
fi

# ---- trident-convert: --ckpt-step, and the Hugging Face export's temporaries and failures
if "$convert" --load "$tmp/ck" --ckpt-step 4 --save "$tmp/c4" --no-optimizer >"$tmp/c4.log" 2>&1 &&
    grep -q "iter_0000004 (iteration 4" "$tmp/c4.log"; then
  ok "trident-convert --ckpt-step 4"
else
  fail "trident-convert --ckpt-step"; cat "$tmp/c4.log"
fi
stale_hf=$tmp/hf.tmp-$host-$(dead_pid)-0-1-2
mkdir -p "$stale_hf"
if "$convert" --to hf --load "$tmp/ck" --save "$tmp/hf" >"$tmp/hf.log" 2>&1 && [[ ! -e $stale_hf && -d $tmp/hf ]] &&
    grep -qF "removed $stale_hf, left by an export whose process is gone" "$tmp/hf.log"; then
  ok "the export removes a dead export's temporary"
else
  fail "the dead export's temporary: $(ls "$tmp")"; cat "$tmp/hf.log"
fi
(ulimit -f 64; trap '' XFSZ; exec "$convert" --to hf --load "$tmp/ck" --save "$tmp/made/here/hf") >"$tmp/hf2.log" 2>&1
rc=$?
if [[ $rc -eq 3 && ! -e $tmp/made ]]; then  # 3: a full disk is no bad input
  ok "a failed export leaves no folder it made: $(cat "$tmp/hf2.log")"
else
  fail "a failed export: rc $rc, $(ls -R "$tmp/made" 2>&1 | head -5)"; cat "$tmp/hf2.log"
fi
# ---- a save that fails (a full disk: here a file-size limit) leaves no temporary behind,
# and no --save folder the run made; into an existing folder, with --async-save, neither.
# Exit 3, a runtime failure: a full disk is not the user's input (a rerun with room succeeds).
for async in "" --async-save; do
  [[ -n $async ]] && mkdir -p "$tmp/full"
  (ulimit -f 256; trap '' XFSZ; exec "$train" "${args[@]}" --train-iters 2 --load "$tmp/full/ck" --save "$tmp/full/ck" \
    $async) \
    >"$tmp/full.log" 2>&1
  rc=$?
  left=$(find "$tmp/full" -name "iter_*" 2>/dev/null)
  if [[ $rc -eq 3 && -z $left ]] && grep -q "write failed after .*File too large" "$tmp/full.log" &&
      { [[ -n $async ]] || [[ ! -e $tmp/full ]]; }; then
    ok "a failed save${async:+ ($async)} leaves nothing behind: $(grep error "$tmp/full.log")"
  else
    fail "a failed save${async:+ ($async)}: rc $rc, left: $left $(ls -A "$tmp/full" 2>&1)"; cat "$tmp/full.log"
  fi
  rm -rf "$tmp/full"
done
# ---- one run saves into a directory at a time (a new one: the first run creates and locks
# it at its start, long before its first save)
"$train" "${args[@]}" --train-iters 100000 --save "$tmp/busy" --load "$tmp/busy" >"$tmp/busy_a.log" 2>&1 &
first=$!
for _ in $(seq 600); do grep -q '^ iteration ' "$tmp/busy_a.log" && break; sleep 0.1; done
"$train" "${args[@]}" --train-iters 100000 --save "$tmp/busy" --load "$tmp/busy" >"$tmp/busy_b.log" 2>&1
rc=$?
holder="is being saved into by another run (trident-train pid $first on host $host since "
if [[ $rc -eq 2 ]] && grep -qF "trident-train: error: --save: $tmp/busy $holder" "$tmp/busy_b.log" &&
    ! grep -q '^ iteration ' "$tmp/busy_b.log"; then
  ok "a second run saving into a running run's directory stops at start: $(cat "$tmp/busy_b.log")"
else
  fail "a second run into a running run's directory: rc $rc"; cat "$tmp/busy_b.log"
fi
"$convert" --load "$tmp/ck" --save "$tmp/busy" --overwrite --no-optimizer >"$tmp/busy_c.log" 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -qF "$tmp/busy $holder" "$tmp/busy_c.log" && ! ls "$tmp/busy" | grep -q '^iter_0000008'; then
  ok "trident-convert --overwrite into a running run's directory is refused"
else
  fail "trident-convert --overwrite into a running run's directory: rc $rc"; cat "$tmp/busy_c.log"
fi
kill -TERM "$first"
wait "$first"
rc=$?
if [[ $rc -eq 0 ]] && "$convert" --load "$tmp/ck" --save "$tmp/busy" --overwrite --no-optimizer >"$tmp/busy_d.log" 2>&1; then
  ok "the lock goes with its run: a conversion into the directory works after it"
else
  fail "after the run that held the lock: rc $rc"; cat "$tmp/busy_a.log" "$tmp/busy_d.log"
fi
# A run that fails at its start leaves no --save directory it created.
"$train" "${args[@]}" --train-iters 8 --save "$tmp/made_for/ck" --load "$tmp/no_such" --exit-on-missing-checkpoint \
  >"$tmp/nosave.log" 2>&1
rc=$?
[[ $rc -eq 2 && ! -e $tmp/made_for ]] && ok "a failed start leaves no --save directory: $(cat "$tmp/nosave.log")" ||
  { fail "a failed start: rc $rc, $(ls -aR "$tmp/made_for" 2>&1 | head -5)"; cat "$tmp/nosave.log"; }
# Megatron's non-persistent checkpoints: every 2 iterations into np/non_persistent, each
# replacing the one before (4 replaces 2; 5 is --save's, and the run exits there). With
# --save's checkpoint gone (as if the run had died in iteration 5), the resume takes the
# non-persistent one.
np_args=(--save-interval 5 --non-persistent-save-interval 2 --non-persistent-ckpt-type global --save "$tmp/np"
         --load "$tmp/np")
"$train" "${args[@]}" "${np_args[@]}" --train-iters 8 --exit-interval 5 >"$tmp/np1.log" 2>&1 || { cat "$tmp/np1.log"; fail "non-persistent run"; }
listed=$(cd "$tmp/np" && ls -d iter_* non_persistent/iter_* | tr '\n' ' ')
[[ $listed == "iter_0000005 non_persistent/iter_0000004 " ]] && ok "non-persistent saves: $listed" ||
  fail "non-persistent saves: $listed"
rm -rf "$tmp/np"/iter_* "$tmp/np/latest_checkpointed_iteration.txt"
"$eval_tool" "${args[@]:0:${#args[@]}-4}" --load "$tmp/np" --non-persistent-ckpt-type global >"$tmp/np_eval.log" 2>&1
grep -qF "$tmp/np/non_persistent/iter_0000004" "$tmp/np_eval.log" && ok "trident-eval takes the non-persistent checkpoint" ||
  { fail "trident-eval with --non-persistent-ckpt-type global"; cat "$tmp/np_eval.log"; }
"$train" "${args[@]}" "${np_args[@]}" --train-iters 8 >"$tmp/np2.log" 2>&1
grep -qF "trident: loaded non-persistent checkpoint $tmp/np/non_persistent/iter_0000004" "$tmp/np2.log" &&
  grep -q '^ iteration        5/' "$tmp/np2.log" && ok "resumed from the non-persistent checkpoint at iteration 4" ||
  { fail "resume from the non-persistent checkpoint"; cat "$tmp/np2.log"; }
# Megatron's --pretrained-checkpoint: --load holding no checkpoint, the run fine-tunes from the
# pretrained one (the losses of --load it --finetune); restarted, it resumes from its own save.
# With neither holding one: one line, no --save directory left.
pre=(--pretrained-checkpoint "$tmp/ck" --load "$tmp/ft" --save "$tmp/ft" --train-iters 6 --exit-on-missing-checkpoint)
"$train" "${args[@]:0:${#args[@]}-4}" "${pre[@]}" --exit-interval 3 >"$tmp/pre1.log" 2>&1
"$train" "${args[@]:0:${#args[@]}-4}" --load "$tmp/ck" --finetune --train-iters 6 --exit-interval 3 >"$tmp/pre_ref.log" 2>&1
"$train" "${args[@]:0:${#args[@]}-4}" "${pre[@]}" >"$tmp/pre2.log" 2>&1
losses() { grep '^ iteration' "$1" | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/'; }
if grep -qF "fine-tuning from --pretrained-checkpoint $tmp/ck" "$tmp/pre1.log" &&
    [[ $(losses "$tmp/pre1.log") == "$(losses "$tmp/pre_ref.log")" && -n $(losses "$tmp/pre1.log") ]] &&
    grep -qF "trident: loaded checkpoint $tmp/ft/iter_0000003" "$tmp/pre2.log" && grep -q '^ iteration        4/' "$tmp/pre2.log"; then
  ok "--pretrained-checkpoint: fine-tuned from it (the losses of --finetune), then resumed from --load's iteration 3"
else
  fail "--pretrained-checkpoint"; cat "$tmp/pre1.log" "$tmp/pre2.log"
fi
"$train" "${args[@]:0:${#args[@]}-4}" --pretrained-checkpoint "$tmp/none" --load "$tmp/none2" --save "$tmp/none2" \
  --train-iters 3 >"$tmp/pre3.log" 2>&1
rc=$?
[[ $rc -eq 2 && ! -e $tmp/none2 ]] && grep -q "^trident-train: error: --pretrained-checkpoint $tmp/none: no checkpoint there, nor in --load $tmp/none2" "$tmp/pre3.log" &&
  ok "$(tail -1 "$tmp/pre3.log")" || { fail "--pretrained-checkpoint without a checkpoint: rc $rc"; cat "$tmp/pre3.log"; }
# Megatron-DeepSpeed's --no-load-lr-state: the optimizer's state loads, the learning-rate
# schedule starts at step 0: the resumed run's rate at iteration 4 is a fresh run's at 1.
lr_of() { grep "^ iteration *$2/" "$1" | sed -E 's/.*learning rate: ([0-9.E+-]+).*/\1/'; }
"$train" "${args[@]:0:${#args[@]}-4}" --train-iters 6 --exit-interval 3 --save "$tmp/nolr" >"$tmp/nolr1.log" 2>&1
"$train" "${args[@]:0:${#args[@]}-4}" --train-iters 6 --load "$tmp/nolr" --no-load-lr-state >"$tmp/nolr2.log" 2>&1
"$train" "${args[@]:0:${#args[@]}-4}" --train-iters 6 --load "$tmp/nolr" --no-load-optim >"$tmp/nolr3.log" 2>&1
loss_of() { grep "^ iteration *$2/" "$1" | sed -E 's/.*lm loss: ([0-9.E+-]+).*/\1/'; }
if grep -q "with the learning-rate and weight-decay schedule from step 0 (--no-load-lr-state)" "$tmp/nolr2.log" &&
    [[ -n $(loss_of "$tmp/nolr3.log" 6) && $(loss_of "$tmp/nolr2.log" 6) != "$(loss_of "$tmp/nolr3.log" 6)" ]] &&
    [[ -n $(lr_of "$tmp/nolr2.log" 4) && $(lr_of "$tmp/nolr2.log" 4) == "$(lr_of "$tmp/nolr1.log" 1)" &&
       $(lr_of "$tmp/nolr2.log" 5) == "$(lr_of "$tmp/nolr1.log" 2)" ]]; then
  ok "--no-load-lr-state: resumed at 3 with the schedule from step 0 (rate at 4 and 5 = a fresh run's at 1 and 2), the optimizer's state loaded (iteration 6's loss is not --no-load-optim's; the first step's rate is 0)"
else
  fail "--no-load-lr-state"; cat "$tmp/nolr2.log"
fi
echo "resume checks failing: $fails"
[[ $fails -eq 0 ]]
