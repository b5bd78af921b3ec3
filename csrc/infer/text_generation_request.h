// The body of a request to Megatron's text-generation server (PUT /api, megatron/
// text_generation_server.py), read and checked as Megatron does: its fields, defaults,
// ranges and error messages, in its order, so a client written for Megatron gets the same
// answers. The checks that need the tokenizer and the model (prompt lengths) are the
// service's (text_generation_service.h).
//
// Where trident differs: every bad request is an ApiError, answered with HTTP 400 (Megatron
// answers 400 for the first six checks and 200 with the message for the rest); a number
// field takes any JSON number (Megatron's top_p, top_p_decay, top_p_bound and
// length_penalty refuse an integer such as 1); a prompt that is not a string is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace trident {

// A request the server refuses: the message goes back to the client.
class ApiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TextGenerationRequest {
  std::vector<std::string> prompts;  // 1 to kMaxPrompts
  int64_t tokens_to_generate = 64;   // 0: score the prompts (logprobs must be true)
  bool logprobs = false;
  double temperature = 1.0;          // in (0, 100]
  int top_k = 0;                     // 0 to 1000; 1 is greedy
  double top_p = 0.0;                // 0 to 1, not with top_k
  double top_p_decay = 0.0, top_p_bound = 0.0;
  bool add_BOS = false;              // <|endoftext|> before each prompt
  bool stop_on_double_eol = false, stop_on_eol = false;
  bool prevent_newline_after_colon = false;
  std::optional<int64_t> random_seed;  // the server's generator continues without it
  bool no_log = false;
  std::optional<int64_t> beam_width;   // beam search (one prompt)
  int64_t stop_token = 50256;          // beam search's end token
  double length_penalty = 1.0;         // beam search's score: sum of logprobs / length^penalty
};

inline constexpr int kMaxPrompts = 128;

// Throws ApiError with Megatron's message for the first check that fails.
TextGenerationRequest parse_text_generation_request(const std::string& body);

}  // namespace trident
