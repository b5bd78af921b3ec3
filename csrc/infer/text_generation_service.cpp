#include "infer/text_generation_service.h"

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <memory>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "infer/beam_search.h"
#include "infer/generate.h"

namespace trident {
namespace {

using nlohmann::json;

// The id of `text` when the tokenizer makes it one token, else -1 (also when it cannot encode
// it: NullTokenizer's ":").
int32_t single_token(const Tokenizer& tokenizer, const char* text) {
  try {
    const std::vector<int32_t> ids = tokenizer.encode(text);
    return ids.size() == 1 ? ids[0] : -1;
  } catch (const TokenizeError&) {
    return -1;
  }
}

// A prompt's tokens; one the tokenizer cannot encode (NullTokenizer's words that are no ids)
// is the client's error.
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, const std::string& text) {
  try {
    return tokenizer.encode(text);
  } catch (const TokenizeError& e) {
    throw ApiError(std::string("prompt: ") + e.what());
  }
}

}  // namespace

SpecialTokens special_tokens(const Tokenizer& tokenizer) {
  return {tokenizer.eod(), single_token(tokenizer, "\n"), single_token(tokenizer, "\n\n"),
          single_token(tokenizer, ":")};
}

std::function<bool(const std::vector<int32_t>&, int64_t)> request_stop_rule(const TextGenerationRequest& r,
                                                                            const SpecialTokens& t) {
  const int32_t nl = t.newline, nlnl = t.double_newline, eod = t.eod;
  if (r.stop_on_double_eol)
    return [nl, nlnl](const std::vector<int32_t>& s, int64_t) {
      return s.back() == nlnl || (s.back() == nl && s.size() >= 2 && s[s.size() - 2] == nl);
    };
  if (r.stop_on_eol)
    return [nl, nlnl](const std::vector<int32_t>& s, int64_t) { return s.back() == nl || s.back() == nlnl; };
  return [eod](const std::vector<int32_t>& s, int64_t) { return s.back() == eod; };
}

std::function<void(int32_t, float*)> request_logit_rule(const TextGenerationRequest& r, const SpecialTokens& t) {
  if (!r.prevent_newline_after_colon) return nullptr;
  const int32_t colon = t.colon, nl = t.newline;
  return [colon, nl](int32_t last, float* row) {
    if (last == colon) row[nl] = -1e10f;
  };
}

TextGenerationService::TextGenerationService(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                                             const Tokenizer& tokenizer, Comm* tp_comm, uint64_t seed,
                                             int64_t max_tokens_to_oom)
    : cfg_(cfg),
      backend_(backend),
      params_(params),
      tokenizer_(tokenizer),
      tp_comm_(tp_comm),
      max_tokens_to_oom_(max_tokens_to_oom),
      special_(special_tokens(tokenizer)),
      rng_(seed) {}

PreparedRequest TextGenerationService::prepare(Endpoint endpoint, const std::string& body) const {
  return endpoint == Endpoint::kApi ? prepare_api(body) : prepare_completions(body);
}

void TextGenerationService::check_batch_tokens(int64_t batch, int64_t length) const {
  if (batch > max_tokens_to_oom_ / std::max<int64_t>(length, 1))
    throw ApiError("Too many tokens.  " + std::to_string(batch * length) + " is greater than " +
                   std::to_string(max_tokens_to_oom_));
}

