#include "infer/completion_stream.h"

#include <algorithm>
#include <utility>

namespace trident {

using nlohmann::json;

size_t utf8_settled_end(const std::string& bytes, size_t end) {
  for (size_t k = 1; k <= 3 && k <= end; ++k) {
    const auto b = static_cast<unsigned char>(bytes[end - k]);
    if (!starts_character(static_cast<char>(b))) continue;
    const size_t length = b >= 0xF0 && b <= 0xF7 ? 4 : b >= 0xE0 && b < 0xF0 ? 3 : b >= 0xC0 && b < 0xE0 ? 2 : 1;
    return length > k ? end - k : end;
  }
  return end;  // three continuation bytes: a whole 4-byte character, or bytes that are no character
}

CompletionStream::CompletionStream(const Tokenizer& tokenizer, const CompletionsRequest& r, json head, size_t choices,
                                   Sink sink)
    : tokenizer_(tokenizer), request_(r), head_(std::move(head)), choices_(choices), sink_(std::move(sink)) {}

void CompletionStream::update(size_t index, const Generation& g, bool last) {
  Choice& c = choices_.at(index);
  if (c.ended) return;
  if (!c.started) {
    c.texts = token_texts(tokenizer_, g.tokens);
    c.stop_from = c.texts.start[g.prompt_length];
    c.sent = request_.echo ? 0 : c.stop_from;
    c.listed = request_.echo ? 0 : static_cast<size_t>(g.prompt_length);
    c.started = true;
  } else {
    for (size_t i = c.texts.pieces.size(); i < g.tokens.size(); ++i)
      append_token_text(c.texts, tokenizer_, g.tokens[i]);
  }
  if (last) {
    const CompletionEnd end = completion_end(g, c.texts, tokenizer_.eod(), request_.stop);
    send(index, c, g, end.cut, end.kept, end.stopped ? "stop" : "length");
    c.ended = true;
    return;
  }
  const size_t upto = settled_end(c);
  size_t tokens = c.listed;  // those whose text is all sent
  while (tokens < g.tokens.size() && c.texts.start[tokens + 1] <= upto) ++tokens;
  if (upto > c.sent || (request_.wants_logprobs && tokens > c.listed)) send(index, c, g, upto, tokens, nullptr);
}

void CompletionStream::finish(const Generation* gens, const json& usage) {
  for (size_t i = 0; i < choices_.size(); ++i)
    if (!choices_[i].ended) update(i, gens[i], true);
  if (!request_.stream_usage) return;
  json chunk = head_;
  chunk["choices"] = json::array();
  chunk["usage"] = usage;
  sink_(chunk);
}

void CompletionStream::send(size_t index, Choice& c, const Generation& g, size_t upto, size_t tokens,
                            const char* finish_reason) {
  // (upto and tokens never fall below what was sent: a stop string's start and <|endoftext|>
  // are never sent before the end, and completion_end keeps every token that starts before
  // its cut.)
  json logprobs = nullptr;
  if (request_.wants_logprobs) {
    for (size_t i = c.listed; i < tokens; ++i) c.logprobs.add(g, c.texts, i, tokenizer_, request_.logprobs);
    logprobs = c.logprobs.take();
  }
  c.listed = std::max(c.listed, tokens);
  upto = std::max(upto, c.sent);
  json choice = {{"index", index},
                 {"text", c.texts.bytes.substr(c.sent, upto - c.sent)},
                 {"logprobs", logprobs},
                 {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
  c.sent = upto;
  json chunk = head_;
  chunk["choices"] = json::array({std::move(choice)});
  if (request_.stream_usage) chunk["usage"] = nullptr;
  sink_(chunk);
}

size_t CompletionStream::settled_end(const Choice& c) const {
  const std::string& bytes = c.texts.bytes;
  size_t end = bytes.size();
  for (const std::string& stop : request_.stop) {
    // A whole stop string ends the completion (its draws stop there: this only makes sure),
    // and so may a suffix shorter than it that starts it.
    end = std::min(end, bytes.find(stop, c.stop_from));
    const size_t shortest_start = bytes.size() >= stop.size() ? bytes.size() - stop.size() + 1 : 0;
    for (size_t p = std::max(c.stop_from, shortest_start); p < end; ++p)
      if (bytes.compare(p, bytes.size() - p, stop, 0, bytes.size() - p) == 0) {
        end = p;
        break;
      }
  }
  return std::max(utf8_settled_end(bytes, end), c.sent);
}

}  // namespace trident
