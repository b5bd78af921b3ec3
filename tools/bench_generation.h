// trident-bench --generate: the speed of text generation with the KV-cache decoder, on a
// model of trident-train's flags with random weights (speed does not depend on them), one
// process. A batch of --micro-batch-size prompts of random tokens goes through the model in
// prefill passes (Gpt2Decoder::forward, as generate_tokens feeds prompts), then draws
// --generate-tokens greedy tokens a sequence (the first from the prefill's logits, each other
// one decoding step). Prints the prefill rate in prompt
// tokens per second and the decoding rate in generated tokens per second (and per step).
// With `ragged`, also prompts of different lengths (sequence b's P (b + 1) / B tokens, the
// same new tokens): generate_tokens' time (the prompts in padded passes, then each sequence
// at its own length) against the schedule it replaced (passes to the shortest prompt's end,
// then every sequence one position a step, its own prompt tokens and then its draws).
// Then sampled steps (top-k 50; top-p 0.9) drawn on the device against drawn on the host
// from the step's logits ("sampled decode:").
// Last, the decoding steps once more with every op synchronised and timed ("decode profile:"):
// each op family's time a step, and the time outside the ops (the host's own work).
#pragma once

#include <cstdint>

#include "train/options.h"

namespace trident {

struct GenerationBenchOptions {
  int64_t prompt = 0;        // prompt tokens a sequence; 0: half the sequence length
  int64_t new_tokens = 0;    // tokens drawn a sequence; 0: 128, or fewer to fit the positions
  bool ragged = false;       // also time prompts of different lengths (the "ragged:" line)
};

// Runs the benchmark once untimed and once timed; returns the exit status (0). Throws
// ConfigError for prompt + new tokens beyond the model's positions.
int run_generation_bench(const TrainOptions& opt, const GenerationBenchOptions& g);

}  // namespace trident
