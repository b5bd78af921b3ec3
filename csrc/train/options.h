// trident-train's options: Megatron flag names, optionally from a YAML file given with
// --config (same keys, without the dashes; the command line wins over the file).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace trident {

struct TrainOptions {
  ModelConfig model;
  int micro_batch_size = 4;
  int global_batch_size = 0;  // 0: micro_batch_size
  int64_t train_iters = 100;
  double lr = 1.5e-4, min_lr = 0.0;
  std::string lr_decay_style = "linear";
  int64_t lr_warmup_iters = 0;
  int64_t lr_decay_iters = 0;  // 0: train_iters
  float weight_decay = 0.01f, clip_grad = 1.0f;
  float adam_beta1 = 0.9f, adam_beta2 = 0.999f, adam_eps = 1e-8f;
  uint64_t seed = 1234;
  int log_interval = 100;
  std::string device = "auto";
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int zero_stage = 0;  // 1: optimizer state sharded over DP; 2: gradients too
  // Data: --data-path (Megatron form) or synthetic tokens when empty.
  std::vector<std::string> data_path;
  std::string vocab_file, merge_file, tokenizer_type = "GPT2BPETokenizer";
  std::string split = "969, 30, 1";
  std::string data_cache_path;
};

// Parses argv (and the YAML file named by --config). Throws ConfigError naming the flag
// or key for anything unknown, malformed or inconsistent. Returns false after printing
// --help.
bool parse_train_options(int argc, const char* const* argv, TrainOptions& out);

}  // namespace trident
