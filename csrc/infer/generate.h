// Continuing token sequences with Gpt2Decoder: the loop behind trident-generate's prompts
// and unconditional samples. A batch of contexts of one length is fed one position at a
// time; then each sequence draws its next tokens until it draws <|endoftext|> (unless told
// to ignore it), has `max_new_tokens`, or context + generated fills the model's sequence
// length.
//
// The length rule: a sequence never holds more than cfg.seq_length tokens, context
// included, so every token of a sample has a position the model was trained at and the
// whole sample can be read by the model again (scored, or cut and continued). This is
// Megatron-DeepSpeed's rule (sample_sequence_batch: the last token at index
// seq_length - 1). The last token drawn is never fed back, so the decoder's cache holds one
// position less.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/backend.h"
#include "infer/sampler.h"
#include "model/config.h"
#include "model/param_store.h"
#include "parallel/comm.h"

namespace trident {

struct GenerationOptions {
  SamplingOptions sampling;
  int64_t max_new_tokens = 128;  // per sequence (--out-seq-length); at least 1
  int32_t eod = 50256;           // <|endoftext|>: ends a sequence and is not kept
  bool stop_at_eod = true;       // false: <|endoftext|> is kept like any token (--ignore-eos)
};

struct Continuation {
  std::vector<int32_t> tokens;  // the new tokens, without a final <|endoftext|>
  bool finished = false;        // ended at <|endoftext|>, not at a length limit
};

// How many tokens a context of `context_length` may still grow by: at least 1 when the
// context is shorter than cfg.seq_length, else 0.
int64_t room_after(const ModelConfig& cfg, int64_t context_length);

// Continues every context (the same length, at least 1, below cfg.seq_length) together.
// Draws come from `rng` in sequence order at each step, skipping finished sequences, so a
// seed gives the same tokens for the same batch. With tensor parallelism (params of tp > 1
// ranks and their group's `tp_comm`) every rank of the group calls it with the same
// arguments and seed: the decoder gives them the same logits bit for bit, so they draw the
// same tokens.
std::vector<Continuation> continue_sequences(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                                             const std::vector<std::vector<int32_t>>& contexts,
                                             const GenerationOptions& o, std::mt19937_64& rng,
                                             Comm* tp_comm = nullptr);

}  // namespace trident
