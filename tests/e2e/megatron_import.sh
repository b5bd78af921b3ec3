#!/usr/bin/env bash
# trident-convert --from megatron against checkpoints that PyTorch writes the way Megatron-LM
# and Megatron-DeepSpeed save them (tests/e2e/megatron_checkpoints.py, from one set of random
# GPT-2 weights also written as a Hugging Face folder): legacy model names at tp2 x pp2 (fp16,
# tied head on the last stage); torch's legacy file format with checkpoint_version 0 and the
# old 'transformer'/'attention.' names in a release folder (GPT-2's vocabulary by default);
# version 1.0's QKV order with the '*_norm' names; Megatron-core with Transformer Engine names,
# '_extra_state' entries and a virtual pipeline (tp2 x pp2 x 2 chunks, bf16); Megatron-core's
# local names; Megatron-core's distributed checkpoints (--ckpt-format torch_dist: PyTorch's DCP
# folder with stacked layers, Transformer Engine names, optimizer and RNG entries, pieces saved as
# views, tp2 x pp2 bf16; per-layer keys at tp2 fp16); Megatron-DeepSpeed's pipeline layer files (BigScience's and microsoft's numbering,
# microsoft's args: a list of experts, 'layernorm', an enum position type) and its 'module'
# files; a file saved without args (as NVIDIA's released GPT-2 345M). Each import,
# exported again as fp32, must equal the Hugging Face folder's import bit for bit, also after
# an import straight to tp2 x pp2; trident-generate's greedy text from an import must equal
# PyTorch's from the Hugging Face folder. Checkpoints trained without the fused bias-GELU
# (legacy and Megatron-core) import as models of the exact (erf) GELU, which the Hugging Face
# and Megatron exports carry on. Models trident cannot represent, a tied head that
# differs, a wrong vocabulary, a truncated file, a missing rank folder, a torch_dist index
# missing a piece or with overlapping ones, a weight of a dtype not read, a zarr checkpoint
# and a missing or truncated .distcp file fail with one line naming the arg, flag or file,
# and leave no output. trident-convert --to megatron: torch.load
# reads each file of an export (tp1 x pp1 fp32 with *_layernorm names, tp2 x pp2 bf16 with
# *_norm names; tp1 x pp1 bf16 and tp2 x pp2 fp32 as Megatron-core's GPTModel) as the state
# dict built from the Hugging Face folder, with the args Megatron's loader reads, and an
# export imports back bit for bit. SKIP (exit 77) without Debian's python3-torch.
# Usage: megatron_import.sh CONVERT GENERATE REPO VOCABDIR
set -u
convert=$1 generate=$2 repo=$3 vocab=$4
# shellcheck source=tests/e2e/torch_test_setup.sh
source "$repo/tests/e2e/torch_test_setup.sh"
src=$tmp/megatron
"$py" "$repo/tests/e2e/megatron_checkpoints.py" "$src" >"$tmp/cases" || { echo "FAIL: writing the checkpoints"; exit 1; }

# The reference: each Hugging Face folder imported and exported again as fp32.
reference() {  # reference HFNAME -> prints the exported model.safetensors
  local out=$tmp/ref-$1
  if [[ ! -d $out-hf ]]; then
    "$convert" --from hf --load "$src/$1" --save "$out" >/dev/null &&
      "$convert" --to hf --dtype fp32 --load "$out" --save "$out-hf" >/dev/null || return 1
  fi
  echo "$out-hf/model.safetensors"
}
same_as_reference() {  # same_as_reference CKPT HFNAME WHAT
  rm -rf "$1-hf"
  local ref
  ref=$(reference "$2") || { fail "$3: importing the Hugging Face reference"; return; }
  if "$convert" --to hf --dtype fp32 --load "$1" --save "$1-hf" >/dev/null && cmp -s "$1-hf/model.safetensors" "$ref"; then
    ok "$3: equals the Hugging Face import bit for bit"
  else
    fail "$3: differs from the Hugging Face import"
  fi
}