PreparedRequest TextGenerationService::prepare_api(const std::string& body) const {
  PreparedRequest p;
  p.request = parse_text_generation_request(body);
  const TextGenerationRequest& r = p.request;
  int64_t longest = 0;
  for (const std::string& text : r.prompts) {
    std::vector<int32_t> ids;
    if (r.add_BOS) ids.push_back(tokenizer_.eod());
    const std::vector<int32_t> more = encode_prompt(tokenizer_, text);
    ids.insert(ids.end(), more.begin(), more.end());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
    p.prompts.push_back(std::move(ids));
  }
  // Prompt + generation, counted without overflow: past the limit is past it. Beam search
  // stops at the limit instead (Megatron's), refusing only a prompt that leaves no room.
  const int64_t asked = longest + std::min<int64_t>(r.tokens_to_generate, cfg_.seq_length + 1);
  const std::string lengths = ": " + std::to_string(longest) + " + " + std::to_string(r.tokens_to_generate) +
                              " tokens, " + std::to_string(cfg_.seq_length) + " at most";
  if (r.beam_width) {
    if (r.tokens_to_generate == 0 || longest >= cfg_.seq_length)
      throw ApiError("context length + tokens_to_generate too large" + lengths);
    if (r.stop_token < 0 || r.stop_token >= cfg_.vocab_size)
      throw ApiError("stop_token " + std::to_string(r.stop_token) + " is outside the vocabulary (0 to " +
                     std::to_string(cfg_.vocab_size - 1) + ")");
    if (*r.beam_width > cfg_.vocab_size / 2)
      throw ApiError("beam_width " + std::to_string(*r.beam_width) + " is over half the vocabulary");
  } else if (asked > cfg_.seq_length) {
    throw ApiError("Length of prompt + tokens_to_generate longer than allowed" + lengths);
  }
  const int64_t length = std::min<int64_t>(asked, cfg_.seq_length);
  check_batch_tokens(r.beam_width ? *r.beam_width : static_cast<int64_t>(r.prompts.size()), length);
  if (r.prevent_newline_after_colon && (special_.newline < 0 || special_.colon < 0))
    throw ApiError("prevent_newline_after_colon: the tokenizer has no single token for \"\\n\" or \":\"");
  if ((r.stop_on_eol || r.stop_on_double_eol) && (special_.newline < 0 || special_.double_newline < 0))
    throw ApiError("stop_on_eol: the tokenizer has no single token for \"\\n\" or \"\\n\\n\"");
  return p;
}

PreparedRequest TextGenerationService::prepare_completions(const std::string& body) const {
  PreparedRequest p;
  p.endpoint = Endpoint::kCompletions;
  p.completions = parse_completions_request(body);
  const CompletionsRequest& r = p.completions;
  p.prompts = r.token_ids;
  for (const std::string& text : r.prompts) p.prompts.push_back(encode_prompt(tokenizer_, text));
  int64_t longest = 0;
  for (size_t i = 0; i < p.prompts.size(); ++i) {
    const std::vector<int32_t>& ids = p.prompts[i];
    const std::string which = p.prompts.size() > 1 ? "prompt " + std::to_string(i) : std::string("prompt");
    if (ids.empty()) throw ApiError(which + " is empty (no tokens)");
    for (int32_t id : ids)
      if (id >= cfg_.vocab_size)
        throw ApiError(which + ": token id " + std::to_string(id) + " is outside the vocabulary (0 to " +
                       std::to_string(cfg_.vocab_size - 1) + ")");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
  }
  if (r.max_tokens > cfg_.seq_length - longest)
    throw ApiError("This model's maximum context length is " + std::to_string(cfg_.seq_length) +
                   " tokens, however you requested " + std::to_string(longest) + " + " +
                   std::to_string(r.max_tokens) + " tokens (prompt + max_tokens)");
  // Each prompt best_of times in a row: the completions drawn for it (complete() keeps n).
  if (r.best_of > 1) {
    std::vector<std::vector<int32_t>> copies;
    for (const std::vector<int32_t>& ids : p.prompts) copies.insert(copies.end(), r.best_of, ids);
    p.prompts = std::move(copies);
  }
  check_batch_tokens(static_cast<int64_t>(p.prompts.size()), longest + r.max_tokens);
  return p;
}

json TextGenerationService::run(const PreparedRequest& r) { return run_batch({&r})[0]; }

