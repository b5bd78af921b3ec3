#include "ckpt/megatron_keys.h"

#include <cstring>

#include "ckpt/checkpoint_dir.h"

namespace trident::megatron {

const std::vector<LayerModule>& layer_modules() {
  static const std::vector<LayerModule> m = {
      {"ln_1.", {"input_layernorm.", "input_norm.", "self_attention.linear_qkv.layer_norm_",
                 "self_attention.layernorm_qkv.layer_norm_"}},
      {"attn.qkv.", {"self_attention.query_key_value.", "attention.query_key_value.", "self_attention.linear_qkv.",
                     "self_attention.layernorm_qkv."}},
      {"attn.proj.", {"self_attention.dense.", "attention.dense.", "self_attention.linear_proj.", "self_attention.proj."}},
      {"ln_2.", {"post_attention_layernorm.", "post_attention_norm.", "pre_mlp_layernorm.", "mlp.linear_fc1.layer_norm_",
                 "layernorm_mlp.layer_norm_"}},
      {"mlp.fc.", {"mlp.dense_h_to_4h.", "mlp.linear_fc1.", "layernorm_mlp.fc1_"}},
      {"mlp.proj.", {"mlp.dense_4h_to_h.", "mlp.linear_fc2.", "layernorm_mlp.fc2_"}},
  };
  return m;
}

const std::vector<CoreLocalModule>& core_local_modules() {
  static const std::vector<CoreLocalModule> m = {
      {"ln_1.", "input_layernorm.", false},       {"attn.proj.", "self_attention.linear_proj.", true},
      {"attn.qkv.", "self_attention.linear_qkv.", true}, {"ln_2.", "pre_mlp_layernorm.", false},
      {"mlp.fc.", "mlp.linear_fc1.", true},       {"mlp.proj.", "mlp.linear_fc2.", true},
  };
  return m;
}

bool strip(std::string& s, const char* prefix) {
  const size_t n = std::strlen(prefix);
  if (s.compare(0, n, prefix) != 0) return false;
  s.erase(0, n);
  return true;
}

namespace {

bool weight_or_bias(const std::string& s) { return s == "weight" || s == "bias"; }

}  // namespace

std::optional<KeyMeaning> classify(std::string key) {
  KeyMeaning m;
  if (key.size() >= 12 && key.compare(key.size() - 12, 12, "_extra_state") == 0) return m;  // TE's fp8 metadata
  strip(key, "module.");
  strip(key, "language_model.");
  if (key == "embedding.word_embeddings.weight") m.what = KeyMeaning::kWte;
  else if (key == "embedding.position_embeddings.weight") m.what = KeyMeaning::kWpe;
  else if (key == "word_embeddings_for_head.weight" || key == "output_layer.weight") m.what = KeyMeaning::kHead;
  if (m.what != KeyMeaning::kSkip) return m;
  if (!strip(key, "encoder.") && !strip(key, "transformer.") && !strip(key, "decoder.")) return std::nullopt;
  if (strip(key, "final_layernorm.") || strip(key, "final_norm.")) {
    if (!weight_or_bias(key)) return std::nullopt;
    m.what = KeyMeaning::kFinalNorm;
    m.suffix = key;
    return m;
  }
  if (!strip(key, "layers.")) return std::nullopt;
  const size_t dot = key.find('.');
  const std::string num = key.substr(0, dot);
  if (dot == std::string::npos || num.empty() || num.size() > 6 || !all_digits(num)) return std::nullopt;
  const std::string rest = key.substr(dot + 1);
  for (const LayerModule& lm : layer_modules())
    for (const char* path : lm.megatron) {
      std::string r = rest;
      if (strip(r, path) && weight_or_bias(r)) {
        m.what = KeyMeaning::kLayer;
        m.local_layer = std::stoi(num);
        m.suffix = std::string(lm.canonical) + r;
        return m;
      }
    }
  return std::nullopt;
}

}  // namespace trident::megatron