while read -r name ref _ flags; do
  # shellcheck disable=SC2086  # flags are words
  if "$convert" --from megatron --load "$src/$name" --save "$tmp/out-$name" $flags >"$tmp/$name.log" 2>&1; then
    same_as_reference "$tmp/out-$name" "$ref" "$name"
  else
    fail "$name: import"; cat "$tmp/$name.log"
  fi
done <"$tmp/cases"
grep -q "Megatron-LM $src/mcore-te-vpp/iter_0000007 (iteration 7, tp 2 x pp 2 x 2 virtual; 4 layers, hidden 32, heads 4, vocab 1000, bf16)" \
  "$tmp/mcore-te-vpp.log" && ok "the import's line names the source layout" || { fail "import line"; cat "$tmp/mcore-te-vpp.log"; }
grep -q "Megatron-core torch_dist $src/dist-te-tp2-pp2/iter_0000007 (iteration 7, tp 2 x pp 2; 4 layers, hidden 32, heads 4, vocab 1000, bf16)" \
  "$tmp/dist-te-tp2-pp2.log" && ok "the torch_dist import's line" || { fail "torch_dist import line"; cat "$tmp/dist-te-tp2-pp2.log"; }
"$py" - "$tmp/out-ds-pipeline/iter_0000000/metadata.json" <<'EOF' && ok "metadata: iteration 0, bf16, the source" || fail "metadata"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["iteration"] == 0 and m["model"]["dtype"] == "bf16", m
want = {"imported_from": "megatron", "source_format": "Megatron-DeepSpeed", "source_iteration": 5}
assert {k: m["trainer_state"].get(k) for k in want} == want, m
EOF

# Straight to another layout, and a chosen iteration.
if "$convert" --from megatron --load "$src/lm-tp2-pp2" --iteration 7 --vocab-size 1000 --save "$tmp/tp2pp2" \
    --target-tp 2 --target-pp 2 >/dev/null; then
  same_as_reference "$tmp/tp2pp2" hf-float16-1000 "--target-tp 2 --target-pp 2"
else
  fail "import to tp2 x pp2"
fi

# Greedy text from the import of the GPT-2-vocabulary checkpoint against PyTorch's GPT-2 reading
# the Hugging Face folder.
"$generate" --device cpu --load "$tmp/out-lm-release-old" --vocab-file "$vocab/gpt2-vocab.json" \
  --merge-file "$vocab/gpt2-merges.txt" --greedy --ignore-eos --out-seq-length 24 \
  --sample-output-file "$tmp/generated.jsonl" >/dev/null 2>&1
"$py" "$repo/tests/e2e/pytorch_gpt2.py" generate "$src/hf-float32-50257" "$vocab/gpt2-vocab.json" --tokens 24 \
  >"$tmp/torch-text.json"
"$py" - "$tmp/generated.jsonl" "$tmp/torch-text.json" <<'EOF' && ok "greedy text equals PyTorch's" || fail "greedy text"
import json, sys
ours = json.loads(open(sys.argv[1]).readline())["text"]
theirs = json.load(open(sys.argv[2]))
assert ours == theirs and len(ours) > 24, (ours, theirs)
EOF