std::vector<json> TextGenerationService::run_batch(const std::vector<const PreparedRequest*>& batch,
                                                   const std::vector<StreamClient>& clients) {
  TRIDENT_CHECK(!batch.empty(), "run_batch: no request");
  TRIDENT_CHECK(clients.empty() || clients.size() == batch.size(), "run_batch: ", clients.size(), " clients for ",
                batch.size(), " requests");
  const PreparedRequest& first = *batch[0];
  if (first.endpoint == Endpoint::kCompletions) {
    for (const PreparedRequest* r : batch)  // in order, as if run one by one (greedy: no draws)
      if (r->completions.seed) rng_.seed(static_cast<uint64_t>(*r->completions.seed));
    return complete(batch, clients);
  }
  TRIDENT_CHECK(batch.size() == 1, "run_batch: /api requests run alone");
  if (first.request.random_seed) rng_.seed(static_cast<uint64_t>(*first.request.random_seed));
  return {first.request.beam_width ? beam_search(first) : sample(first)};
}

std::vector<std::vector<size_t>> TextGenerationService::batches(const std::vector<PreparedRequest>& requests) const {
  const auto greedy_completion = [](const PreparedRequest& r) {
    return r.endpoint == Endpoint::kCompletions && (r.completions.temperature == 0.0 || r.completions.top_k == 1);
  };
  const auto alike = [](const CompletionsRequest& a, const CompletionsRequest& b) {
    return a.max_tokens == b.max_tokens && a.wants_logprobs == b.wants_logprobs && a.logprobs == b.logprobs &&
           a.stop == b.stop && (a.best_of > a.n) == (b.best_of > b.n);
  };
  // How far a batch's prompt lengths may spread: its prompts go through in passes, shorter
  // ones padded to the longest (then each decodes at its own length), so at most max(16,
  // shortest) padded positions: padding at most doubles a prompt of 16 tokens or more.
  static constexpr int64_t kLengthSpread = 16;
  const auto spread_allowed = [](int64_t shortest) { return std::max(kLengthSpread, shortest); };
  std::vector<std::vector<size_t>> out;
  int64_t prompts = 0, longest = 0, shortest = 0;  // the open batch's
  for (size_t i = 0; i < requests.size(); ++i) {
    const PreparedRequest& r = requests[i];
    int64_t its_longest = 0, its_shortest = INT64_MAX;
    for (const auto& p : r.prompts) {
      its_longest = std::max<int64_t>(its_longest, static_cast<int64_t>(p.size()));
      its_shortest = std::min<int64_t>(its_shortest, static_cast<int64_t>(p.size()));
    }
    const int64_t more = static_cast<int64_t>(r.prompts.size());
    bool joins = !out.empty() && greedy_completion(r);
    if (joins) {
      const PreparedRequest& open = requests[out.back().front()];
      const int64_t max_tokens = r.completions.max_tokens;
      joins = greedy_completion(open) && alike(open.completions, r.completions) &&
              (prompts + more) * (std::max(longest, its_longest) + max_tokens) <= max_tokens_to_oom_ &&
              std::max(longest, its_longest) - std::min(shortest, its_shortest) <=
                  spread_allowed(std::min(shortest, its_shortest));
    }
    if (!joins) {
      out.emplace_back();
      prompts = longest = 0;
      shortest = INT64_MAX;
    }
    out.back().push_back(i);
    prompts += more;
    longest = std::max(longest, its_longest);
    shortest = std::min(shortest, its_shortest);
  }
  return out;
}

json TextGenerationService::sample(const PreparedRequest& p) {
  const TextGenerationRequest& r = p.request;
  DecodeOptions o;
  o.sampling.temperature = r.temperature;
  o.sampling.greedy = r.top_k == 1;  // Megatron: top_k 1 is argmax, whatever the temperature
  o.sampling.top_k = r.top_k;
  o.sampling.top_p = r.top_p;
  o.max_new_tokens = r.tokens_to_generate;
  o.top_p_decay = r.top_p_decay;
  o.top_p_bound = r.top_p_bound;
  o.logprobs = r.logprobs;
  o.ends = request_stop_rule(r, special_);
  if (r.tokens_to_generate > 0) o.adjust_logits = request_logit_rule(r, special_);  // Megatron scores without it
  json text = json::array(), segs = json::array(), logprobs = json::array();
  for (const Generation& g : generate_tokens(cfg_, backend_, params_, p.prompts, o, rng_, tp_comm_)) {
    TokenTexts t = token_texts(tokenizer_, g.tokens);
    text.push_back(std::move(t.bytes));
    segs.push_back(std::move(t.pieces));  // Megatron's segments: each token's own text
    logprobs.push_back(g.logprobs);
  }
  return {{"text", text}, {"segments", segs}, {"logprobs", r.logprobs ? logprobs : json(nullptr)}};
}

