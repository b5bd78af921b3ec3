// Synthetic token stream for runs without --data-path (quickstart before a corpus exists,
// benchmarks, tests): a noisy affine recurrence over a small alphabet, so a model can
// learn it and the loss visibly falls. Sample i is a pure function of (seed, i).
#pragma once

#include <cstdint>

#include "data/gpt_dataset.h"

namespace trident {

class SyntheticSource final : public SampleSource {
 public:
  SyntheticSource(int64_t vocab_size, int seq_length, uint64_t seed, uint64_t size = UINT64_MAX)
      : alphabet_(vocab_size < 512 ? vocab_size : 512), seq_(seq_length), seed_(seed), size_(size) {}
  uint64_t size() const override { return size_; }
  void get(uint64_t i, int32_t* tokens) const override;

 private:
  int64_t alphabet_;
  int seq_;
  uint64_t seed_, size_;
};

}  // namespace trident