# ---- trident-convert --to megatron: torch.load reads each file as the legacy model's state dict
# built from the Hugging Face folder; the export imports back bit for bit.
"$convert" --from hf --load "$src/hf-float32-1000" --save "$tmp/trident" >/dev/null
# --ckpt-format torch_dist (dist): Megatron-core's distributed checkpoint, read with dcp_reader.py
# and compared with megatron_checkpoints.py's folder of the same weights.
for layout in "1 1 fp32 layernorm" "2 2 bf16 norm" "1 1 bf16 mcore" "2 2 fp32 mcore" "2 2 bf16 dist" "2 1 fp32 dist"; do
  read -r tp pp dtype norm <<<"$layout"
  names=() check=(check-export "$dtype" "$norm" NullTokenizer)
  [[ $norm == norm ]] && names=(--megatron-norm-names)
  [[ $norm == mcore ]] && names=(--megatron-model mcore)
  [[ $norm == dist ]] && names=(--megatron-model mcore --ckpt-format torch_dist) check=(check-dist-export "$dtype" NullTokenizer)
  rm -rf "$tmp/exported"
  if "$convert" --to megatron --load "$tmp/trident" --save "$tmp/exported" --target-tp "$tp" --target-pp "$pp" \
      --dtype "$dtype" --tokenizer-type NullTokenizer "${names[@]}" >/dev/null &&
      "$py" "$repo/tests/e2e/megatron_checkpoints.py" "${check[0]}" "$tmp/exported" "$src/hf-float32-1000" "$tp" "$pp" \
        "${check[@]:1}" >"$tmp/check.log" 2>&1; then
    ok "--to megatron at tp $tp x pp $pp, $dtype, $norm: $(cat "$tmp/check.log")"
  else
    fail "--to megatron at tp $tp x pp $pp, $dtype, $norm"; cat "$tmp/check.log"
  fi
  if [[ $norm != layernorm && $norm != norm && $dtype == fp32 ]]; then  # imported back, through Megatron-core's names
    rm -rf "$tmp/mcore-back"
    "$convert" --from megatron --vocab-size 1000 --load "$tmp/exported" --save "$tmp/mcore-back" >/dev/null &&
      same_as_reference "$tmp/mcore-back" hf-float32-1000 "--to megatron ${names[*]}, then --from megatron" ||
      fail "${names[*]}: importing the export"
  fi
done
rm -rf "$tmp/exported"
"$convert" --to megatron --load "$tmp/trident" --save "$tmp/exported" --target-tp 2 --tokenizer-type NullTokenizer \
    --megatron-norm-names >/dev/null &&
  "$convert" --from megatron --vocab-size 1000 --load "$tmp/exported" --save "$tmp/roundtrip" >/dev/null &&
  same_as_reference "$tmp/roundtrip" hf-float32-1000 "--to megatron, then --from megatron" || fail "export round trip"

# ---- the exact (erf) GELU: Megatron's without its bias-GELU fusion (the legacy model, and
# Megatron-core's even with openai_gelu) imports as an erf model (its weights compared with the
# Hugging Face folder's above), which the Hugging Face export names "gelu" and the Megatron
# export writes as bias_gelu_fusion False, openai_gelu False; that export imports back as erf.
json_field() {  # json_field FILE EXPR: prints EXPR of the JSON object j in FILE
  "$py" -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
erf_model() {  # erf_model CKPT: its metadata.json says the erf GELU
  [[ $(json_field "$1/iter_0000000/metadata.json" 'j["model"].get("gelu")') == erf ]]
}
for name in lm-erf-gelu mcore-erf-gelu; do
  erf_model "$tmp/out-$name" && grep -q ", erf GELU) -> " "$tmp/$name.log" && ok "$name: imported as the erf GELU" ||
    { fail "$name: not imported as the erf GELU"; cat "$tmp/$name.log"; }
done
[[ $(json_field "$tmp/out-lm-erf-gelu-hf/config.json" 'j["activation_function"]') == gelu ]] &&
  ok "--to hf of an erf model: activation_function gelu" || fail "--to hf of an erf model"
rm -rf "$tmp/erf-exported" "$tmp/erf-back"
if "$convert" --to megatron --load "$tmp/out-lm-erf-gelu" --save "$tmp/erf-exported" --tokenizer-type NullTokenizer \
    >"$tmp/erf-export.log" && grep -q "the erf GELU: train with --no-bias-gelu-fusion" "$tmp/erf-export.log" &&
    [[ $("$py" -c 'import sys, torch; a = torch.load(sys.argv[1])["args"]; print(a.bias_gelu_fusion, a.openai_gelu)' \
         "$tmp/erf-exported/release/mp_rank_00/model_optim_rng.pt") == "False False" ]] &&
    "$convert" --from megatron --vocab-size 1000 --load "$tmp/erf-exported" --save "$tmp/erf-back" >/dev/null &&
    erf_model "$tmp/erf-back"; then
  ok "--to megatron of an erf model: bias_gelu_fusion False, openai_gelu False; imported back as erf"
else
  fail "--to megatron of an erf model"; cat "$tmp/erf-export.log"
fi

# ---- errors: one line naming the arg, flag or file; nothing written
expect_error() {  # expect_error TEXT COMMAND...
  local text=$1 save=$tmp/failed
  shift
  rm -rf "$save"
  "$@" --save "$save" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -eq 2 && $(wc -l <"$tmp/err") -eq 1 && ! -e $save ]] && ! compgen -G "$save.tmp-*" >/dev/null &&
      grep -qF -- "$text" "$tmp/err" &&
      grep -q "^trident-convert: error: " "$tmp/err"; then
    ok "$(cat "$tmp/err")"
  else
    fail "expected '$text': rc=$rc, $(ls "$save" 2>/dev/null | wc -l) files written, stderr:"
    cat "$tmp/err"
  fi
}
m=(--from megatron --vocab-size 1000)
expect_error "mp_rank_00/model_optim_rng.pt: args.untie_embeddings_and_output_weights: true" \
  "$convert" "${m[@]}" --load "$src/bad-untied"