json TextGenerationService::beam_search(const PreparedRequest& p) {
  const TextGenerationRequest& r = p.request;
  BeamSearchOptions o;
  o.beam_width = static_cast<int>(*r.beam_width);
  o.max_new_tokens = std::min(r.tokens_to_generate, room_after(cfg_, static_cast<int64_t>(p.prompts[0].size())));
  o.stop_token = static_cast<int32_t>(r.stop_token);
  o.length_penalty = r.length_penalty;
  o.adjust_logits = request_logit_rule(r, special_);
  json text = json::array(), segs = json::array(), scores = json::array();
  for (const BeamHypothesis& h : trident::beam_search(cfg_, backend_, params_, p.prompts[0], o, tp_comm_)) {
    TokenTexts t = token_texts(tokenizer_, h.tokens);
    text.push_back(std::move(t.bytes));
    segs.push_back(std::move(t.pieces));  // Megatron's segments: each token's own text
    scores.push_back(h.score);
  }
  return {{"text", text}, {"segments", segs}, {"scores", scores}};
}

std::vector<size_t> best_completions(const Generation* drawn, size_t count, size_t n) {
  std::vector<size_t> order(count);
  std::iota(order.begin(), order.end(), size_t{0});
  if (n == count) return order;
  std::vector<double> mean(count, 0.0);  // of the drawn tokens' log-probabilities
  for (size_t j = 0; j < count; ++j) {
    const Generation& g = drawn[j];
    const size_t first = static_cast<size_t>(g.prompt_length) - 1;  // logprobs[i - 1] is token i's
    if (g.logprobs.size() > first)
      mean[j] = std::accumulate(g.logprobs.begin() + first, g.logprobs.end(), 0.0) / (g.logprobs.size() - first);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return mean[a] > mean[b]; });
  order.resize(n);
  return order;
}

