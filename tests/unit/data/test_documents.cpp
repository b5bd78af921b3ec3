// Documents inside a sample against Megatron's get_ltor_masks_and_position_ids, restated
// below in its own form: position ids reduced after each end-of-document token by the
// length of the document it ends, and the attention mask's rows cleared before it.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "data/documents.h"

namespace trident {
namespace {

constexpr int32_t kEod = 50256;

// Megatron's loop for one sample: position_ids[i + 1:] -= i + 1 - prev_index at each eod
// index i, and attention_mask[i + 1:, :i + 1] = 0 (mask[q][k]: query q may see key k).
void megatron_reference(const std::vector<int32_t>& data, std::vector<int32_t>& position_ids,
                        std::vector<std::vector<bool>>& mask) {
  const int T = static_cast<int>(data.size());
  position_ids.resize(T);
  for (int t = 0; t < T; ++t) position_ids[t] = t;
  mask.assign(T, std::vector<bool>(T, false));
  for (int q = 0; q < T; ++q)
    for (int k = 0; k <= q; ++k) mask[q][k] = true;  // torch.tril
  std::vector<int> eod_index;
  for (int t = 0; t < T; ++t)
    if (data[t] == kEod) eod_index.push_back(t);
  int prev_index = 0;
  for (int i : eod_index) {
    for (int q = i + 1; q < T; ++q)
      for (int k = 0; k <= i; ++k) mask[q][k] = false;
    for (int t = i + 1; t < T; ++t) position_ids[t] -= i + 1 - prev_index;
    prev_index = i + 1;
  }
}

void expect_matches_megatron(const std::vector<int32_t>& data) {
  const int T = static_cast<int>(data.size());
  std::vector<int32_t> starts(T, -7), want_pos;
  std::vector<std::vector<bool>> want_mask;
  document_starts(data.data(), T, kEod, starts.data());
  megatron_reference(data, want_pos, want_mask);
  for (int q = 0; q < T; ++q) {
    EXPECT_EQ(q - starts[q], want_pos[q]) << "position id of token " << q;
    for (int k = 0; k < T; ++k)
      EXPECT_EQ(starts[q] <= k && k <= q, want_mask[q][k]) << "query " << q << " key " << k;
  }
}

TEST(Documents, EdgeCases) {
  expect_matches_megatron({1, 2, 3, 4});                       // one document
  expect_matches_megatron({kEod, 1, 2, kEod});                  // at both ends
  expect_matches_megatron({5, kEod, kEod, kEod, 6, 7});         // empty documents in a row
  expect_matches_megatron({kEod});                              // T = 1
  expect_matches_megatron({kEod, kEod, kEod});
}

TEST(Documents, RandomSamplesMatchMegatron) {
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    const int T = 1 + static_cast<int>(rng() % 64);
    const double p = (rng() % 5) / 8.0;  // 0 .. 0.5 end-of-document tokens
    std::bernoulli_distribution is_eod(p);
    std::vector<int32_t> data(T);
    for (int32_t& x : data) x = is_eod(rng) ? kEod : static_cast<int32_t>(rng() % 1000);
    expect_matches_megatron(data);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace trident
