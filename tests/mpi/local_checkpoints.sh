#!/usr/bin/env bash
# Megatron's local non-persistent checkpoints (--non-persistent-ckpt-type local) on 4 ranks:
#  - each rank keeps one, its own, in LDIR/<world rank>; under fully_parallel the data-parallel
#    ranks split what they share (their model files hold disjoint parameters that together are
#    the stage's), under atomic each holds all of it;
#  - a run that died after its local save at 6 (--save's latest 4) resumes from it: every
#    logged value after iteration 6 and every final parameter bit-identical to the
#    uninterrupted run's (fully_parallel at tp2 x dp2 with ZeRO 0 in fp32 and at pp2 x dp2 with
#    ZeRO 1 in fp16 with --async-save; atomic at tp2 x dp2 with ZeRO 1 in bf16); a newer save
#    held by one rank only is passed over for the newest that all hold;
#  - passed over with a note, resuming from --load's latest: a rank whose folder is lost (a node
#    replaced), ranks holding different saves of one iteration, another layout, a corrupt file;
#  - after a save that only some ranks committed, the resume takes the previous one that all
#    hold (also under --exit-on-missing-checkpoint, with --load empty), and its saves leave
#    each rank one;
#  - --replication: each rank keeps its clique's copies too (pairs, and one clique of four), a
#    lost folder comes back from a copy on resume, bit-identical, a copy missing a file restores
#    nothing, a copy that is damaged (a flipped byte) or incomplete passes the restore to the
#    next holder's, and a save under other cliques removes the old cliques' copies;
#  - a file system without room for its ranks' saves beside their previous ones is named at the
#    start (free space faked at 0.5, 1.5 and 2.2 times the files a save wrote; 1.5 suffices where
#    an earlier run's saves lie, which the first commit deletes).
# Usage: local_checkpoints.sh TRAIN_BINARY REPO
set -euo pipefail
train=$1
repo=$2
# shellcheck source=tests/mpi/mpi_test_lib.sh
source "$repo/tests/mpi/mpi_test_lib.sh"
args=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers 4 --device cpu --train-iters 10 --lr-decay-iters 10
      --log-interval 1 --lr-warmup-iters 2 --micro-batch-size 2 --global-batch-size 8 --hidden-dropout 0.1
      --attention-dropout 0.1 --eval-iters 0)
