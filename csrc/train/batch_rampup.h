// Megatron's --rampup-batch-size START INCR SAMPLES (RampupBatchsizeNumMicroBatches in
// megatron/core/num_microbatches_calculator.py): the global batch starts at START and grows
// by INCR every SAMPLES / n consumed samples, n = (G - START) / INCR increments, until it is G
// (--global-batch-size), which it keeps once more than SAMPLES samples are consumed:
//   consumed > SAMPLES:  G
//   otherwise:           START + floor(consumed / (SAMPLES / n)) x INCR
// Each iteration takes the batch of the samples consumed before it; its micro-batches follow
// (batch / (micro batch x data-parallel size)), and the learning rate, which counts samples,
// follows too. Without a ramp-up (start == global) the batch is always G.
#pragma once

#include <cstdint>

namespace trident {

struct BatchRampup {
  int64_t start = 0, increment = 0;  // START and INCR; start == global: no ramp-up
  uint64_t samples = 0;              // SAMPLES
  int64_t global = 0;                // G

  bool ramps() const { return start != global; }
  // The global batch of the iteration that starts after `consumed` samples.
  int64_t global_batch(uint64_t consumed) const;
  // The samples the first `iterations` iterations consume.
  uint64_t samples_in(int64_t iterations) const;
};

// Iterations of a sample-based run of `train_samples` samples (Megatron's update_train_iters):
// the ramp-up's iterations, each taking the batch it is given, then whole batches of G (a
// partial last batch is dropped).
int64_t train_iters_with_rampup(const BatchRampup& r, uint64_t train_samples);

}  // namespace trident