expect_error "args.swiglu: true is not supported" "$convert" "${m[@]}" --load "$src/bad-swiglu"
expect_error "args.position_embedding_type: 'rotary' (trident's GPT-2 has learned absolute positions)" \
  "$convert" "${m[@]}" --load "$src/bad-rotary"
expect_error "--num-attention-heads: required: $src/lm-no-args/release/mp_rank_00/model_optim_rng.pt has no 'args'" \
  "$convert" --from megatron --load "$src/lm-no-args"
expect_error "--num-attention-heads 8: $src/lm-tp2-pp2/iter_0000007/mp_rank_00_000/model_optim_rng.pt's args say 4" \
  "$convert" "${m[@]}" --num-attention-heads 8 --load "$src/lm-tp2-pp2"
expect_error "the LM head stored on the last stage differs from the word embedding" \
  "$convert" "${m[@]}" --load "$src/bad-head"
expect_error "--vocab-size: required: $src/lm-tp2-pp2/iter_0000007/mp_rank_00_000/model_optim_rng.pt holds only the padded vocabulary (1024) and its tokenizer_type is 'NullTokenizer'" \
  "$convert" --from megatron --load "$src/lm-tp2-pp2"
expect_error "--vocab-size 2000 pads to 2048 (make_vocab_size_divisible_by 128 x tp 2), not" \
  "$convert" --from megatron --vocab-size 2000 --load "$src/lm-tp2-pp2"
expect_error "--iteration 9: neither $src/lm-tp2-pp2/iter_0000009 nor $src/lm-tp2-pp2/global_step9 exists" \
  "$convert" "${m[@]}" --load "$src/lm-tp2-pp2" --iteration 9
expect_error "--load: $src/hf-float32-1000 holds no Megatron checkpoint" "$convert" "${m[@]}" --load "$src/hf-float32-1000"
expect_error "--vocab-size applies to --from megatron only" "$convert" --from hf --vocab-size 10 --load "$src/hf-float32-1000"
expect_error "$src/bad-dist-chunk/iter_0000007/.metadata: 'decoder.layers.mlp.linear_fc1.weight': its chunks hold 14336 of its 16384 elements [4, 128, 32]" \
  "$convert" "${m[@]}" --load "$src/bad-dist-chunk"
expect_error "$src/bad-dist-overlap/iter_0000007/.metadata: 'decoder.layers.self_attention.linear_qkv.weight' chunk at [3, 47, 0] overlaps the chunk at [3, 0, 0]" \
  "$convert" "${m[@]}" --load "$src/bad-dist-overlap"