launch() { mpirun --oversubscribe -np 4 --bind-to none "$train" "${args[@]}" "$@"; }
# Every logged value of iterations after $2 (learning rate, loss, loss scale).
logged_after() {
  grep -E '^ iteration' "$1" | awk -v after="$2" '{ split($2, n, "/"); if (n[1] + 0 > after) print }' |
    grep -oE '(learning rate|lm loss|loss scale): [^ |]+'
}
# The tensor names of a safetensors file, one per line.
names() { python3 -c 'import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
print("\n".join(sorted(k for k in json.loads(f.read(n)) if k != "__metadata__")))' "$1"; }

# resumes <tag> <flags...>: the uninterrupted run, the run that dies in iteration 7 after its
# local save at 6, and its resume; leaves $d for the checks after it.
resumes() {
  local tag=$1
  shift
  d="$tmp/$tag"
  local_flags=(--non-persistent-save-interval 3 --non-persistent-ckpt-type local --non-persistent-local-ckpt-dir "$d/L")
  mkdir -p "$d"
  launch "$@" --save-canonical "$d/straight.st" >"$d/straight.log"
  launch "$@" --save "$d/ckpt" --save-interval 4 "${local_flags[@]}" --exit-interval 7 >"$d/first.log"
  local held
  held=$(cd "$d/L" && ls -d */iter_* | tr '\n' ' ')
  [[ $held == "0/iter_0000006 1/iter_0000006 2/iter_0000006 3/iter_0000006 " ]] &&
    echo "$tag: each rank keeps its own: $held" || fail "$tag: local checkpoints held: $held"
  grep -q "saved local non-persistent checkpoint at iteration 6 to $d/L/0/iter_0000006" "$d/first.log" ||
    fail "$tag: no local save at 6 in the log"
  # As if the job had died in iteration 7: --save's latest is 4.
  rm -rf "$d/ckpt/iter_0000007"
  printf 4 >"$d/ckpt/latest_checkpointed_iteration.txt"
  # A newer save that one rank alone committed is passed over.
  cp -r "$d/L/1/iter_0000006" "$d/L/1/iter_0000099"
  sed -i 's/^  "iteration": 6,/  "iteration": 99,/' "$d/L/1/iter_0000099/metadata.json"
  launch "$@" --load "$d/ckpt" --save "$d/ckpt" --save-interval 4 "${local_flags[@]}" \
    --save-canonical "$d/resumed.st" >"$d/second.log"
  rm -rf "$d/L/1/iter_0000099"
  grep -q "loaded non-persistent checkpoint $d/L/0/iter_0000006 " "$d/second.log" ||
    { fail "$tag: did not resume from the local checkpoint"; grep trident: "$d/second.log"; return; }
  logged_after "$d/straight.log" 6 >"$d/a.txt"
  logged_after "$d/second.log" 6 >"$d/b.txt"
  if cmp -s "$d/a.txt" "$d/b.txt" && [[ $(grep -c 'lm loss' "$d/a.txt") -eq 4 ]]; then
    echo "$tag: resumed from the local save at 6: $(wc -l <"$d/a.txt") logged values identical"
  else
    fail "$tag: logged values differ after resume"; paste "$d/a.txt" "$d/b.txt"
  fi
  python3 "$repo/tests/mpi/compare_params.py" "$d/straight.st" "$d/resumed.st" 0 "$tag" || fail "$tag: parameters"
}

resumes "fully_parallel tp2 dp2 zero 0 fp32" --tensor-model-parallel-size 2
# Ranks 0 and 2 are tensor-parallel rank 0 of the two data-parallel replicas: their model files
# split the parameters (the resume's save at 9 is the one left); so do their optimizer files.
m0=$(names "$d/L/0/iter_0000009/mp_rank_00/model.safetensors")
m2=$(names "$d/L/2/iter_0000009/mp_rank_00/model.safetensors")
all=$(names "$d/ckpt/iter_0000010/mp_rank_00/model.safetensors")
o0=$(names "$d/L/0/iter_0000009/mp_rank_00/optim_dp0000.safetensors" | cut -d'|' -f1 | sort -u)
o2=$(names "$d/L/2/iter_0000009/mp_rank_00/optim_dp0001.safetensors" | cut -d'|' -f1 | sort -u)
if [[ -n $m0 && -n $m2 && -z $(comm -12 <(echo "$m0") <(echo "$m2")) && $(sort <(echo "$m0"; echo "$m2")) == "$all" &&
      $m0 == "$o0" && $m2 == "$o2" ]]; then
  echo "fully_parallel: data-parallel ranks 0 and 1 write $(wc -l <<<"$m0") and $(wc -l <<<"$m2") of the $(wc -l <<<"$all") parameters"
else
  fail "fully_parallel: the model files of ranks 0 and 2 do not split the parameters ($(wc -l <<<"$m0"), $(wc -l <<<"$m2"), $(wc -l <<<"$all"))"
fi
base=$d

# Passed over, resuming from --load's 8 with a note.
passed_over() {  # passed_over <tag> <expected note> <flags...>
  local tag=$1 note=$2
  shift 2
  if launch --load "$base/ckpt" "${local_flags[@]}" "$@" >"$base/over.log" 2>&1 &&
     grep -qF "$note" "$base/over.log" && grep -q "loaded checkpoint $base/ckpt/iter_0000008 " "$base/over.log"; then
    echo "$tag: resumed from --load's 8: $(grep -F "$note" "$base/over.log" | head -1)"
  else
    fail "$tag"; grep trident "$base/over.log" | head -5
  fi
}
printf 8 >"$base/ckpt/latest_checkpointed_iteration.txt"  # older than the local 9, which continues it
local_flags=(--non-persistent-ckpt-type local --non-persistent-local-ckpt-dir "$base/L")
# A corrupt file that one rank reads: every rank goes back to --load's.
cp "$base/L/1/iter_0000009/mp_rank_01/model.safetensors" "$base/intact.safetensors"
printf X | dd of="$base/L/1/iter_0000009/mp_rank_01/model.safetensors" bs=1 seek=2000 conv=notrunc status=none
passed_over "a corrupt file" "$base/L/1/iter_0000009/mp_rank_01/model.safetensors" --tensor-model-parallel-size 2
grep -q "; the local checkpoint is passed over" "$base/over.log" || fail "a corrupt file: no note"
cp "$base/intact.safetensors" "$base/L/1/iter_0000009/mp_rank_01/model.safetensors"
sed -i 's/"local_save_token": "/&x/' "$base/L/2/iter_0000009/metadata.json"
passed_over "different saves" "the ranks' local checkpoints of iteration 9 in $base/L come from different saves" \
  --tensor-model-parallel-size 2
rm -rf "$base/L/3"
passed_over "a lost node" "rank 3 has none of iteration 9 (its node replaced, or its save not committed)" \
  --tensor-model-parallel-size 2
mkdir -p "$base/M"
for r in 0 1 2 3; do cp -r "$base/L/0" "$base/M/$r"; done  # one save's metadata on every rank
local_flags=(--non-persistent-ckpt-type local --non-persistent-local-ckpt-dir "$base/M")
passed_over "another layout" "was written at tp 2 x pp 1 x dp 2, zero 0, fp32, this run is tp 1 x pp 1 x dp 4, zero 0, fp32" \
  --tensor-model-parallel-size 1

# A save that not every rank committed: ranks 0-2 committed theirs at 6, rank 3 died first, so
# all hold 3 and only 0-2 hold 6; --load holds nothing. The resume takes 3 (a checkpoint for
# --exit-on-missing-checkpoint), bit-identical to the uninterrupted run, and its saves leave
# each rank one checkpoint.
d="$tmp/partial"
mkdir -p "$d"
local_flags=(--non-persistent-save-interval 3 --non-persistent-ckpt-type local --non-persistent-local-ckpt-dir "$d/L")
launch --tensor-model-parallel-size 2 --save "$d/ckpt" "${local_flags[@]}" --exit-interval 4 >"$d/run1.log"
rm -rf "$d/ckpt"
cp -r "$d/L" "$d/at3"
launch --tensor-model-parallel-size 2 --load "$d/ckpt" --save "$d/ckpt" "${local_flags[@]}" --exit-interval 7 >"$d/run2.log"
rm -rf "$d/ckpt" "$d/L/3"
for r in 0 1 2; do cp -r "$d/at3/$r/iter_0000003" "$d/L/$r/"; done
cp -r "$d/at3/3" "$d/L/3"
launch --tensor-model-parallel-size 2 --load "$d/ckpt" --save "$d/ckpt" "${local_flags[@]}" --exit-on-missing-checkpoint \
  --save-canonical "$d/resumed.st" >"$d/run3.log" 2>&1 || { fail "partial commit: the resume failed"; tail -3 "$d/run3.log"; }
logged_after "$base/straight.log" 3 >"$d/a.txt"
logged_after "$d/run3.log" 3 >"$d/b.txt"
held=$(cd "$d/L" && ls -d */iter_* | tr '\n' ' ')
if grep -q "loaded non-persistent checkpoint $d/L/0/iter_0000003 " "$d/run3.log" && cmp -s "$d/a.txt" "$d/b.txt" &&
   [[ $(grep -c 'lm loss' "$d/a.txt") -eq 7 && $held == "0/iter_0000009 1/iter_0000009 2/iter_0000009 3/iter_0000009 " ]] &&
   python3 "$repo/tests/mpi/compare_params.py" "$base/straight.st" "$d/resumed.st" 0 "partial commit"; then
  echo "partial commit: resumed from the save at 3 that every rank holds, identical; then each rank keeps $held"
else
  fail "partial commit: held $held"; grep trident: "$d/run3.log" | head -3; paste "$d/a.txt" "$d/b.txt" | head -3
fi

# --replication --replication-jump 2: cliques {0, 2} and {1, 3}, each rank keeping a copy of
# its partner's. Rank 3's folder lost (its node replaced): the resume restores it from rank 1's
# copy and goes on bit-identical to the uninterrupted run.
d="$tmp/replicas"
mkdir -p "$d"
local_flags=(--non-persistent-save-interval 3 --non-persistent-ckpt-type local --non-persistent-local-ckpt-dir "$d/L"
             --replication --replication-jump 2)
launch --tensor-model-parallel-size 2 --save "$d/ckpt" --save-interval 4 "${local_flags[@]}" --exit-interval 7 \
  >"$d/run1.log"
held=$(cd "$d/L" && ls -d */iter_* */replica_*/iter_* | sort | tr '\n' ' ')
[[ $held == "0/iter_0000006 0/replica_2/iter_0000006 1/iter_0000006 1/replica_3/iter_0000006 2/iter_0000006 "\
"2/replica_0/iter_0000006 3/iter_0000006 3/replica_1/iter_0000006 " ]] && diff -r "$d/L/3/iter_0000006" \
  "$d/L/1/replica_3/iter_0000006" >/dev/null && echo "replication: each rank keeps its partner's: $held" ||
  fail "replication: held $held"
rm -rf "$d/ckpt/iter_0000007" "$d/L/3"
printf 4 >"$d/ckpt/latest_checkpointed_iteration.txt"
launch --tensor-model-parallel-size 2 --load "$d/ckpt" --save "$d/ckpt" --save-interval 4 "${local_flags[@]}" \
  --save-canonical "$d/resumed.st" >"$d/run2.log" 2>&1 || { fail "replication: the resume failed"; tail -3 "$d/run2.log"; }
logged_after "$base/straight.log" 6 >"$d/a.txt"
logged_after "$d/run2.log" 6 >"$d/b.txt"
if grep -q "rank 3's local checkpoint of iteration 6 restored from rank 1's copy" "$d/run2.log" &&
   grep -q "loaded non-persistent checkpoint $d/L/0/iter_0000006 " "$d/run2.log" && cmp -s "$d/a.txt" "$d/b.txt" &&
   [[ $(grep -c 'lm loss' "$d/a.txt") -eq 4 && -d $d/L/3/replica_1/iter_0000009 ]] &&
   python3 "$repo/tests/mpi/compare_params.py" "$base/straight.st" "$d/resumed.st" 0 "replication"; then
  echo "replication: rank 3's lost checkpoint restored from rank 1's copy; the resume from 6 is identical"
else
  fail "replication: lost folder"; grep trident: "$d/run2.log" | head -4
fi
# A copy missing a file: nothing is restored, and the run resumes from --load's 8 with a note.
rm -rf "$d/ckpt/iter_0000010" "$d/L/3"
printf 8 >"$d/ckpt/latest_checkpointed_iteration.txt"
rm "$d/L/1/replica_3/iter_0000009/mp_rank_01/model.safetensors"
launch --tensor-model-parallel-size 2 --load "$d/ckpt" "${local_flags[@]:2}" >"$d/run3.log" 2>&1 &&
  grep -q "restoring a local checkpoint from its copy failed: .*mp_rank_01/model.safetensors" "$d/run3.log" &&
  grep -q "loaded checkpoint $d/ckpt/iter_0000008 " "$d/run3.log" && [[ ! -e $d/L/3/iter_0000009 ]] &&
  echo "replication: a copy missing a file restores nothing; resumed from --load's 8" ||
  { fail "replication: a broken copy"; grep trident "$d/run3.log" | head -3; }
# Other cliques: one of all four ranks (--replication-jump 1 --replication-factor 4, three rounds
# of copies), then {0, 2} and {1, 3} again, whose saves remove the copies of the old cliques.
cliques() {  # cliques <tag> <jump> <factor> <expected folders of rank 0>
  launch --tensor-model-parallel-size 2 --save "$d/$1" --non-persistent-save-interval 3 --non-persistent-ckpt-type \
    local --non-persistent-local-ckpt-dir "$d/L" --replication --replication-jump "$2" --replication-factor "$3" \
    --train-iters 4 --lr-decay-iters 4 >"$d/$1.log" 2>&1 || { fail "replication $1: the run failed"; return; }
  local held
  held=$(cd "$d/L/0" && ls -d iter_* replica_*/iter_* | tr '\n' ' ')
  [[ $held == "$4" ]] && diff -r "$d/L/3/iter_0000003" "$d/L/${5:-0}/replica_3/iter_0000003" >/dev/null &&
    echo "replication, jump $2 factor $3: rank 0 holds $held" || fail "replication $1: rank 0 holds $held"
}
cliques all4 1 4 "iter_0000003 replica_1/iter_0000003 replica_2/iter_0000003 replica_3/iter_0000003 "
# Rank 0's folder lost, and of the three copies of it rank 1's has a flipped byte and rank 2's
# lacks a file: the resume tries them in turn and restores rank 3's, then goes on as the run
# that was not interrupted.
rm -rf "$d/L/0" "$d/all4"
copy() { echo "$d/L/$1/replica_0/iter_0000003"; }
victim=$(cd "$(copy 1)" && find . -name '*.safetensors' | sort | head -1)
python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-5, 2); b = f.read(1); f.seek(-5, 2); f.write(bytes([b[0] ^ 1]))' "$(copy 1)/$victim"
rm "$(copy 2)/$victim"
launch --tensor-model-parallel-size 2 --load "$d/all4" --save "$d/all4" --non-persistent-save-interval 3 --non-persistent-ckpt-type \
  local --non-persistent-local-ckpt-dir "$d/L" --replication --replication-jump 1 --replication-factor 4 \
  --train-iters 4 --lr-decay-iters 4 >"$d/all4_resumed.log" 2>&1 || fail "replication: resuming from the third copy"
