// Megatron's blended dataset: sample i of the blend comes from dataset dataset_index[i], its
// sample dataset_sample_index[i]. Greedy: at each i pick the dataset whose achieved count lags
// its weight the most (error = w_d * max(i, 1) - count_d, first maximum wins; a dataset of
// weight 0 is never picked).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"

namespace trident {

struct BlendingIndices {
  std::vector<uint16_t> dataset_index;
  std::vector<int64_t> dataset_sample_index;
};

// weights must be normalised (sum 1).
BlendingIndices build_blending_indices(const std::vector<double>& weights, uint64_t size);

// Per-dataset sample counts Megatron asks for when blending: ceil(weight * n * 1.005).
uint64_t blended_dataset_samples(double weight, uint64_t n);

class BlendedSource : public SampleSource {
 public:
  // weights normalised; every dataset must hold enough samples for the blend (checked; the
  // error names the flag that gave the blend and dataset d as names[d] when given, e.g.
  // "PREFIX (valid split)").
  BlendedSource(std::vector<std::unique_ptr<SampleSource>> datasets, const std::vector<double>& weights,
                uint64_t size, const std::vector<std::string>& names = {}, const std::string& flag = "--data-path");
  uint64_t size() const override { return idx_.dataset_index.size(); }
  void get(uint64_t i, int32_t* tokens) const override;
  const BlendingIndices& indices() const { return idx_; }
  const SampleSource& dataset(size_t d) const { return *datasets_[d]; }

 private:
  std::vector<std::unique_ptr<SampleSource>> datasets_;
  BlendingIndices idx_;
};

}  // namespace trident
