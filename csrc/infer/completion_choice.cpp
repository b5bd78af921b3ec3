#include "infer/completion_choice.h"

#include <cstring>

namespace trident {

using nlohmann::json;

void append_token_text(TokenTexts& t, const Tokenizer& tokenizer, int32_t id) {
  if (!t.pieces.empty()) t.bytes += tokenizer.token_separator();
  t.separator = std::strlen(tokenizer.token_separator());
  t.pieces.push_back(tokenizer.decode({id}));
  t.bytes += t.pieces.back();
  t.start.push_back(t.bytes.size());
}

TokenTexts token_texts(const Tokenizer& tokenizer, const std::vector<int32_t>& tokens) {
  TokenTexts t;
  for (int32_t id : tokens) append_token_text(t, tokenizer, id);
  return t;
}

CompletionEnd completion_end(const Generation& g, const TokenTexts& t, int32_t eod,
                             const std::vector<std::string>& stop) {
  const size_t prompt_end = t.start[g.prompt_length];
  CompletionEnd e{t.bytes.size(), g.tokens.size(), false};
  if (g.finished && g.tokens.back() == eod) {
    e.cut = t.start[e.kept - 1];
    e.stopped = true;
  }
  for (const std::string& s : stop)
    if (const size_t at = t.bytes.find(s, prompt_end); at != std::string::npos && at < e.cut) {
      e.cut = at;
      e.stopped = true;
      while (e.kept > static_cast<size_t>(g.prompt_length) && t.text_start(e.kept - 1) >= e.cut) --e.kept;
    }
  return e;
}

void LogprobsLists::add(const Generation& g, const TokenTexts& t, size_t i, const Tokenizer& tokenizer, int top) {
  for (; counted_ < t.text_start(i); ++counted_) characters_ += starts_character(t.bytes[counted_]);
  tokens_.push_back(t.pieces[i]);
  offsets_.push_back(characters_);
  if (i == 0) {  // nothing predicts the first token
    token_logprobs_.push_back(nullptr);
    top_.push_back(nullptr);
    return;
  }
  token_logprobs_.push_back(g.logprobs[i - 1]);
  json best = json::object();
  if (top > 0)
    for (const auto& [id, lp] : g.top_logprobs[i - 1]) best.emplace(valid_utf8(tokenizer.decode({id})), lp);
  top_.push_back(best);
}

json LogprobsLists::take() {
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  std::swap(out["tokens"], tokens_);
  std::swap(out["token_logprobs"], token_logprobs_);
  std::swap(out["top_logprobs"], top_);
  std::swap(out["text_offset"], offsets_);
  return out;
}

CompletionChoice completion_choice(const Generation& g, const Tokenizer& tokenizer, const CompletionsRequest& r,
                                   size_t index) {
  const TokenTexts t = token_texts(tokenizer, g.tokens);
  const CompletionEnd end = completion_end(g, t, tokenizer.eod(), r.stop);
  CompletionChoice c;
  c.completion_tokens = static_cast<int64_t>(end.kept) - g.prompt_length;
  json logprobs = nullptr;
  if (r.wants_logprobs) {
    LogprobsLists lists;
    for (size_t i = r.echo ? 0 : static_cast<size_t>(g.prompt_length); i < end.kept; ++i)
      lists.add(g, t, i, tokenizer, r.logprobs);
    logprobs = lists.take();
  }
  const size_t from = r.echo ? 0 : t.start[g.prompt_length];
  c.choice = {{"index", index},
              {"text", t.bytes.substr(from, end.cut - from)},
              {"logprobs", logprobs},
              {"finish_reason", end.stopped ? "stop" : "length"}};
  return c;
}

std::string valid_utf8(const std::string& bytes) {
  return json::parse(json(bytes).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

std::string response_body(const json& response) {
  return response.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace trident
