// Sums of sample counts that may be "no end" (UINT64_MAX: synthetic tokens, a skip to the end).
#pragma once

#include <cstdint>

namespace trident {

// a + b, or UINT64_MAX where that would wrap.
constexpr uint64_t saturating_add(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

}  // namespace trident
