#!/usr/bin/env bash
# A run stopped in Megatron-LM or Megatron-DeepSpeed goes on in trident: trident-convert --from
# megatron --with-optimizer.
# A trident run of 6 iterations saves at iteration 3; tests/e2e/megatron_training_state.py writes
# that state as Megatron-LM saves it (--ckpt-format torch: the model, the optimizer's state dict
# in Megatron's parameter groups, the scheduler, the args' consumed samples and seed) at another
# layout:
#  - the non-distributed optimizer: fp32 at tp2 x pp2 with the legacy model and apex's FusedAdam;
#    fp16 at tp1 x pp2 x 2 virtual chunks with Megatron-core names, torch's Adam and a dynamic
#    loss scale that grows; bf16 at tp2 with Megatron-core names;
#  - the distributed optimizer (distrib_optim.pt) in Megatron's three layouts of it: 2023's
#    whole buffer (fp16, tp1 x pp2 x 2 chunks), late 2023's buckets (fp32, tp2) and
#    Megatron-core's coalesced buckets with 64-element alignment and the shared embedding's own
#    bucket (bf16, pp2; and fp16 at tp2 x pp2 as 0.8 to 0.13.0 placed that embedding); buckets of
#    100 elements and a data-parallel size of 5, so that buckets end after weights and biases and
#    padding lies between them;
#  - Megatron-core's --ckpt-format torch_dist, the optimizer's state by name: the
#    non-distributed optimizer (fp16, tp2 x pp2), the distributed optimizer's fully_reshardable
#    (fp32, tp2, torch's Adam's common_step) and fully_sharded_model_space (bf16, tp2 x pp2: each
#    piece two data-parallel ranks' flattened halves, reformulated); its dp_reshardable format,
#    the buckets as they are in memory pieced by five data-parallel ranks, with the local layer
#    spec (bf16, tp2 x pp2) and Transformer Engine's (fp16, pp2 x 2 chunks; fp32, tp2), whose
#    parameter orders differ; and its dp_zero_gather_scatter format, distrib_optim.pt's coalesced
#    buffers as one object per rank (fp16, tp2 x pp2); dp_reshardable of Megatron's uneven stages
#    (--decoder-first-pipeline-num-layers 1 at pp2, fp16; the embedding and the loss counted as
#    layers at pp3, bf16 with Transformer Engine's spec: stages of 1, 2 and 1 layers; the layout
#    "E|t|tt||t|L" of --pipeline-model-parallel-layout at pp2 x 3 chunks: chunks of [0, 2, 1]
#    and [1, 0, 0] layers, the empty one without a gradient buffer, which Megatron does not count
#    in gbuf_idx: dp_reshardable (fp16), dp_zero_gather_scatter (fp32) and distrib_optim.pt's
#    coalesced buckets (bf16));
#  - Megatron-DeepSpeed's checkpoint as DeepSpeed's engine saves it at ZeRO stage 1 (BigScience's
#    recipe): GPTModelPipe's layer files (fp16 tp2 x pp2 with a dynamic loss scale; fp32 pp2) or
#    GPTModel's module (bf16, bf16_zero_* files with BF16_Optimizer's padded masters),
#    param_shapes naming each flat group's parameters, each group's fp32 masters and Adam moments
#    partitioned over five data-parallel ranks' zero_pp_rank_* files (fp32: the elastic form with
#    base_optimizer_state_step); and Adam's step count one higher, as DeepSpeed before 2024
#    saved it, kept as saved; at ZeRO stage 0 the optimizer in the model states, FP16_Optimizer's
#    flat groups (fp16 tp2 x pp2), FP16_UnfusedOptimizer's master per parameter (fp16 with
#    torch's Adam, without a pipeline) or the bare Adam by parameter index (fp32 pp2).
#  - a --decoupled-lr run (Megatron-core's model), whose word embedding and output layer have a
#    param group of their own: as Megatron-core 0.12 to 0.15 order and mark it (where each group
#    starts on the rank, is_decoupled_lr; bf16 pp2, fp32 pp2 x 2 chunks, the distributed
#    optimizer's coalesced buckets and torch_dist's dp_reshardable) and as newer versions do
#    (sorted, a learning-rate override; fp16 tp2, torch_dist's fully_reshardable).
# The way back, trident-convert --to megatron --with-optimizer (fp16 tp2 x pp2 legacy and fp32
# tp2 legacy for FusedAdam, bf16 pp2 Megatron-core for torch's Adam; Megatron's other splits:
# bf16 pp2 x 2 chunks, fp16 pp2 by a layout, fp32 tp2 x pp2 with a first stage of 1 layer; and
# --ckpt-format torch_dist, for the non-distributed optimizer or the distributed one's
# fully_reshardable format; a --decoupled-lr run's bf16 pp2 and pp2 x 2 chunks, which the legacy
# model refuses): the same state as megatron_training_state.py writes it, parameter by
# parameter (megatron_export_check.py, megatron_dist_export_check.py), which imported again
# resumes to the uninterrupted run's files; a checkpoint without optimizer state exports none (one line).
# Imported with --with-optimizer and resumed by trident-train to iteration 6, its model and
# optimizer files must equal the uninterrupted run's byte for byte; a note names Adam betas that
# differ from the flags'. Two LayerNorm weights' states exchanged (another parameter order than
# Megatron's) change an fp32 run and fail a 16-bit import (its masters no longer round to the
# parameters); a master moved by one element in distrib_optim.pt, a dp_reshardable bucket or a
# DeepSpeed partition, a missing distrib_optim.pt, the deprecated fully_sharded_bucket_space
# format and checkpoints saved without optimizer state fail with one line, leaving nothing. SKIP (exit 77)
# without Debian's python3-torch.
# Usage: megatron_resume.sh TRAIN CONVERT REPO
set -u
train=$1 convert=$2 repo=$3
# shellcheck source=tests/e2e/torch_test_setup.sh
source "$repo/tests/e2e/torch_test_setup.sh"