std::vector<json> TextGenerationService::complete(const std::vector<const PreparedRequest*>& batch,
                                                  const std::vector<StreamClient>& clients) {
  const CompletionsRequest& r = batch[0]->completions;  // the batch decodes alike (batches())
  DecodeOptions o;
  o.sampling.greedy = r.temperature == 0.0;  // OpenAI's temperature 0
  o.sampling.temperature = r.temperature;
  o.sampling.top_k = r.top_k;
  o.sampling.top_p = r.top_p;
  o.max_new_tokens = r.max_tokens;
  o.logprobs = r.wants_logprobs || r.best_of > r.n;  // best_of ranks the completions by them
  o.top_logprobs = r.logprobs;
  // A completion ends at <|endoftext|> or once its text holds a stop string.
  const int32_t eod = tokenizer_.eod();
  const std::vector<std::string>& stops = r.stop;
  o.ends = [this, eod, &stops](const std::vector<int32_t>& s, int64_t prompt_length) {
    if (s.back() == eod) return true;
    if (stops.empty()) return false;
    // (the completion's text as TokenTexts has it: behind the separator after a prompt)
    const std::string text = (prompt_length > 0 ? tokenizer_.token_separator() : "") +
                             tokenizer_.decode(std::vector<int32_t>(s.begin() + prompt_length, s.end()));
    return std::any_of(stops.begin(), stops.end(), [&](const std::string& x) { return text.find(x) != std::string::npos; });
  };
  std::vector<std::vector<int32_t>> prompts;
  std::vector<json> heads;  // each answer's fields that its chunks repeat
  std::vector<std::unique_ptr<CompletionStream>> streams(batch.size());
  std::vector<std::pair<CompletionStream*, size_t>> stream_of;  // a generation's stream and choice
  std::vector<size_t> first_of;  // request k's generations: [first_of[k], first_of[k + 1])
  bool any_streamed = false;  // (every rank knows: it is the requests' own)
  for (size_t k = 0; k < batch.size(); ++k) {
    const PreparedRequest& p = *batch[k];
    heads.push_back({{"id", "cmpl-" + std::to_string(++completions_)},
                     {"object", "text_completion"},
                     {"created", static_cast<int64_t>(std::time(nullptr))},
                     {"model", p.completions.model.empty() ? std::string("trident") : p.completions.model}});
    any_streamed = any_streamed || p.completions.stream;
    if (p.completions.stream && k < clients.size() && clients[k].sink)  // (streamed: best_of is n)
      streams[k] = std::make_unique<CompletionStream>(tokenizer_, p.completions, heads.back(), p.prompts.size(),
                                                      clients[k].sink);
    for (size_t i = 0; i < p.prompts.size(); ++i) stream_of.emplace_back(streams[k].get(), i);
    first_of.push_back(prompts.size());
    prompts.insert(prompts.end(), p.prompts.begin(), p.prompts.end());
  }
  first_of.push_back(prompts.size());
  o.on_token = [&stream_of](size_t b, const Generation& g, bool last) {
    if (const auto& [stream, choice] = stream_of[b]; stream) stream->update(choice, g, last);
  };
  // A streamed request whose client left draws no more: rank 0 asks its clients at each step
  // and tells the other ranks of the TP group (a broadcast a step, only in batches that stream).
  if (any_streamed)
    o.poll_cancel = [&](std::vector<int32_t>& cancel) {
      for (size_t k = 0; k < clients.size(); ++k)  // each client asked once a step
        if (clients[k].left && clients[k].left())
          std::fill(cancel.begin() + first_of[k], cancel.begin() + first_of[k + 1], 1);
      if (tp_comm_ && tp_comm_->size() > 1)
        tp_comm_->broadcast(Tensor(cancel.data(), Shape{static_cast<int64_t>(cancel.size())}, DType::I32, Device::Cpu),
                            0);
    };
  const std::vector<Generation> gens = generate_tokens(cfg_, backend_, params_, prompts, o, rng_, tp_comm_);
  std::vector<json> responses;
  size_t next = 0;  // the first generation of the request answered next
  for (size_t k = 0; k < batch.size(); ++k) {
    const PreparedRequest* p = batch[k];
    const CompletionsRequest& its = p->completions;
    json choices = json::array();
    // As OpenAI's: a prompt's tokens count once, every completion drawn (best_of) counts.
    int64_t prompt_tokens = 0, completion_tokens = 0;
    const size_t drawn = static_cast<size_t>(its.best_of);
    for (size_t prompt = 0; prompt * drawn < p->prompts.size(); ++prompt) {
      const Generation* first = &gens[next + prompt * drawn];
      prompt_tokens += first->prompt_length;
      std::vector<CompletionChoice> all;
      for (size_t j = 0; j < drawn; ++j) {
        all.push_back(completion_choice(first[j], tokenizer_, its, 0));
        completion_tokens += all.back().completion_tokens;
      }
      for (size_t j : best_completions(first, drawn, static_cast<size_t>(its.n))) {
        all[j].choice["index"] = choices.size();
        choices.push_back(std::move(all[j].choice));
      }
    }
    json response = std::move(heads[k]);
    response["choices"] = std::move(choices);
    response["usage"] = {{"prompt_tokens", prompt_tokens},
                         {"completion_tokens", completion_tokens},
                         {"total_tokens", prompt_tokens + completion_tokens}};
    if (streams[k]) streams[k]->finish(&gens[next], response["usage"]);
    next += p->prompts.size();
    responses.push_back(std::move(response));
  }
  return responses;
}

}  // namespace trident
