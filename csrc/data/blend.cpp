#include "data/blend.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

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

uint64_t blended_dataset_samples(double weight, uint64_t n) {
  return static_cast<uint64_t>(std::ceil(static_cast<double>(n) * weight * 1.005));
}

BlendedSource::BlendedSource(std::vector<std::unique_ptr<SampleSource>> datasets,
                             const std::vector<double>& weights, uint64_t size,
                             const std::vector<std::string>& names, const std::string& flag)
    : datasets_(std::move(datasets)), idx_(build_blending_indices(weights, size)) {
  TRIDENT_CHECK(datasets_.size() == weights.size(), "datasets vs weights");
  TRIDENT_CHECK(names.empty() || names.size() == weights.size(), "dataset names vs weights");
  std::vector<int64_t> need(datasets_.size(), 0);
  for (uint64_t i = 0; i < size; ++i)
    need[idx_.dataset_index[i]] = std::max(need[idx_.dataset_index[i]], idx_.dataset_sample_index[i] + 1);
  for (size_t d = 0; d < datasets_.size(); ++d)
    if (need[d] > 0 && (!datasets_[d] || static_cast<uint64_t>(need[d]) > datasets_[d]->size()))
      throw ConfigError(detail::concat(flag, ": the blend needs ", need[d], " samples of ",
                                       names.empty() ? detail::concat("dataset ", d) : names[d], ", which has ",
                                       datasets_[d] ? datasets_[d]->size() : 0,
                                       datasets_[d]          ? ""
                                       : flag == "--data-path" ? " (no documents in that split: see --split)"
                                                               : " (no documents)"));
}

void BlendedSource::get(uint64_t i, int32_t* tokens) const {
  TRIDENT_CHECK(i < size(), "blended sample ", i, " of ", size());
  datasets_[idx_.dataset_index[i]]->get(static_cast<uint64_t>(idx_.dataset_sample_index[i]), tokens);
}

}  // namespace trident
