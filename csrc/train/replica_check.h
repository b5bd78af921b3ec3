// Megatron's --check-weight-hash-across-dp-replicas-interval: every data-parallel replica of a
// model-parallel rank must hold the same parameters, bit for bit (each replica applies the
// same update, or with ZeRO gathers the same pieces). A silent data corruption, a
// nondeterministic kernel or a bug breaks that without any error; the check finds it.
#pragma once

#include <string>

#include "core/backend.h"
#include "model/param_store.h"
#include "parallel/comm.h"

namespace trident {

// XXH3 of each of the rank's parameters (read from the device), gathered over `dp`: "" when
// every replica holds the same, else one line naming the first parameter that differs, the
// data-parallel ranks outside the copy most replicas hold (every group of ranks where no copy
// has a majority), and how many more parameters differ. Every rank of `dp` gets the same
// answer. The parameters must be complete (ZeRO's overlapped gathers waited for).
std::string replica_mismatch(Backend& be, const ParamStore& params, Comm& dp);

}  // namespace trident
