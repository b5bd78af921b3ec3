#include "ckpt/index_ranges.h"

#include <algorithm>

namespace trident {

IndexRanges normalized(IndexRanges ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const IndexRange& x, const IndexRange& y) { return x.begin < y.begin; });
  IndexRanges out;
  for (const IndexRange& r : ranges) {
    if (r.end <= r.begin) continue;
    if (!out.empty() && r.begin <= out.back().end)
      out.back().end = std::max(out.back().end, r.end);
    else
      out.push_back(r);
  }
  return out;
}

IndexRanges subtract(const IndexRanges& a, const IndexRanges& b) {
  IndexRanges out;
  size_t j = 0;
  for (IndexRange r : a) {
    while (j < b.size() && b[j].end <= r.begin) ++j;
    // Cut every range of b that overlaps r out of it; a range of b that reaches past r may
    // overlap the next range of a too, so j stays on it.
    for (size_t k = j; k < b.size() && b[k].begin < r.end; ++k) {
      if (b[k].begin > r.begin) out.push_back({r.begin, b[k].begin});
      r.begin = std::max(r.begin, b[k].end);
    }
    if (r.begin < r.end) out.push_back(r);
  }
  return out;
}

bool intersects(const IndexRanges& a, const IndexRanges& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].end <= b[j].begin) ++i;
    else if (b[j].end <= a[i].begin) ++j;
    else return true;
  }
  return false;
}

IndexRanges canonical_ranges(const ParamSpec& spec, int tp, int tp_rank, int64_t local_begin, int64_t local_end,
                             int64_t stored_numel) {
  IndexRanges out;
  for_each_canonical_run(spec, tp, tp_rank, local_begin, local_end, stored_numel, [&](int64_t, int64_t g, int64_t n) {
    if (!out.empty() && out.back().end == g)
      out.back().end += n;
    else
      out.push_back({g, g + n});
  });
  return normalized(std::move(out));
}

}  // namespace trident