logged_after "$d/all4.log" 3 >"$d/a.txt"
logged_after "$d/all4_resumed.log" 3 >"$d/b.txt"
if grep -q "rank 0's local checkpoint of iteration 3 restored from rank 3's copy (after: .*${victim#./}: checksum \
mismatch.*; .*${victim#./}: cannot open" "$d/all4_resumed.log" &&
   grep -q "loaded non-persistent checkpoint $d/L/0/iter_0000003 " "$d/all4_resumed.log" && cmp -s "$d/a.txt" "$d/b.txt" &&
   [[ $(grep -c 'lm loss' "$d/b.txt") -eq 1 ]]; then
  echo "replication: rank 0's checkpoint restored from rank 3's copy after rank 1's (corrupt) and rank 2's" \
    "(a file missing); iteration 4 as the uninterrupted run's"
else
  fail "replication: the third copy"; grep trident: "$d/all4_resumed.log" | head -4
fi
cliques pairs 2 2 "iter_0000003 replica_2/iter_0000003 " 1

resumes "fully_parallel pp2 dp2 zero 1 fp16 async" --pipeline-model-parallel-size 2 --use-distributed-optimizer \
  --fp16 --initial-loss-scale 4096 --async-save
resumes "atomic tp2 dp2 zero 1 bf16" --tensor-model-parallel-size 2 --use-distributed-optimizer --bf16 \
  --non-persistent-local-ckpt-algo atomic
