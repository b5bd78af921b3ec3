// The body of a request to the OpenAI-style completions endpoint (POST /completions or
// /v1/completions), which Megatron's newer server has (megatron/inference/endpoints/
// completions.py) and which evaluation tools call: lm-evaluation-harness's
// local-completions model scores continuations with {"prompt": [[token ids]...],
// "max_tokens": 1, "logprobs": 1, "echo": true, "temperature": 0} and generates with
// {"prompt", "max_tokens", "stop", "temperature"}.
//
// Fields: prompt (a string, a list of strings, a list of token ids, or a list of lists of
// token ids; up to kMaxPrompts), max_tokens (16, OpenAI's default; Megatron requires it),
// temperature (1; 0 is greedy), top_p (1), top_k (0: off), logprobs (absent: none; k from 0
// to 10: each token's log-probability and the k most likely tokens at each position), echo
// (false; true: the prompt's text and tokens come back too), stop (a string or up to 4
// strings that end the text, not included), seed (the server's generator continues without
// it), n (1: completions per prompt, up to kMaxCompletionChoices), best_of (n: completions
// drawn per prompt, of which the n with the highest mean log-probability of their tokens
// come back), stream (false; true: the answer comes as server-sent events as the tokens are
// drawn, completion_stream.h; not with best_of above n), stream_options {"include_usage"}
// (only with stream: a last event with the usage), model (echoed back). A field set to null
// is absent. Other
// fields (user, presence_penalty, ...) are ignored, as OpenAI-compatible servers commonly
// do; a bad value of a known field is an ApiError.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "infer/text_generation_request.h"

namespace trident {

struct CompletionsRequest {
  std::vector<std::string> prompts;             // text prompts, or
  std::vector<std::vector<int32_t>> token_ids;  // prompts given as token ids (one of the two is empty)
  int64_t max_tokens = 16;
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;
  int logprobs = 0;  // how many most likely tokens per position; 0: no logprobs
  bool wants_logprobs = false;  // "logprobs" given (0 included: each token's own)
  bool echo = false;
  std::vector<std::string> stop;
  std::optional<int64_t> seed;
  int n = 1, best_of = 1;
  bool stream = false;
  bool stream_usage = false;  // stream_options.include_usage
  std::string model;
};

inline constexpr int kMaxCompletionLogprobs = 10;
inline constexpr int kMaxCompletionChoices = 20;  // n and best_of (OpenAI's best_of limit)

// Throws ApiError naming the field for the first bad one.
CompletionsRequest parse_completions_request(const std::string& body);

}  // namespace trident
