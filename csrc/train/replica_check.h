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
// every replica's equal this rank's, else one line naming the first parameter that differs,
// the data-parallel ranks whose copy differs from data-parallel rank 0's, and how many
// parameters differ. Every rank of `dp` gets the same answer. The parameters must be
// complete (ZeRO's overlapped gathers waited for).
std::string replica_mismatch(Backend& be, const ParamStore& params, Comm& dp);

}  // namespace trident
