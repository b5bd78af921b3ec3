// Shared by the trainer's tests: a tiny model's options, its synthetic tokens and scratch
// directories.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "train/options.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"

namespace trident {
namespace testing {

constexpr int kGlobalBatch = 4;
constexpr double kMaxLr = 1e-3, kMinLr = 1e-4;
constexpr int64_t kWarmupIters = 4, kTrainIters = 30;

inline TrainOptions tiny_options() {
  TrainOptions o;
  o.model.num_layers = 2;
  o.model.hidden_size = 32;
  o.model.num_attention_heads = 4;
  o.model.seq_length = 16;
  o.model.max_position_embeddings = 16;
  o.model.vocab_size = 64;
  o.micro_batch_size = 4;
  o.global_batch_size = kGlobalBatch;
  o.train_iters = kTrainIters;
  o.lr = kMaxLr;
  o.min_lr = kMinLr;
  o.lr_decay_style = "cosine";
  o.lr_warmup_iters = kWarmupIters;
  o.eval_iters = 0;
  o.log_interval = 1;
  o.seed = 1234;
  return o;
}

// Synthetic tokens for `o`'s model from seed o.seed + seed_offset (the trainer's tests train
// on offset 0 and evaluate on 1), `samples` of them (unbounded by default).
inline std::unique_ptr<SampleSource> synthetic_tokens(const TrainOptions& o, uint64_t seed_offset = 0,
                                                      uint64_t samples = UINT64_MAX) {
  return std::make_unique<SyntheticSource>(o.model.vocab_size, o.model.seq_length, o.seed + seed_offset, samples);
}

inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The ConfigError load_checkpoint throws for `o` on the CPU, or "" when it loads.
inline std::string load_error(const TrainOptions& o) {
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  try {
    tr.load_checkpoint();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path d = fs::temp_directory_path() / ("trident_test_trainer_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace testing
}  // namespace trident
