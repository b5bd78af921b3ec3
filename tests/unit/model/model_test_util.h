// Helpers shared by the model tests: a tiny configuration and host copies of tensors.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"
#include "model/config.h"

namespace trident::test {

inline ModelConfig tiny_config() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.seq_length = 8;
  c.max_position_embeddings = 8;
  c.vocab_size = 50;
  c.make_vocab_size_divisible_by = 16;  // padded to 64: padding rows exist
  return c;
}

inline std::vector<float> to_host(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::F32) {
    be.copy_to_host(out.data(), t);
  } else {
    Buffer tmp = be.empty(t.shape, DType::F32);
    be.cast(t, tmp);
    be.copy_to_host(out.data(), tmp);
  }
  return out;
}

}  // namespace trident::test
