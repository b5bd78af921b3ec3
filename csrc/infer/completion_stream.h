// A /completions answer streamed (OpenAI's "stream": true): each choice's text in chunks as
// its tokens are drawn, as OpenAI's legacy completions API and OpenAI-compatible servers
// send them. Every chunk is the answer's head ("id", "object": "text_completion", "created",
// "model") with "choices": [{"index", "text", "logprobs", "finish_reason"}] for one choice:
// finish_reason null until its last chunk, "stop" or "length" there. With
// stream_options.include_usage every chunk has "usage": null and a last chunk has "choices":
// [] and the usage. (The server writes each as a server-sent event "data: {...}" and ends with
// "data: [DONE]".)
//
// Concatenated, a choice's chunks are the choice of the whole answer (completion_choice):
// the same text, and with logprobs the same lists. So a chunk holds only text that cannot
// change: text that could still become the start of a stop string, and the bytes of a UTF-8
// character not yet complete (GPT-2's byte-level tokens split characters), wait for the
// next token. A logprobs entry comes with the chunk that completes its token's text. With
// echo, a choice's first chunk starts with the prompt (and its tokens' logprobs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "data/tokenizer.h"
#include "infer/completion_choice.h"
#include "infer/completions_request.h"
#include "infer/generate.h"

namespace trident {

class CompletionStream {
 public:
  using Sink = std::function<void(const nlohmann::json& chunk)>;
  // `head`: the answer's fields every chunk repeats; `choices`: how many (its prompts x n).
  CompletionStream(const Tokenizer& tokenizer, const CompletionsRequest& r, nlohmann::json head, size_t choices,
                   Sink sink);

  // Choice `index`'s generation `g` has a new token (DecodeOptions::on_token); `last`: it
  // draws no more, and the choice ends.
  void update(size_t index, const Generation& g, bool last);

  // After the generation (`gens`: the choices' generations in order): ends the choices that
  // drew no token (max_tokens 0 with echo), then with include_usage sends `usage`.
  void finish(const Generation* gens, const nlohmann::json& usage);

 private:
  struct Choice {
    bool started = false, ended = false;
    TokenTexts texts;
    size_t stop_from = 0;  // the prompt's end: where stop strings are searched from
    size_t sent = 0;       // bytes of texts.bytes sent (from the first to be sent on)
    size_t listed = 0;     // tokens whose logprobs were sent (from the first listed on)
    LogprobsLists logprobs;
  };
  // Sends texts.bytes[sent, upto) and the logprobs of tokens [listed, tokens), if any or
  // `finish_reason` is given.
  void send(size_t index, Choice& c, const Generation& g, size_t upto, size_t tokens, const char* finish_reason);
  // Where the text that cannot change any more ends: before the earliest suffix that starts a
  // stop string, and before a UTF-8 character still incomplete.
  size_t settled_end(const Choice& c) const;

  const Tokenizer& tokenizer_;
  const CompletionsRequest& request_;
  nlohmann::json head_;
  std::vector<Choice> choices_;
  Sink sink_;
};

// The end of `bytes`' longest prefix that does not end inside a UTF-8 character: before a
// last lead byte whose continuation bytes have not all come (at most 3 bytes held back).
size_t utf8_settled_end(const std::string& bytes, size_t end);

}  // namespace trident