expect_error "$src/bad-dist-dtype/iter_0000007/.metadata: 'decoder.layers.mlp.linear_fc2.weight': dtype torch.complex64 is not read" \
  "$convert" "${m[@]}" --load "$src/bad-dist-dtype"
expect_error "$src/bad-dist-zarr/iter_0000007/metadata.json: sharded_backend 'zarr': of Megatron-core's distributed formats only torch_dist is read" \
  "$convert" "${m[@]}" --load "$src/bad-dist-zarr"
# --with-optimizer (tests/e2e/megatron_resume.sh) on checkpoints without a state it reads.
expect_error "$src/dist-layers-tp2/iter_0000007/.metadata: no 'optimizer.state.fp32_param.*' tensors: no optimizer state by parameter" \
  "$convert" "${m[@]}" --load "$src/dist-layers-tp2" --with-optimizer
expect_error "$src/ds-module/global_step5/mp_rank_00_model_states.pt: no 'optimizer' state (DeepSpeed keeps it here at ZeRO stage 0" \
  "$convert" "${m[@]}" --load "$src/ds-module" --with-optimizer
expect_error "--with-optimizer: $src/lm-release-old/release is a release checkpoint, which Megatron loads without optimizer state" \
  "$convert" --from megatron --load "$src/lm-release-old" --with-optimizer
expect_error "--with-optimizer applies to --from megatron and --to megatron only (a trident checkpoint converts with its optimizer state" \
  "$convert" --from hf --load "$src/hf-float32-1000" --with-optimizer
cp -r "$src/dist-layers-tp2" "$tmp/dist-missing"
rm "$tmp/dist-missing/iter_0000007/__1_0.distcp"
expect_error "$tmp/dist-missing/iter_0000007/__1_0.distcp: cannot read: No such file or directory" \
  "$convert" "${m[@]}" --load "$tmp/dist-missing"
cp -r "$src/dist-layers-tp2" "$tmp/dist-truncated"
truncate -s 50000 "$tmp/dist-truncated/iter_0000007/__1_0.distcp"
expect_error "lie past the file's end (50000 bytes)" "$convert" "${m[@]}" --load "$tmp/dist-truncated"
printf '\x80\x04K\x07.' >"$tmp/dist-truncated/iter_0000007/.metadata"  # pickle.dumps(7)
expect_error "$tmp/dist-truncated/iter_0000007/.metadata: holds int 7, not torch's checkpoint Metadata" \
  "$convert" "${m[@]}" --load "$tmp/dist-truncated"
expect_error "--target-pp 3: Megatron's pipeline splits the 4 layers evenly; it must divide them" \
  "$convert" --to megatron --load "$tmp/trident" --target-pp 3 --tokenizer-type NullTokenizer
expect_error "--target-tp 3: --num-attention-heads (4) must be divisible by --tensor-model-parallel-size (3)" \
  "$convert" --to megatron --load "$tmp/trident" --target-tp 3
expect_error "--tokenizer-type: required: Megatron checks args.tokenizer_type on load, and a vocabulary of 1000 tokens" \
  "$convert" --to megatron --load "$tmp/trident"
expect_error "--tokenizer-type: 'GPT2 BPE' is not one of Megatron's tokenizer types (BertWordPieceLowerCase, " \
  "$convert" --to megatron --load "$tmp/trident" --tokenizer-type "GPT2 BPE"
expect_error "--no-optimizer does not apply to --from megatron (an import holds weights only; --from megatron --with-optimizer adds" \
  "$convert" "${m[@]}" --no-optimizer --load "$src/lm-tp2-pp2"
expect_error "--dtype applies to --to hf and --to megatron only" "$convert" "${m[@]}" --dtype bf16 --load "$src/lm-tp2-pp2"
expect_error "--overwrite does not apply to --to megatron" \
  "$convert" --to megatron --load "$tmp/trident" --tokenizer-type NullTokenizer --overwrite
expect_error "--tokenizer-type applies to --to megatron only" \
  "$convert" --to hf --load "$tmp/trident" --tokenizer-type NullTokenizer