# megatron_training_state.py's model: 4 layers, 32 wide, 4 heads, 32 positions.
run=(--device cpu --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32
     --max-position-embeddings 32 --vocab-size 1000 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
     --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.01 --clip-grad 1.0 --train-iters 6
     --log-interval 1 --eval-iters 0 --mock-data)
declare -A precision=([fp32]="" [fp16]="--fp16 --initial-loss-scale 4096 --loss-scale-window 2" [bf16]="--bf16")
run_flags() {  # run_flags DTYPE[+dlr]: the precision's flags, and with +dlr the word embedding's own rates
  echo "${precision[${1%+dlr}]}"
  [[ $1 != *+dlr ]] || echo "--decoupled-lr 3e-3 --decoupled-min-lr 2e-4"
}

reference() {  # reference DTYPE[+dlr]: the uninterrupted run, saved at iterations 3 and 6
  [[ -d $tmp/ref-$1 ]] && return 0
  # shellcheck disable=SC2046  # flags are words
  "$train" "${run[@]}" $(run_flags "$1") --save "$tmp/ref-$1" --save-interval 3 >"$tmp/ref-$1.log" 2>&1 ||
    { cat "$tmp/ref-$1.log"; return 1; }
}
megatron() {  # megatron NAME DTYPE[+dlr] TP PP VP STEPS MODEL [LAYOUT [MUTATION]]: the iteration-3 state as Megatron saves it
  local name=$1 dtype=$2
  shift 2
  reference "$dtype" &&
    "$py" "$repo/tests/e2e/megatron_training_state.py" "$tmp/ref-$dtype/iter_0000003" "$tmp/mg-$name" "${dtype%+dlr}" "$@" \
      >"$tmp/mg-$name.log" 2>&1 || { fail "$name: writing the checkpoint"; cat "$tmp/mg-$name.log"; return 1; }
}
resumed() {  # resumed NAME DTYPE: imports mg-NAME and trains it to iteration 6; 0 when its files equal the reference's
  local name=$1 dtype=$2 out=$tmp/imp-$1
  "$convert" --from megatron --with-optimizer --vocab-size 1000 --load "$tmp/mg-$name" --save "$out" >"$out.log" 2>&1 &&
    # shellcheck disable=SC2046
    "$train" "${run[@]}" $(run_flags "$dtype") --load "$out" --save "$out" >>"$out.log" 2>&1 ||
    { echo "  import or resume failed:"; cat "$out.log"; return 2; }
  for f in model.safetensors optim_dp0000.safetensors; do
    cmp -s "$out/iter_0000006/mp_rank_00/$f" "$tmp/ref-$dtype/iter_0000006/mp_rank_00/$f" || return 1
  done
}

