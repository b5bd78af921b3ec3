// Sets of element indices as sorted, disjoint [begin, end) ranges: which canonical elements
// of a parameter a rank needs, and which of them a checkpoint file holds, so that a reader
// can open only the files that hold what it needs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/param_spec.h"

namespace trident {

struct IndexRange {
  int64_t begin = 0, end = 0;
  bool operator==(const IndexRange&) const = default;
};
// Sorted by begin, disjoint, none empty, none touching the next (normalized() makes one).
using IndexRanges = std::vector<IndexRange>;

// Sorted and merged; empty ranges dropped.
IndexRanges normalized(IndexRanges ranges);
// The indices of `a` not in `b` (both normalized).
IndexRanges subtract(const IndexRanges& a, const IndexRanges& b);
bool intersects(const IndexRanges& a, const IndexRanges& b);

// The canonical indices of elements [local_begin, local_end) of TP rank `tp_rank`'s slice of
// `spec` at `tp`, those at or past `stored_numel` (vocabulary padding) left out.
IndexRanges canonical_ranges(const ParamSpec& spec, int tp, int tp_rank, int64_t local_begin, int64_t local_end,
                             int64_t stored_numel);

// Walks the same elements in runs of consecutive canonical indices: fn(local, canonical, n)
// for each run of n > 0 elements from local index `local` and canonical index `canonical`.
template <typename Fn>
void for_each_canonical_run(const ParamSpec& spec, int tp, int tp_rank, int64_t local_begin, int64_t local_end,
                            int64_t stored_numel, Fn&& fn) {
  for (int64_t i = local_begin; i < local_end;) {
    const int64_t g = canonical_index(spec, tp, tp_rank, i);
    const int64_t run = std::min(canonical_run(spec, tp, i), local_end - i);
    const int64_t kept = std::min(run, stored_numel - g);
    if (kept > 0) fn(i, g, kept);
    i += run;
  }
}

}  // namespace trident
