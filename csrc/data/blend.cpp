#include "data/blend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/hex.h"

namespace trident {

BlendingIndices build_blending_indices(const std::vector<double>& weights, uint64_t size) {
  TRIDENT_CHECK(!weights.empty() && weights.size() < 65536, "blend of ", weights.size(), " datasets");
  BlendingIndices out;
  out.dataset_index.resize(size);
  out.dataset_sample_index.resize(size);
  std::vector<int64_t> count(weights.size(), 0);
  // A dataset of weight 0 is never picked, even where its error (0) ties the others' (they
  // can all be 0 when the counts are exactly proportional): an unweighted blend gives a
  // prefix whose split holds no samples weight 0.
  TRIDENT_CHECK(std::any_of(weights.begin(), weights.end(), [](double w) { return w > 0; }),
                "blend without a positive weight");
  for (uint64_t i = 0; i < size; ++i) {
    const double at = std::max(static_cast<double>(i), 1.0);
    size_t best = weights.size();
    double best_err = 0;
    for (size_t d = 0; d < weights.size(); ++d) {
      if (!(weights[d] > 0)) continue;
      const double err = weights[d] * at - static_cast<double>(count[d]);
      if (best == weights.size() || err > best_err) {
        best_err = err;
        best = d;
      }
    }
    out.dataset_index[i] = static_cast<uint16_t>(best);
    out.dataset_sample_index[i] = count[best]++;
  }
  return out;
}

uint64_t blended_dataset_samples(double weight, uint64_t n, std::optional<double> surplus) {
  if (surplus) return static_cast<uint64_t>(std::ceil(std::ceil(static_cast<double>(n) * weight) * (1.0 + *surplus)));
  return static_cast<uint64_t>(std::ceil(static_cast<double>(n) * weight * 1.005));
}

namespace {

constexpr uint32_t kBlendArrayBytes[2] = {2, 8};  // dataset_index, dataset_sample_index

// The indices depend on the weights and the size alone (not on what the datasets hold).
uint64_t blend_key_hash(const std::vector<double>& weights, uint64_t size) {
  std::string key = detail::concat("trident-blend-v1|", size);
  char w[40];
  for (double x : weights) {
    std::snprintf(w, sizeof w, "|%a", x);  // exact
    key += w;
  }
  return cache_key_hash(key);
}

std::optional<MappedArrayCache> open_blend(const std::string& path, uint64_t hash, uint64_t size, BlendingView& v) {
  auto c = MappedArrayCache::open(path, hash, 0, kBlendArrayBytes);
  if (!c || c->array<uint16_t>(0).size() != size || c->array<int64_t>(1).size() != size) return std::nullopt;
  v = {c->array<uint16_t>(0), c->array<int64_t>(1)};
  return c;
}

}  // namespace

BlendedSource::BlendedSource(std::vector<std::unique_ptr<SampleSource>> datasets,
                             const std::vector<double>& weights, uint64_t size,
                             const std::vector<std::string>& names, const std::string& flag,
                             const std::string& cache_dir)
    : datasets_(std::move(datasets)) {
  TRIDENT_CHECK(datasets_.size() == weights.size(), "datasets vs weights");
  TRIDENT_CHECK(names.empty() || names.size() == weights.size(), "dataset names vs weights");
  const uint64_t hash = blend_key_hash(weights, size);
  if (!cache_dir.empty()) {
    cache_file_ =
        (std::filesystem::path(cache_dir) / detail::concat("blend_", size, "ns_", hex64(hash), ".tidx")).string();
    cache_ = open_blend(cache_file_, hash, size, view_);
  }
  from_cache_ = cache_.has_value();
  if (!cache_) {
    owned_ = build_blending_indices(weights, size);
    const CacheArray arrays[2] = {cache_array(owned_.dataset_index), cache_array(owned_.dataset_sample_index)};
    std::error_code ec;
    if (!cache_dir.empty()) std::filesystem::create_directories(cache_dir, ec);
    if (!cache_file_.empty() && save_array_cache(cache_file_, hash, {}, arrays, "a blend-index build") &&
        (cache_ = open_blend(cache_file_, hash, size, view_)))
      owned_ = BlendingIndices();  // serve from the shared mapping
    else
      view_ = {owned_.dataset_index, owned_.dataset_sample_index};
  }
  std::vector<int64_t> need(datasets_.size(), 0);
  for (uint64_t i = 0; i < size; ++i) {
    const uint16_t d = view_.dataset_index[i];
    if (d >= datasets_.size())
      throw IoError(detail::concat(cache_file_, ": corrupt blend cache (sample ", i, "); delete it"));
    need[d] = std::max(need[d], view_.dataset_sample_index[i] + 1);
  }
  for (size_t d = 0; d < datasets_.size(); ++d)
    if (need[d] > 0 && (!datasets_[d] || static_cast<uint64_t>(need[d]) > datasets_[d]->size()))
      throw ConfigError(detail::concat(flag, ": the blend needs ", need[d], " samples of ",
                                       names.empty() ? detail::concat("dataset ", d) : names[d], ", which has ",
                                       datasets_[d] ? datasets_[d]->size() : 0,
                                       datasets_[d]          ? ""
                                       : flag.starts_with("--data") ? " (no documents in that split: see --split)"
                                                               : " (no documents)"));
}

void BlendedSource::get(uint64_t i, int32_t* tokens) const {
  TRIDENT_CHECK(i < size(), "blended sample ", i, " of ", size());
  datasets_[view_.dataset_index[i]]->get(static_cast<uint64_t>(view_.dataset_sample_index[i]), tokens);
}

}  // namespace trident
