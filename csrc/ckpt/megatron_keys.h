// The parameter names of Megatron's GPT models (legacy, Megatron-core with the local or the
// Transformer Engine layer spec) -> trident's canonical names. Internal to the Megatron import
// and export.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace trident::megatron {

// Megatron's module paths inside a transformer layer (legacy, legacy Transformer Engine,
// Megatron-core local and TE specs) of each canonical module; "weight"/"bias" follow.
struct LayerModule {
  const char* canonical;
  std::vector<const char*> megatron;
};
const std::vector<LayerModule>& layer_modules();

// What a flattened state-dict key is.
struct KeyMeaning {
  enum What { kSkip, kWte, kWpe, kHead, kFinalNorm, kLayer } what = kSkip;
  int local_layer = -1;
  std::string suffix;  // kLayer: canonical suffix ("attn.qkv.weight"); kFinalNorm: "weight"/"bias"
};

// Megatron-core's module inside a transformer layer with the local layer spec, for a
// canonical module ("attn.qkv." -> "self_attention.linear_qkv."), and whether it is a parallel
// linear layer (whose state dict holds an '_extra_state').
struct CoreLocalModule {
  const char* canonical;
  const char* module;
  bool linear;
};
// In the order a layer builds them, its named_parameters() order (Attention builds
// linear_proj before SelfAttention its linear_qkv).
const std::vector<CoreLocalModule>& core_local_modules();

// Removes `prefix` from the front of `s`; false (and `s` unchanged) when it is not there.
bool strip(std::string& s, const char* prefix);

// The meaning of a key ("module."/"language_model." prefixes allowed; "encoder.", "transformer."
// or "decoder." before the layers); kSkip for Transformer Engine's '_extra_state'; nullopt when
// it is not a key of a GPT model.
std::optional<KeyMeaning> classify(std::string key);

}  // namespace trident::megatron
