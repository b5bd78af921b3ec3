// Megatron's blended dataset: sample i of the blend comes from dataset dataset_index[i], its
// sample dataset_sample_index[i]. Greedy: at each i pick the dataset whose achieved count lags
// its weight the most (error = w_d * max(i, 1) - count_d, first maximum wins; a dataset of
// weight 0 is never picked).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/array_cache.h"
#include "data/gpt_dataset.h"

namespace trident {

struct BlendingIndices {
  std::vector<uint16_t> dataset_index;
  std::vector<int64_t> dataset_sample_index;
};

// Read-only view of blending indices, owned by a BlendingIndices or by a mapped cache file.
struct BlendingView {
  std::span<const uint16_t> dataset_index;
  std::span<const int64_t> dataset_sample_index;
};

// weights must be normalised (sum 1).
BlendingIndices build_blending_indices(const std::vector<double>& weights, uint64_t size);

// Per-dataset sample counts Megatron asks for when blending: ceil(weight * n * 1.005) (its
// rule until Megatron-core had --mid-level-dataset-surplus), or with a surplus s, Megatron-core's
// since: ceil(ceil(n * weight) * (1 + s)). Each in Python's double arithmetic.
uint64_t blended_dataset_samples(double weight, uint64_t n, std::optional<double> surplus = std::nullopt);

class BlendedSource : public SampleSource {
 public:
  // weights normalised; every dataset must hold enough samples for the blend (checked; the
  // error names the flag that gave the blend and dataset d as names[d] when given, e.g.
  // "PREFIX (valid split)"). With a cache_dir the indices are read from the file there that
  // holds them for these weights and size, else built and written to it (10 bytes a sample:
  // 3 GB at 300M samples, that every rank of a node would otherwise hold; Megatron-core
  // caches them likewise).
  BlendedSource(std::vector<std::unique_ptr<SampleSource>> datasets, const std::vector<double>& weights,
                uint64_t size, const std::vector<std::string>& names = {}, const std::string& flag = "--data-path",
                const std::string& cache_dir = "");
  uint64_t size() const override { return view_.dataset_index.size(); }
  void get(uint64_t i, int32_t* tokens) const override;
  const BlendingView& indices() const { return view_; }
  const SampleSource& dataset(size_t d) const { return *datasets_[d]; }
  const std::string& cache_file() const { return cache_file_; }  // empty without a cache_dir
  bool loaded_from_cache() const { return from_cache_; }

 private:
  std::vector<std::unique_ptr<SampleSource>> datasets_;
  BlendingIndices owned_;                  // without a cache file, or when it cannot be written
  std::optional<MappedArrayCache> cache_;  // the mapped cache file
  BlendingView view_;
  std::string cache_file_;
  bool from_cache_ = false;
};

}  // namespace trident
