#include "infer/completions_request.h"

#include <iterator>
#include <nlohmann/json.hpp>

#include "infer/json_fields.h"

namespace trident {
using namespace json_fields;  // NOLINT: the field readers

namespace {

// OpenAI's prompt forms: "text", ["text", ...], [id, ...] (one prompt), [[id, ...], ...].
void read_prompts(const json& prompt, CompletionsRequest& r) {
  const std::string bad = "prompt must be a string, a list of strings, a list of token ids or a list of lists of "
                          "token ids";
  const auto ids_of = [&](const json& list) {
    std::vector<int32_t> ids;
    for (const json& id : list) {
      if (!is_int64(id) || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) throw ApiError(bad);
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    if (ids.empty()) throw ApiError("prompt: a list of token ids is empty");
    return ids;
  };
  if (prompt.is_string()) {
    r.prompts.push_back(prompt.get<std::string>());
    return;
  }
  if (!prompt.is_array() || prompt.empty()) throw ApiError(prompt.is_array() ? "prompt is empty" : bad);
  if (prompt[0].is_number()) {
    r.token_ids.push_back(ids_of(prompt));
    return;
  }
  for (const json& p : prompt) {
    if (p.is_string() && r.token_ids.empty())
      r.prompts.push_back(p.get<std::string>());
    else if (p.is_array() && r.prompts.empty())
      r.token_ids.push_back(ids_of(p));
    else
      throw ApiError(bad);
  }
}

}  // namespace

CompletionsRequest parse_completions_request(const std::string& text) {
  json body = parse_object(text);
  for (auto it = body.begin(); it != body.end();) it = it->is_null() ? body.erase(it) : std::next(it);  // null: absent
  CompletionsRequest r;
  const json* prompt = field(body, "prompt");
  if (!prompt) throw ApiError("prompt is required");
  read_prompts(*prompt, r);
  if (r.prompts.size() + r.token_ids.size() > static_cast<size_t>(kMaxPrompts))
    throw ApiError("at most " + std::to_string(kMaxPrompts) + " prompts in one request");

  const json* max_tokens = field(body, "max_tokens");  // (null, OpenAI's "as many as fit": the default)
  if (max_tokens) {
    if (!is_int64(*max_tokens) || max_tokens->get<int64_t>() < 0)
      throw ApiError("max_tokens must be an integer greater than or equal to 0");
    r.max_tokens = max_tokens->get<int64_t>();
  }
  r.temperature = number(body, "temperature", r.temperature, "temperature must be a number from 0 to 100");
  if (!(r.temperature >= 0.0 && r.temperature <= 100.0)) throw ApiError("temperature must be a number from 0 to 100");
  r.top_p = number(body, "top_p", r.top_p, "top_p must be a number above 0 and at most 1");
  if (!(r.top_p > 0.0 && r.top_p <= 1.0)) throw ApiError("top_p must be a number above 0 and at most 1");
  const std::optional<int64_t> top_k = integer(body, "top_k", "top_k must be an integer from 0 to 1000");
  if (top_k && (*top_k < 0 || *top_k > 1000)) throw ApiError("top_k must be an integer from 0 to 1000");
  r.top_k = static_cast<int>(top_k.value_or(0));
  const json* logprobs = field(body, "logprobs");
  if (logprobs) {
    const std::string range = "logprobs must be an integer from 0 to " + std::to_string(kMaxCompletionLogprobs);
    if (!is_int64(*logprobs) || logprobs->get<int64_t>() < 0 || logprobs->get<int64_t>() > kMaxCompletionLogprobs)
      throw ApiError(range);
    r.logprobs = static_cast<int>(logprobs->get<int64_t>());
    r.wants_logprobs = true;
  }
  r.echo = boolean(body, "echo", r.echo, "echo must be a boolean value");
  if (r.max_tokens == 0 && !r.echo) throw ApiError("max_tokens 0 returns nothing without echo: set echo to true");
  if (const json* stop = field(body, "stop")) {
    const std::string bad = "stop must be a string or a list of at most 4 strings";
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else {
      if (!stop->is_array() || stop->size() > 4) throw ApiError(bad);
      for (const json& s : *stop) {
        if (!s.is_string()) throw ApiError(bad);
        r.stop.push_back(s.get<std::string>());
      }
    }
    for (const std::string& s : r.stop)
      if (s.empty()) throw ApiError("stop: an empty string would end every completion at once");
  }
  r.seed = integer(body, "seed", "seed must be an integer");
  const std::string n_range = "n must be an integer from 1 to " + std::to_string(kMaxCompletionChoices);
  const std::optional<int64_t> n = integer(body, "n", n_range);
  if (n && (*n < 1 || *n > kMaxCompletionChoices)) throw ApiError(n_range);
  r.n = static_cast<int>(n.value_or(1));
  const std::string best_of_range = "best_of must be an integer from n (" + std::to_string(r.n) + ") to " +
                                    std::to_string(kMaxCompletionChoices);
  const std::optional<int64_t> best_of = integer(body, "best_of", best_of_range);
  if (best_of && (*best_of < r.n || *best_of > kMaxCompletionChoices)) throw ApiError(best_of_range);
  r.best_of = static_cast<int>(best_of.value_or(r.n));
  r.stream = boolean(body, "stream", false, "stream must be a boolean value");
  if (const json* options = field(body, "stream_options")) {
    if (!r.stream) throw ApiError("stream_options is only allowed with stream true");
    if (!options->is_object()) throw ApiError("stream_options must be an object");
    r.stream_usage = boolean(*options, "include_usage", false, "stream_options.include_usage must be a boolean value");
  }
  if (r.stream && r.best_of > r.n)
    throw ApiError("best_of above n cannot be streamed: the best completions are known only once all are drawn");
  if (const json* model = field(body, "model"); model && model->is_string()) r.model = model->get<std::string>();
  return r;
}

}  // namespace trident
