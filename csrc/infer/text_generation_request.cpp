#include "infer/text_generation_request.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "infer/json_fields.h"

namespace trident {
using namespace json_fields;  // NOLINT: the field readers

namespace {

bool boolean(const json& body, const char* key, bool fallback) {
  return json_fields::boolean(body, key, fallback, std::string(key) + " must be a boolean value");
}

}  // namespace

TextGenerationRequest parse_text_generation_request(const std::string& text) {
  const json body = parse_object(text);
  TextGenerationRequest r;
  const json* prompts = field(body, "prompts");
  if (!prompts) throw ApiError("prompts argument required");
  if (field(body, "max_len")) throw ApiError("max_len is no longer used.  Replace with tokens_to_generate");
  if (field(body, "sentences")) throw ApiError("sentences is no longer used.  Replace with prompts");
  if (!prompts->is_array()) throw ApiError("prompts is not a list of strings");
  for (const json& p : *prompts) {
    if (!p.is_string()) throw ApiError("prompts is not a list of strings");
    r.prompts.push_back(p.get<std::string>());
  }
  if (r.prompts.empty()) throw ApiError("prompts is empty");
  if (r.prompts.size() > static_cast<size_t>(kMaxPrompts))
    throw ApiError("Maximum number of prompts is " + std::to_string(kMaxPrompts));

  r.tokens_to_generate = integer(body, "tokens_to_generate", "tokens_to_generate must be an integer greater than 0")
                             .value_or(r.tokens_to_generate);
  if (r.tokens_to_generate < 0)
    throw ApiError("tokens_to_generate must be an integer greater than or equal to 0");
  r.logprobs = boolean(body, "logprobs", r.logprobs);
  if (r.tokens_to_generate == 0 && !r.logprobs) throw ApiError("tokens_to_generate=0 implies logprobs should be True");

  const std::string temperature_error = "temperature must be a positive number less than or equal to 100.0";
  r.temperature = number(body, "temperature", r.temperature, temperature_error);
  if (!(r.temperature > 0.0 && r.temperature <= 100.0)) throw ApiError(temperature_error);
  r.top_k = static_cast<int>(std::clamp<int64_t>(
      integer(body, "top_k", "top_k must be an integer equal to or greater than 0 and less than or equal to 1000")
          .value_or(0),
      -1, 1001));
  if (r.top_k < 0 || r.top_k > 1000)
    throw ApiError("top_k must be equal to or greater than 0 and less than or equal to 1000");
  r.top_p = number(body, "top_p", r.top_p, "top_p must be a positive float less than or equal to 1.0");
  if (r.top_p > 0.0 && r.top_k > 0) throw ApiError("cannot set both top-k and top-p samplings.");
  if (!(r.top_p >= 0.0 && r.top_p <= 1.0)) throw ApiError("top_p must be less than or equal to 1.0");
  r.top_p_decay = number(body, "top_p_decay", r.top_p_decay, "top_p_decay must be a positive float less than or equal to 1.0");
  if (field(body, "top_p_decay") && r.top_p == 0.0) throw ApiError("top_p_decay cannot be set without top_p");
  if (!(r.top_p_decay >= 0.0 && r.top_p_decay <= 1.0)) throw ApiError("top_p_decay must be less than or equal to 1.0");
  r.top_p_bound = number(body, "top_p_bound", r.top_p_bound,
                         "top_p_bound must be a positive float less than or equal to top_p");
  if (field(body, "top_p_bound")) {
    if (r.top_p == 0.0) throw ApiError("top_p_bound cannot be set without top_p");
    if (!(r.top_p_bound > 0.0 && r.top_p_bound <= r.top_p))
      throw ApiError("top_p_bound must be greater than 0 and less than top_p");
  }
  r.add_BOS = boolean(body, "add_BOS", r.add_BOS);
  for (const std::string& p : r.prompts)
    if (p.empty() && !r.add_BOS) throw ApiError("Empty prompts require add_BOS=true");
  r.stop_on_double_eol = boolean(body, "stop_on_double_eol", r.stop_on_double_eol);
  r.stop_on_eol = boolean(body, "stop_on_eol", r.stop_on_eol);
  r.prevent_newline_after_colon = boolean(body, "prevent_newline_after_colon", r.prevent_newline_after_colon);
  r.random_seed = integer(body, "random_seed", "random_seed must be integer");
  if (r.random_seed && *r.random_seed < 0) throw ApiError("random_seed must be a positive integer");
  r.no_log = boolean(body, "no_log", r.no_log);
  r.beam_width = integer(body, "beam_width", "beam_width must be integer");
  if (r.beam_width) {
    if (*r.beam_width < 1) throw ApiError("beam_width must be an integer > 1");
    if (r.prompts.size() > 1) throw ApiError("When doing beam_search, batch size must be 1");
  }
  r.stop_token = integer(body, "stop_token", "stop_token must be an integer").value_or(r.stop_token);
  r.length_penalty = number(body, "length_penalty", r.length_penalty, "length_penalty must be a float");
  return r;
}

}  // namespace trident
