// Beam search over one prompt, as Megatron's text-generation server does it
// (megatron/text_generation/generation.py, beam_search_and_return_on_first_stage, with its
// BeamHypotheses): `beam_width` sequences grow together; at each step the 2 x beam_width
// best continuations of all of them (of the first alone at the first step) by summed
// log-probability are taken in order: one ending in `stop_token` among the first
// beam_width becomes a finished hypothesis, scored sum / generated_length^length_penalty
// (the stop token counted), and the first beam_width others are the next beams. The search
// ends when beam_width hypotheses are finished and the worst of them scores at least the
// best candidate's sum over the current length, or at the length limit, where the open
// beams become hypotheses too.
//
// Log-probabilities are the model's at temperature 1, in double, after `adjust_logits`
// (Megatron's prevent_newline_after_colon). A finished hypothesis ends with its stop token
// (Megatron returns the row as it was before the stop token was drawn, padded with
// <|endoftext|> to the longest).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/backend.h"
#include "model/config.h"
#include "model/param_store.h"
#include "parallel/comm.h"

namespace trident {

struct BeamSearchOptions {
  int beam_width = 1;
  int64_t max_new_tokens = 1;  // at least 1, and at most room_after(prompt length)
  int32_t stop_token = 50256;
  double length_penalty = 1.0;
  std::function<void(int32_t, float*)> adjust_logits;  // as DecodeOptions'
  int64_t prefill_chunk = 0;                            // as DecodeOptions'
};

struct BeamHypothesis {
  std::vector<int32_t> tokens;  // the prompt's, then the generated ones
  double score = 0;             // summed log-probability / generated length^length_penalty
};

// The best hypotheses, best first: beam_width of them, or fewer when fewer were found.
// Collective over `tp_comm` as generate_tokens (no draws: every rank finds the same beams).
std::vector<BeamHypothesis> beam_search(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                                        const std::vector<int32_t>& prompt, const BeamSearchOptions& o,
                                        Comm* tp_comm = nullptr);

}  // namespace trident
