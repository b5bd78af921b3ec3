// Fast host generation of the N(0, std) parameter init, bit-identical to the scalar
// reference `std * init_normal(seed, name_hash, index)` (core/philox.h).
//
// Why: parameter init was ~50 ns per element on one thread (Philox plus a double log,
// cos and sqrt per element), i.e. 19 s for gpt2-345m and ~90 s for gpt2-1.3b before the
// first step. Every element is a pure function of (seed, name, canonical index), so the
// work splits over threads with no effect on the numbers, and the per-element math runs
// in a vectorisable fast path whose result is checked against the rounding to float
// (see param_init.cpp): where the check cannot prove the fast value rounds to the same
// float as the reference, that element is recomputed with the reference itself.
#pragma once

#include <cstdint>

namespace trident {

// out[j] = std * init_normal(seed, name_hash, first + j) for 0 <= j < n, bit for bit.
// One thread; callers split long ranges over threads (the result does not depend on how).
void init_normal_range(uint64_t seed, uint32_t name_hash, uint64_t first, int64_t n, float std, float* out);

// How many elements of a range init_normal_range computed with the reference instead of
// the fast path, since the program started (a counter for tests; relaxed atomic).
uint64_t init_normal_fallbacks();

}  // namespace trident