for c in "fp32 2 2 1 apex legacy indexed" "fp16 1 2 2 torch mcore indexed" "bf16 2 1 1 apex mcore indexed" \
    "fp16 1 2 2 apex legacy distributed-whole" "fp32 2 1 1 torch legacy distributed-buckets" \
    "bf16 1 2 1 apex mcore distributed-coalesced" "fp16 2 2 1 apex mcore distributed-coalesced-v08" \
    "fp16 2 2 1 apex mcore torch_dist-indexed" \
    "fp32 2 1 1 torch mcore torch_dist-fully-reshardable" "bf16 2 2 1 apex mcore torch_dist-model-space" \
    "bf16 2 2 1 apex mcore torch_dist-dp-reshardable" "fp16 1 2 2 torch mcore-te torch_dist-dp-reshardable" \
    "fp32 2 1 1 apex mcore-te torch_dist-dp-reshardable" "fp16 2 2 1 apex mcore torch_dist-dp-zero" \
    "fp16 1 2 1 apex mcore torch_dist-dp-reshardable first-stage-1" \
    "bf16 1 3 1 torch mcore-te torch_dist-dp-reshardable embedding-loss-counted" \
    "fp16 1 2 3 apex mcore torch_dist-dp-reshardable layout-chunks" \
    "fp32 1 2 3 apex mcore torch_dist-dp-zero layout-chunks" "bf16 1 2 3 torch mcore distributed-coalesced layout-chunks" \
    "fp16 2 2 1 apex legacy deepspeed-pipeline" "bf16 1 1 1 torch legacy deepspeed-module" \
    "fp32 1 2 1 torch legacy deepspeed-pipeline" "fp16 2 2 1 apex legacy deepspeed0-pipeline" \
    "fp32 1 2 1 torch legacy deepspeed0-pipeline" "fp16 1 1 1 torch legacy deepspeed0-module" \
    "bf16+dlr 1 2 1 apex mcore indexed decoupled" "fp32+dlr 1 2 2 torch mcore indexed decoupled" \
    "fp16+dlr 2 1 1 apex mcore indexed decoupled-sorted" "bf16+dlr 2 2 1 apex mcore distributed-coalesced decoupled" \
    "fp32+dlr 2 1 1 torch mcore torch_dist-fully-reshardable decoupled-sorted" \
    "bf16+dlr 1 2 1 apex mcore torch_dist-dp-reshardable decoupled"; do
  read -r dtype tp pp vp steps model layout mutation <<<"$c"
  name=$dtype-tp$tp-pp$pp-vp$vp-$model-$layout${mutation:+-$mutation}
  megatron "$name" "$dtype" "$tp" "$pp" "$vp" "$steps" "$model" "$layout" ${mutation:+"$mutation"} || continue
  if resumed "$name" "$dtype"; then
    ok "$name ($model, $steps steps): resumed to iteration 6, model and optimizer equal the uninterrupted run's"
  else
    fail "$name: resumed run differs from the uninterrupted one"
  fi
done
for name in fp16-tp1-pp2-vp2-mcore-indexed fp16-tp1-pp2-vp2-mcore-te-torch_dist-dp-reshardable \
    fp16-tp2-pp2-vp1-legacy-deepspeed-pipeline; do
  "$py" - "$tmp/imp-$name/iter_0000003/metadata.json" "$tmp/ref-fp16/iter_0000003/metadata.json" <<'EOF' &&
import json, sys
got, want = (json.load(open(p)) for p in sys.argv[1:])
assert (got["iteration"], got["consumed_samples"]) == (3, 12), got
st, ref = got["trainer_state"], want["trainer_state"]
for k in ("optimizer_steps", "loss_scaler", "dropout_seed", "global_batch_size"):
    assert st[k] == ref[k], (k, st[k], ref[k])
assert st["loss_scaler"]["scale"] == 8192 and st["loss_scaler"]["growth_tracker"] == 1, st
assert st["opt_param_scheduler"]["num_steps"] == 12 and st["source_format"].startswith("Megatron"), st
EOF
    ok "fp16 import $name: iteration 3, 12 samples, 3 Adam steps, loss scale 8192 one clean step into its window" ||
    fail "fp16 import $name: metadata"
done
grep -q "iteration 3 with the optimizer state after 3 Adam steps" "$tmp/imp-fp32-tp2-pp2-vp1-legacy-indexed.log" &&
  ok "the import's line names the state" || fail "import line: $(head -1 "$tmp/imp-fp32-tp2-pp2-vp1-legacy-indexed.log")"

