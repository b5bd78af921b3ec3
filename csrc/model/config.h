// GPT-2 model shape and the tensor-parallel facts derived from it.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/gelu.h"

namespace trident {

// ModelConfig::validate's upper bounds (see there).
inline constexpr int kMaxLayers = 1 << 16, kMaxHiddenSize = 1 << 20, kMaxPositions = 1 << 24,
                     kMaxVocabDivisor = 1 << 16;
inline constexpr int64_t kMaxVocabSize = 2147483647;

struct ModelConfig {
  int num_layers = 12;
  int hidden_size = 768;
  int num_attention_heads = 12;
  int seq_length = 1024;
  int max_position_embeddings = 1024;
  int64_t vocab_size = 50257;  // real (unpadded) vocabulary
  int make_vocab_size_divisible_by = 128;
  float init_method_std = 0.02f;
  // Megatron's --embedding-init-method-std: 0 (unset) draws the embeddings with
  // init_method_std; set, the word and position embeddings are drawn with it and take no
  // weight decay (its help: "setting this to any value will also skip applying weight decay
  // on embedding weights").
  float embedding_init_method_std = 0.0f;
  // 0 for models built in code (tests, tools); the command line's default is Megatron's 0.1
  // (read_model_flags in csrc/train/options_read.cpp).
  float hidden_dropout = 0.0f;
  float attention_dropout = 0.0f;
  DType dtype = DType::F32;  // parameters, activations and gradients
  // The MLP's activation (core/gelu.h): GPT-2's tanh approximation, or the exact erf GELU
  // that Megatron computes without its bias-GELU fusion and HF's "gelu" names.
  Gelu gelu = Gelu::Tanh;

  int head_dim() const { return hidden_size / num_attention_heads; }
  int ffn_hidden_size() const { return 4 * hidden_size; }
  // Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x tp.
  int64_t padded_vocab_size(int tp) const;
  // Parameters of the full model (padded vocab counted once: the head is tied).
  int64_t num_parameters(int tp = 1) const;
  // Throws ConfigError naming the flag when the shape is impossible (for this tp).
  void validate(int tp = 1) const;
};

// Model FLOPs of one iteration (Megatron-LM's formula of 2021-2024, padded vocab, no
// recompute): 72 B s l h^2 (1 + s / (6 h) + V / (12 l h)), forward + backward. trident's
// TFLOP/s and MFU figures count these, so they compare with the published ones.
double model_flops_per_iteration(const ModelConfig& c, int64_t global_batch, int tp = 1);
// Megatron-LM's num_floating_point_operations since 2025, which counts the causal attention
// scores at half: 72 B s l h^2 (1 + s / (12 h) + V / (12 l h)) for GPT-2's shape. Its
// --log-throughput field and the FLOPs it keeps in checkpoints and --log-progress use it.
double megatron_flops_per_iteration(const ModelConfig& c, int64_t global_batch, int tp = 1);

}  // namespace trident
