// The global batch of each iteration, when it changes during a run. Two ways, Megatron's:
//
// --rampup-batch-size START INCR SAMPLES (RampupBatchsizeNumMicroBatches in
// megatron/core/num_microbatches_calculator.py): the global batch starts at START and grows
// by INCR every SAMPLES / n consumed samples, n = (G - START) / INCR increments, until it is G
// (--global-batch-size), which it keeps once more than SAMPLES samples are consumed:
//   consumed > SAMPLES:  G
//   otherwise:           START + floor(consumed / (SAMPLES / n)) x INCR
//
// --step-batch-size-schedule "T0:B0 T1:B1 ..." (StepBatchsizeNumMicroBatchesCalculator, which
// replaced the ramp-up in newer Megatron): from T_i tokens on (floor(T_i / seq length)
// samples), batches of B_i; T0 is 0 and G is the last B. The batch of an iteration is the
// step's that its first sample lies in (consumed >= threshold): the switch can overshoot a
// threshold by a part of a batch, never splits an iteration.
//
// Each iteration takes the batch of the samples consumed before it; its micro-batches follow
// (batch / (micro batch x data-parallel size)), and the learning rate, which counts samples,
// follows too. Without either (start == global, no steps) the batch is always G.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

// One step of --step-batch-size-schedule: batches of `batch` samples once `samples` are consumed.
struct BatchStep {
  uint64_t samples = 0;
  int64_t batch = 0;
  uint64_t tokens = 0;  // the threshold as given (tokens), for messages
};

struct BatchSchedule {
  int64_t start = 0, increment = 0;  // START and INCR; start == global: no ramp-up
  uint64_t samples = 0;              // SAMPLES
  int64_t global = 0;                // G
  std::vector<BatchStep> steps;      // --step-batch-size-schedule, by threshold; empty: none

  bool varies() const { return start != global || !steps.empty(); }
  // The global batch of the iteration that starts after `consumed` samples.
  int64_t global_batch(uint64_t consumed) const;
  // The samples the first `iterations` iterations consume.
  uint64_t samples_in(int64_t iterations) const { return samples_after(0, iterations); }
  // The samples `iterations` iterations consume starting after `consumed` samples (a resumed
  // run's, which another schedule may have brought to a point no iteration of this one starts at).
  uint64_t samples_after(uint64_t consumed, int64_t iterations) const;
  // Every global batch the iterations starting at `consumed` samples or later can take, in
  // the order they come.
  std::vector<int64_t> batches_from(uint64_t consumed) const;
};

// Iterations of a sample-based run of `train_samples` samples (Megatron's update_train_iters):
// with steps, each iteration takes the batch it is given while the whole batch fits (a partial
// last batch is dropped, as Megatron's constant batches); with a ramp-up, Megatron's loop: the
// ramp's iterations while the consumed samples are within SAMPLES and the run (the last may
// pass the run's end), then whole batches of G.
int64_t train_iters_of_samples(const BatchSchedule& s, uint64_t train_samples);

// --step-batch-size-schedule's text, Megatron's way: entries "THRESHOLD:BATCH" apart by spaces
// or commas; numbers with an optional K, M, B or T (10^3 .. 10^12, any case), decimals allowed
// and truncated; thresholds in tokens, floor-divided by `seq_length`. The steps are sorted by
// threshold; the first must be 0, the thresholds (in samples) strictly increase and the
// batches are positive and never decrease (Megatron asserts that when it gets there). Throws
// ConfigError naming the flag and the entry.
std::vector<BatchStep> parse_step_batch_schedule(const std::string& text, int64_t seq_length);

}  // namespace trident