# DeepSpeed before 2024 counted one zero-gradient Adam step more than its updates: the import
# keeps the count, so that the bias correction goes on as DeepSpeed's.
if megatron init-step fp32 1 1 1 apex legacy deepspeed-module init-step; then
  "$convert" --from megatron --with-optimizer --vocab-size 1000 --load "$tmp/mg-init-step" --save "$tmp/imp-init-step" \
      >"$tmp/imp-init-step.log" 2>&1 && grep -q "after 4 Adam steps" "$tmp/imp-init-step.log" &&
    grep -q '"consumed_train_tokens": *1384' "$tmp/imp-init-step/iter_0000003/metadata.json" &&
    ok "DeepSpeed's extra initial Adam step: imported as saved (4 steps at iteration 3); args.consumed_train_tokens (1384) kept" ||
    { fail "DeepSpeed init-step import"; cat "$tmp/imp-init-step.log"; }
fi

# The FLOPs so far (Megatron's num_floating_point_operations_so_far, for --log-progress) go to
# Megatron's files and come back: flops_kept NAME DTYPE after resumed ours-NAME.
flops_kept() {
  local key=num_floating_point_operations_so_far
  "$py" - "$tmp/imp-ours-$1/iter_0000003/metadata.json" "$tmp/ref-$2/iter_0000003/metadata.json" "$key" <<'EOF' ||
import json, sys
got, want = (json.load(open(p))["trainer_state"][sys.argv[3]] for p in sys.argv[1:3])
assert got == want > 0, (got, want)
EOF
    fail "$1: $key lost on the way to Megatron and back"
}

# exported_and_resumed NAME DTYPE TP PP CHECK FLAGS...: trident-convert --to megatron --with-optimizer
# FLAGS of the reference's iteration 3 at tp x pp, compared with mg-NAME (Megatron's files of the
# same state) by tests/e2e/CHECK; imported again, it resumes to the uninterrupted run, FLOPs kept.
exported_and_resumed() {
  local name=$1 dtype=$2 tp=$3 pp=$4 check=$5 out=$tmp/mg-ours-$1
  shift 5
  if "$convert" --to megatron --with-optimizer --load "$tmp/ref-$dtype" --iteration 3 --save "$out" --target-tp "$tp" \
      --target-pp "$pp" --tokenizer-type NullTokenizer "$@" >"$out.log" 2>&1 &&
    "$py" "$repo/tests/e2e/$check" "$out" "$tmp/mg-$name" 3 1000 >>"$out.log" 2>&1; then
    ok "$name: $(tail -1 "$out.log")"
  else
    fail "$name: the export differs from Megatron's checkpoint"; cat "$out.log"; return
  fi
  if resumed "ours-$name" "$dtype"; then
    ok "$name: imported again and resumed to iteration 6, model and optimizer equal the uninterrupted run's"
  else
    fail "$name: the export, imported again, does not resume to the uninterrupted run"
  fi
  flops_kept "$name" "$dtype"
}

# The way back: trident-convert --to megatron --with-optimizer writes what Megatron-LM saves
# (megatron_export_check.py compares it, parameter by parameter, with megatron_training_state.py's
# file of the same state), and imported again it resumes to the uninterrupted run's files.
# Also for a Megatron run of another pipeline split, given by Megatron's flags: 2 model chunks a
# stage (bf16), the layout "E|t|tt||t|L" (fp16: chunks of [0, 2, 1] and [1, 0, 0] layers, a
# file's 'model0' to 'model2') and a first stage of 1 layer (fp32); Megatron-core's model, as
# Megatron-LM's legacy model splits its layers evenly.
for c in "fp16 2 2 1 legacy apex" "bf16 1 2 1 mcore torch" "fp32 2 1 1 legacy apex" "bf16 1 2 2 mcore torch" \
    "fp16 1 2 3 mcore apex layout-chunks" "fp32 2 2 1 mcore apex first-stage-1" "bf16+dlr 1 2 1 mcore apex decoupled"; do
  read -r dtype tp pp vp model steps mutation <<<"$c"
  adam=fused
  [[ $steps == torch ]] && adam=torch
  split=()
  case $mutation in
    layout-chunks) split=(--pipeline-model-parallel-layout "E|t|tt||t|L") ;;
    first-stage-1) split=(--decoder-first-pipeline-num-layers 1) ;;
    *) [[ $vp -gt 1 ]] && split=(--num-virtual-stages-per-pipeline-rank "$vp") ;;
  esac
  name=export-$dtype-tp$tp-pp$pp-vp$vp-$model${mutation:+-$mutation}
  megatron "$name" "$dtype" "$tp" "$pp" "$vp" "$steps" "$model" indexed ${mutation:+"$mutation"} || continue
  exported_and_resumed "$name" "$dtype" "$tp" "$pp" megatron_export_check.py --megatron-model "$model" \
    --megatron-adam "$adam" ${split[@]+"${split[@]}"}
