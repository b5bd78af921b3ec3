// Sets of element indices as sorted, disjoint [begin, end) ranges: which canonical elements
// of a parameter a rank needs, and which of them a checkpoint file holds, so that a reader
// can open only the files that hold what it needs.
#pragma once

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

}  // namespace trident