# Under atomic each data-parallel rank's model file holds all of its tensor-parallel slice.
m0=$(names "$d/L/0/iter_0000009/mp_rank_00/model.safetensors")
[[ $m0 == "$(names "$d/L/2/iter_0000009/mp_rank_00/model.safetensors")" && $m0 == "$all" ]] &&
  echo "atomic: data-parallel ranks 0 and 1 each write all $(wc -l <<<"$m0") parameters" ||
  fail "atomic: the model files of ranks 0 and 2 do not both hold every parameter"

# Room: S is what both ranks' fully_parallel saves at dp 2 wrote (their tensors and headers), on
# the one file system they share; their free space is faked for every case.
room=(--config "$repo/configs/gpt2-tiny.yaml" --num-layers 4 --device cpu --train-iters 2 --micro-batch-size 2
      --global-batch-size 4 --eval-iters 0 --lr-warmup-iters 0 --non-persistent-save-interval 1
      --non-persistent-ckpt-type local)
mpirun --oversubscribe -np 2 --bind-to none "$train" "${room[@]}" --save "$d/room_save" \
  --non-persistent-local-ckpt-dir "$d/room" >"$d/room.log" 2>&1 || fail "room: the run that measures a save"
S=$(find "$d/room/0/iter_0000001" "$d/room/1/iter_0000001" -type f ! -name metadata.json -printf '%s\n' |
    awk '{ s += $1 } END { print s + 0 }')