done
# --ckpt-format torch_dist: Megatron-core's distributed checkpoint of the same state, its optimizer
# by name for the non-distributed optimizer (fp16 tp2 x pp2, apex; fp32 pp2, torch's Adam, whose
# masters are the weights) or the distributed one's fully_reshardable (fp32 tp2 with torch's Adam;
# bf16 pp2 x 2 chunks), compared tensor by tensor with megatron_training_state.py's folder
# (megatron_dist_export_check.py); imported again it resumes to the uninterrupted run.
for c in "fp16 2 2 1 apex torch_dist-indexed" "fp32 1 2 1 torch torch_dist-indexed" \
    "fp32 2 1 1 torch torch_dist-fully-reshardable" "bf16 1 2 2 apex torch_dist-fully-reshardable" \
    "bf16+dlr 1 2 2 apex torch_dist-fully-reshardable decoupled"; do
  read -r dtype tp pp vp steps layout mutation <<<"$c"
  adam=fused distributed=()
  [[ $steps == torch ]] && adam=torch
  [[ $layout == torch_dist-fully-reshardable ]] && distributed=(--use-distributed-optimizer)
  split=()
  [[ $vp -gt 1 ]] && split=(--num-virtual-stages-per-pipeline-rank "$vp")
  name=export-$dtype-tp$tp-pp$pp-vp$vp-$layout
  megatron "$name" "$dtype" "$tp" "$pp" "$vp" "$steps" mcore "$layout" ${mutation:+"$mutation"} || continue
  exported_and_resumed "$name" "$dtype" "$tp" "$pp" megatron_dist_export_check.py --megatron-model mcore \
    --megatron-adam "$adam" --ckpt-format torch_dist ${distributed[@]+"${distributed[@]}"} ${split[@]+"${split[@]}"}
done
# A checkpoint without optimizer state has none to export: one line, no output.
"$convert" --load "$tmp/ref-fp32" --iteration 3 --save "$tmp/no-optim" --no-optimizer >/dev/null &&
  "$convert" --to megatron --with-optimizer --tokenizer-type NullTokenizer --load "$tmp/no-optim" \
    --save "$tmp/no-optim-mg" >/dev/null 2>"$tmp/err"
if [[ $? -eq 2 && $(wc -l <"$tmp/err") -eq 1 && ! -e $tmp/no-optim-mg ]] && grep -q "holds no optimizer state" "$tmp/err"; then
  ok "$(cat "$tmp/err")"
else
  fail "--to megatron --with-optimizer without optimizer state: $(cat "$tmp/err")"
fi

# Megatron's legacy model trains its word embedding at --lr: a --decoupled-lr run's optimizer
# state exports to Megatron-core's model only.
"$convert" --to megatron --with-optimizer --tokenizer-type NullTokenizer --load "$tmp/ref-bf16+dlr" --iteration 3 \
  --save "$tmp/dlr-legacy" >/dev/null 2>"$tmp/err"
if [[ $? -eq 2 && $(wc -l <"$tmp/err") -eq 1 && ! -e $tmp/dlr-legacy ]] && grep -q "only Megatron-core's model" "$tmp/err"; then
  ok "$(cat "$tmp/err")"
else
  fail "--decoupled-lr exported to the legacy model: $(cat "$tmp/err")"
fi

# Another parameter order than Megatron's: undetectable in fp32 (the shapes agree), where it
# changes the run, so the comparison above can fail; a 16-bit import refuses it.
if megatron swapped-fp32 fp32 1 1 1 apex legacy indexed swapped; then
  resumed swapped-fp32 fp32
  [[ $? -eq 1 ]] && ok "two LayerNorm states exchanged: the resumed fp32 run differs" ||
    fail "a swapped state left the fp32 run unchanged"
fi

# Megatron restores Adam's betas with its state; trident takes its flags' and says so.
if megatron betas fp32 1 1 1 apex legacy indexed betas; then
  resumed betas fp32 && grep -qF "'s optimizer ran with Adam betas (0.9, 0.95), eps 1e-08; this run takes --adam-beta1 0.9 --adam-beta2 0.999" \
    "$tmp/imp-betas.log" && ok "other Adam betas in the checkpoint: a note, and the run takes the flags'" ||
    { fail "Adam betas note"; cat "$tmp/imp-betas.log"; }