expect_error "--ckpt-format torch_dist: Megatron-core's distributed checkpoint holds Megatron-core's model; give --megatron-model mcore" \
  "$convert" --to megatron --load "$tmp/trident" --tokenizer-type NullTokenizer --ckpt-format torch_dist
expect_error "--ckpt-format: 'zarr' is not a format the export writes (torch, torch_dist)" \
  "$convert" --to megatron --load "$tmp/trident" --tokenizer-type NullTokenizer --ckpt-format zarr
expect_error "--ckpt-format applies to --to megatron only" "$convert" --to hf --load "$tmp/trident" --ckpt-format torch
expect_error "--use-distributed-optimizer applies to --to megatron --with-optimizer only" \
  "$convert" --to megatron --megatron-model mcore --load "$tmp/trident" --tokenizer-type NullTokenizer \
  --ckpt-format torch_dist --use-distributed-optimizer
expect_error "--use-distributed-optimizer: applies to --ckpt-format torch_dist (the torch format's distributed optimizer state" \
  "$convert" --to megatron --megatron-model mcore --load "$tmp/trident" --tokenizer-type NullTokenizer --with-optimizer \
  --use-distributed-optimizer
mkdir -p "$tmp/full" && touch "$tmp/full/x"
"$convert" --to megatron --load "$tmp/trident" --tokenizer-type NullTokenizer --save "$tmp/full" >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 2 && $(cat "$tmp/err") == "trident-convert: error: --save: $tmp/full already exists and is not an empty directory" ]] &&
  ok "--to megatron into a non-empty --save" || { fail "--to megatron into a non-empty --save"; cat "$tmp/err"; }
expect_error "--megatron-norm-names applies to --megatron-model legacy only" \
  "$convert" --to megatron --load "$tmp/trident" --tokenizer-type NullTokenizer --megatron-model mcore --megatron-norm-names
expect_error "--megatron-model: 'core' is neither legacy nor mcore" \
  "$convert" --to megatron --load "$tmp/trident" --tokenizer-type NullTokenizer --megatron-model core
expect_error "--megatron-norm-names applies to --to megatron only" \
  "$convert" --from megatron --megatron-norm-names --load "$src/lm-tp2-pp2"
expect_error "--no-optimizer does not apply to --to megatron" \
  "$convert" --to megatron --load "$tmp/trident" --no-optimizer --tokenizer-type NullTokenizer
cp -r "$src/lm-tp2-pp2" "$tmp/truncated"
file=$tmp/truncated/iter_0000007/mp_rank_01_001/model_optim_rng.pt
truncate -s 3000 "$file"
expect_error "$file: not a readable zip archive" "$convert" "${m[@]}" --load "$tmp/truncated"
cp -r "$src/lm-tp2-pp2" "$tmp/missing"
rm -r "$tmp/missing/iter_0000007/mp_rank_01_001"
expect_error "$tmp/missing/iter_0000007: the mp_rank_* folders do not form a tp x pp grid (3 folders for tp 2 x pp 2)" \
  "$convert" "${m[@]}" --load "$tmp/missing"

# A Megatron checkpoint given where trident's is read: one line saying to import it.
for name in dist-te-tp2-pp2 lm-tp2-pp2; do
  "$generate" --device cpu --load "$src/$name" --vocab-file "$vocab/gpt2-vocab.json" \
    --merge-file "$vocab/gpt2-merges.txt" --out-seq-length 4 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [[ $rc -eq 2 && $(wc -l <"$tmp/err") -eq 1 ]] &&
      grep -qF "$src/$name/iter_0000007: a Megatron-" "$tmp/err" &&
      grep -qF "checkpoint, not trident's: import its weights with trident-convert --from megatron" "$tmp/err"; then
    ok "$(cat "$tmp/err")"
  else
    fail "trident-generate --load $name: rc=$rc"; cat "$tmp/err"
  fi
done

echo "megatron_import: $fails failure(s)"
[[ $fails -eq 0 ]]
