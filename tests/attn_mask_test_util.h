// The saved attention dropout mask's tests (core/attn_dropout_mask.h): its bits are defined
// at the elements a query sees only, so checks walk those.
#pragma once

#include <cstdint>
#include <vector>

namespace trident::test {

// How many of the elements that the queries of B x H heads see (keys from the query's document
// start, docs[b T + i], or from 0 without documents, up to the query) satisfy differ(b, h, i, j).
template <class Differ>
int64_t count_visible(int B, int H, int T, const std::vector<int32_t>& docs, Differ&& differ) {
  int64_t n = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i)
        for (int j = docs.empty() ? 0 : docs[static_cast<size_t>(b) * T + i]; j <= i; ++j) n += differ(b, h, i, j);
  return n;
}

}  // namespace trident::test
