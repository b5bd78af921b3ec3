// Hugging Face GPT2LMHeadModel <-> trident canonical tensors.
//
// Names (canonical -> HF):
//   wte -> transformer.wte.weight [V, C]      wpe -> transformer.wpe.weight [P, C]
//   h.{i}.ln_1.{weight,bias}  -> transformer.h.{i}.ln_1.{weight,bias}
//   h.{i}.attn.qkv.weight [3C, C]   -> transformer.h.{i}.attn.c_attn.weight [C, 3C]  (transpose)
//   h.{i}.attn.qkv.bias [3C]        -> transformer.h.{i}.attn.c_attn.bias [3C]
//   h.{i}.attn.proj.weight [C, C]   -> transformer.h.{i}.attn.c_proj.weight [C, C]   (transpose)
//   h.{i}.attn.proj.bias            -> transformer.h.{i}.attn.c_proj.bias
//   h.{i}.ln_2.*                    -> transformer.h.{i}.ln_2.*
//   h.{i}.mlp.fc.weight [4C, C]     -> transformer.h.{i}.mlp.c_fc.weight [C, 4C]     (transpose)
//   h.{i}.mlp.fc.bias               -> transformer.h.{i}.mlp.c_fc.bias
//   h.{i}.mlp.proj.weight [C, 4C]   -> transformer.h.{i}.mlp.c_proj.weight [4C, C]   (transpose)
//   h.{i}.mlp.proj.bias             -> transformer.h.{i}.mlp.c_proj.bias
//   ln_f.{weight,bias}              -> transformer.ln_f.{weight,bias}
//
// Layouts. HF's Conv1D computes y = x W + b with W stored [in, out]; our Linear stores
// [out, in], so every Conv1D weight is our weight transposed. c_attn's 3C output columns are
// Q, K, V blocks of C each (split along the last dim), and inside each block head h owns
// columns [h*D, (h+1)*D) (a view as [heads, head_dim]). Our qkv rows are Q (heads in order),
// K, V with the same inner order, so c_attn.weight = qkv.weight^T exactly and the biases are
// equal: no head permutation (unlike Megatron's interleaved [heads][3][D] layout).
//
// Vocabulary: HF holds the real vocabulary ([vocab_size, C]); export drops our padding rows,
// import returns the unpadded (stored) form (see canonical_slices.h for re-padding).
//
// lm_head.weight is tied to wte. Export does NOT write it: HF's own save_pretrained drops
// tied weights from safetensors files and GPT2LMHeadModel re-ties lm_head to wte on load.
// Import accepts a file with lm_head.weight only when it equals wte bit for bit (an untied
// head cannot be represented and is refused). Import also accepts names without the
// "transformer." prefix (GPT2Model files, the original hub checkpoint) and ignores the
// causal-mask buffers h.{i}.attn.bias / h.{i}.attn.masked_bias some files carry.
//
// Files: DIR/model.safetensors (metadata {"format": "pt"}, which transformers requires) and
// DIR/config.json (GPT2Config fields). Sharded HF checkpoints are not supported.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/canonical_slices.h"
#include "ckpt/safetensors.h"
#include "model/config.h"

namespace trident {

// HF name of a canonical parameter name and whether the weight is transposed; ConfigError
// for names that are not GPT-2 parameters.
std::string hf_gpt2_name(const std::string& canonical);
bool hf_gpt2_transposed(const std::string& canonical);

// Canonical tensors (every gpt2_param_specs name, full shapes; wte padded or not) -> HF
// tensors (HF names and shapes, vocab unpadded). Throws ConfigError naming a missing,
// misshapen or unknown tensor.
TensorMap canonical_to_hf_gpt2(const ModelConfig& cfg, const TensorMap& canonical);
// HF tensors (names with or without "transformer.") -> canonical tensors, wte unpadded.
// Throws IoError "<source>: ..." naming a missing, misshapen or unexpected tensor.
TensorMap hf_gpt2_to_canonical(const ModelConfig& cfg, const TensorMap& hf, const std::string& source = "hf tensors");

// config.json contents for `cfg` (torch_dtype from `dtype`).
nlohmann::json hf_gpt2_config_json(const ModelConfig& cfg, StDType dtype = StDType::F32);
// Reads GPT2Config fields. Malformed values: IoError; valid but unsupported settings (another
// activation than a GELU, untied head, n_inner != 4 n_embd, other eps, ...): ConfigError. Both
// name the source and field. seq_length = n_positions; make_vocab_size_divisible_by is not an
// HF field; activation_function "gelu" is the erf GELU, "gelu_new" (what the export writes
// for the tanh one), "gelu_fast", "gelu_pytorch_tanh" the tanh one.
ModelConfig model_config_from_hf_gpt2(const nlohmann::json& j, const std::string& source,
                                      int make_vocab_size_divisible_by = 128);

// Writes DIR/config.json and DIR/model.safetensors (creating DIR); tensors stored as `dtype`
// (F32, F16 or BF16). Returns what was written for model.safetensors.
WrittenFile export_hf_gpt2(const std::string& dir, const ModelConfig& cfg, const TensorMap& canonical,
                           StDType dtype = StDType::F32);

struct HfGpt2Model {
  ModelConfig config;
  TensorMap tensors;  // canonical names, fp32, wte unpadded
};
// Reads DIR/config.json and DIR/model.safetensors (F32, F16 or BF16 tensors).
HfGpt2Model import_hf_gpt2(const std::string& dir, int make_vocab_size_divisible_by = 128);

}  // namespace trident