fi

# ---- errors: one line naming the file or flag; nothing written
expect_error() {  # expect_error TEXT NAME
  local save=$tmp/failed
  rm -rf "$save"
  "$convert" --from megatron --with-optimizer --vocab-size 1000 --load "$tmp/mg-$2" --save "$save" >/dev/null 2>"$tmp/err"
  local rc=$?
  if [[ $rc -eq 2 && $(wc -l <"$tmp/err") -eq 1 && ! -e $save ]] && ! compgen -G "$save.tmp-*" >/dev/null &&
      grep -qF -- "$1" "$tmp/err"; then
    ok "$(cat "$tmp/err")"
  else
    fail "expected '$1': rc=$rc, stderr:"
    cat "$tmp/err"
  fi
}
megatron swapped-fp16 fp16 1 2 1 apex legacy indexed swapped &&
  expect_error "mp_rank_00_000/model_optim_rng.pt: the master weight of optimizer state 10 (parameter 'language_model.encoder.layers.0.input_layernorm.weight') does not round to the parameter" swapped-fp16
megatron moved bf16 1 1 1 apex legacy distributed-coalesced moved &&
  expect_error "$tmp/mg-moved/iter_0000003/mp_rank_00/distrib_optim.pt: buffer 0: parameter 'language_model.encoder.layers.0.input_layernorm.bias' ([32]) is nowhere in the buffer where its master weight matches it" moved
megatron no-distrib fp32 1 1 1 apex legacy distributed-buckets no-distrib-file &&
  expect_error "$tmp/mg-no-distrib/iter_0000003/mp_rank_00/distrib_optim.pt: missing (--use-distributed-optimizer keeps" no-distrib
megatron moved-bucket fp16 1 1 1 apex mcore torch_dist-dp-reshardable moved &&
  expect_error "$tmp/mg-moved-bucket/iter_0000003/.metadata: optimizer.distributed.dp_group_idx_0.gbuf_idx_0 (tensor-parallel rank 0, stage 0, chunk 0): parameter 'h.0.ln_1.bias' ([32]) is nowhere in the buffer where its master weight matches it" moved-bucket
megatron bucket-space bf16 1 1 1 apex mcore torch_dist-dp-reshardable bucket-space &&
  expect_error "--with-optimizer: $tmp/mg-bucket-space/iter_0000003/common.pt: the distributed optimizer's state is saved in its 'fully_sharded_bucket_space' format, which trident does not read" bucket-space
megatron ds-moved fp16 2 2 1 apex legacy deepspeed-pipeline moved &&
  expect_error "$tmp/mg-ds-moved/global_step3: the master weight of 'tied_modules.embed.word_embeddings.weight' (model-parallel rank 0 group 0) does not match 'embedding.word_embeddings.weight' of $tmp/mg-ds-moved/global_step3/layer_01-model_00-model_states.pt" ds-moved
megatron ds-no-optim fp32 1 1 1 apex legacy deepspeed-module no-optimizer &&
  expect_error "$tmp/mg-ds-no-optim/global_step3/mp_rank_00_model_states.pt: no 'optimizer' state (DeepSpeed keeps it here at ZeRO stage 0; saved with --no-save-optim?)" ds-no-optim
# Newer Megatron-core overrides a group's learning rate for --decoupled-lr and for others (muP's):
# a group of its own rate that is not args.decoupled_lr is refused, by index and by name.
megatron lr-override fp32+dlr 1 2 1 apex mcore indexed lr-override &&
  expect_error "$tmp/mg-lr-override/iter_0000003/mp_rank_00_000/model_optim_rng.pt: optimizer param_groups[1] trains at a learning rate of its own (default_config False, max_lr 0.003) that is not the run's --decoupled-lr (args.decoupled_lr None)" lr-override
megatron lr-override-dist fp32+dlr 2 1 1 torch mcore torch_dist-fully-reshardable lr-override &&
  expect_error "$tmp/mg-lr-override-dist/iter_0000003/common.pt: optimizer param_groups[1] trains at a learning rate of its own" lr-override-dist
megatron no-optim fp32 1 1 1 apex legacy indexed no-optimizer &&
  expect_error "$tmp/mg-no-optim/iter_0000003/mp_rank_00/model_optim_rng.pt: no 'optimizer' state (saved with --no-save-optim?)" no-optim

echo "$fails failure(s)"
[[ $fails -eq 0 ]]
