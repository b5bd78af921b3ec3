#include "train/batch_rampup.h"

namespace trident {

int64_t BatchRampup::global_batch(uint64_t consumed) const {
  if (!ramps() || consumed > samples) return global;
  const double samples_per_increment = static_cast<double>(samples) / static_cast<double>((global - start) / increment);
  const auto steps = static_cast<int64_t>(static_cast<double>(consumed) / samples_per_increment);
  return start + steps * increment;
}

uint64_t BatchRampup::samples_in(int64_t iterations) const {
  uint64_t consumed = 0;
  for (int64_t i = 0; i < iterations; ++i) consumed += static_cast<uint64_t>(global_batch(consumed));
  return consumed;
}

// Megatron's loop: ramp-up iterations while the consumed samples are within SAMPLES and the
// run, then the rest in whole batches of G.
int64_t train_iters_with_rampup(const BatchRampup& r, uint64_t train_samples) {
  int64_t iterations = 0;
  uint64_t consumed = 0;
  while (consumed <= r.samples && consumed <= train_samples) {
    consumed += static_cast<uint64_t>(r.global_batch(consumed));
    ++iterations;
  }
  if (train_samples > consumed) iterations += static_cast<int64_t>((train_samples - consumed) / r.global);
  return iterations;
}

}  // namespace trident
