// Gpt2Decoder: GPT-2's forward for generation, one token per sequence per step, with a
// key/value cache per layer so each step attends over everything before it without
// recomputing it. It reads the parameters of a one-process (tp 1) ParamStore, the same
// canonical tensors training uses, and calls the Backend ops only (CPU or CUDA).
//
// step() feeds the next token of each of the B sequences (all at the same position) and
// returns the logits of the token after it. The same numbers as the training forward on
// the whole sequence, up to the order of floating-point sums (tests/unit/infer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "model/config.h"
#include "model/param_store.h"

namespace trident {

class Gpt2Decoder {
 public:
  // `params`: all of the model's parameters at tp 1, in cfg.dtype. `max_positions`: cache
  // length (at most cfg.max_position_embeddings).
  Gpt2Decoder(const ModelConfig& cfg, Backend& backend, const ParamStore& params, int batch, int max_positions);

  // Feeds tokens[b] at position position() of sequence b and returns the next-token
  // logits, [batch, vocab_size] row-major on the host (padding columns left out).
  const std::vector<float>& step(const std::vector<int32_t>& tokens);
  int position() const { return pos_; }
  int max_positions() const { return max_pos_; }
  int batch() const { return B_; }
  void reset() { pos_ = 0; }  // start new sequences (the caches are overwritten as they go)

 private:
  Tensor p(const std::string& name) const { return params_.param(name); }
  // residual += branch, then the LayerNorm named `ln` (its .weight/.bias) of the result.
  void residual_norm(const Tensor& branch, const std::string& ln);

  ModelConfig cfg_;
  Backend& be_;
  const ParamStore& params_;
  int B_, max_pos_, C_, H_, D_, F_;
  int64_t vocab_padded_;
  int pos_ = 0;
  std::vector<Buffer> k_cache_, v_cache_;  // per layer [B, max_pos, H, D]
  Buffer tokens_, x_, ln_, ln_mean_, ln_rstd_, qkv_, att_, proj_, fc_, gelu_, logits_;
  std::vector<unsigned char> logits_bytes_;
  std::vector<float> logits_host_;
};

}  // namespace trident
