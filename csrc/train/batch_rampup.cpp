#include "train/batch_rampup.h"

namespace trident {

int64_t BatchRampup::global_batch(uint64_t consumed) const {
  if (!ramps() || consumed > samples) return global;
  const double samples_per_increment = static_cast<double>(samples) / static_cast<double>((global - start) / increment);
  const auto steps = static_cast<int64_t>(static_cast<double>(consumed) / samples_per_increment);
  return start + steps * increment;
}

uint64_t BatchRampup::samples_in(int64_t iterations) const {
  // The ramp-up's iterations one by one (at most SAMPLES / START + 1 of them), then whole
  // batches of G: a run of 10^11 iterations is not counted one by one at its start.
  uint64_t consumed = 0;
  int64_t i = 0;
  for (; i < iterations && ramps() && consumed <= samples; ++i)
    consumed += static_cast<uint64_t>(global_batch(consumed));
  return consumed + static_cast<uint64_t>(iterations - i) * static_cast<uint64_t>(global);
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