# <times S free> <folder> <the save that fails, or none>: empty folders need S, then 2 S; the
# folder that holds the measuring run's saves (deleted at the first commit) needs about S.
for case in "0.5 empty first" "1.5 empty second" "2.2 empty none" "1.5 room none"; do
  read -r times dir want <<<"$case"
  [[ $dir == empty ]] && dir=empty_$times  # a folder of its own: a run leaves its saves there
  free=$(awk -v s="$S" -v t="$times" 'BEGIN { printf "%d", s * t }')
  TRIDENT_TEST_FREE_BYTES=$free mpirun --oversubscribe --bind-to none -x TRIDENT_TEST_FREE_BYTES -np 2 "$train" \
    "${room[@]}" --save "$d/save_${times}_$dir" --non-persistent-local-ckpt-dir "$d/$dir" \
    >"$d/room_${times}_$dir.log" 2>&1 || fail "room: the run with $times saves free in $dir"
  line=$(grep '^trident-train: warning: rank' "$d/room_${times}_$dir.log" || true)
  if [[ $want == none && -z $line ]] ||
     [[ $line == "trident-train: warning: rank 0 (host "*"--non-persistent-local-ckpt-dir $d/$dir/0: the local saves of \
the 2 ranks on this file system take "*"the $want local save will fail" ]]; then
    echo "room: $times saves free in $dir ($free bytes, a save $S): ${line:-no warning}"
  else
    fail "room: $times saves free in $dir: got '${line}'"
  fi
done

[[ $fails -eq 0 ]] || { echo "$fails failure(s)"; exit 1; }
echo "local checkpoints: all checks passed"
