// The device memory one rank of a training run needs, measured rather than estimated: the
// rank's Trainer is built on a DryRunBackend (nothing allocated, nothing computed) with
// communicators that move nothing, and runs one training iteration, so the caching
// allocator sees the very requests the real run makes (every trainer tensor: parameters,
// gradients, optimizer state, activation slots, scratch), for any model size on any
// machine. Not counted: what a device backend's kernels borrow inside an op (reduction
// partials), the CUDA context, cuBLASLt's workspace and NCCL's buffers. trident-plan
// prints it per pipeline stage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "parallel/pipeline_split.h"
#include "train/options.h"

namespace trident {

struct StageMemory {
  int stage = 0;
  std::vector<LayerRange> layers;  // of each model chunk
  int64_t parameters = 0;          // elements of the rank's parameter slices (the padded vocabulary's
                                   // rows included, the flat buffer's alignment not)
  size_t weights = 0, gradients = 0, optimizer = 0;  // bytes: flat parameters, flat gradients, optimizer state
  size_t after_setup = 0;  // bytes in use once the trainer is built
  size_t peak = 0;         // the most bytes in use at once, over setup and one training iteration
};

// Rank (tp 0, dp 0) of pipeline stage `stage` of a run of `opt` on `world` ranks (tp x pp x
// dp, from opt's parallel sizes). TP and DP ranks hold the same sizes. Throws ConfigError as
// trident-train would for an impossible layout.
StageMemory plan_stage_memory(const TrainOptions& opt, int world, int stage);

}  // namespace trident
