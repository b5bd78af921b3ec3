// One choice of a /completions answer (OpenAI's legacy completions format) from the
// generation of its prompt, and the pieces of it that a streamed answer (completion_stream.h)
// writes a few tokens at a time: the tokens' texts, where the completion's text ends, and
// OpenAI's logprobs lists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "infer/completions_request.h"
#include "infer/generate.h"

namespace trident {

// The tokens' texts one by one and together: each token's own text (decode({id})), and the
// text of the whole sequence, those texts joined by the tokenizer's separator (NullTokenizer's
// space between ids; none for GPT-2's byte-level pieces, which carry their spaces).
struct TokenTexts {
  std::vector<std::string> pieces;  // each token's own text, without the separator before it
  std::vector<size_t> start{0};     // where each token's part of `bytes` (its separator, then its
                                    // text) starts; one past the last: the size
  std::string bytes;
  size_t separator = 0;             // the separator's bytes
  // Where token i's own text starts in `bytes` (after its separator).
  size_t text_start(size_t i) const { return start[i] + (i > 0 ? separator : 0); }
};
void append_token_text(TokenTexts& t, const Tokenizer& tokenizer, int32_t id);
TokenTexts token_texts(const Tokenizer& tokenizer, const std::vector<int32_t>& tokens);

// Where a completion ends: its text before the <|endoftext|> that ended it or before its
// first stop string (searched from the prompt's end), and the tokens kept: those that start
// before the cut (<|endoftext|> stays among them: lm-evaluation-harness's echoed scoring reads
// the drawn token's slot, the last, whatever it is; the tokens after a stop string's start
// do not).
struct CompletionEnd {
  size_t cut = 0;    // in TokenTexts::bytes
  size_t kept = 0;   // tokens
  bool stopped = false;  // finish_reason "stop" (else "length")
};
CompletionEnd completion_end(const Generation& g, const TokenTexts& t, int32_t eod,
                             const std::vector<std::string>& stop);

// OpenAI's logprobs object {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, a
// token at a time in order: the first token's log-probability and top_logprobs are None
// (nothing predicts it); text_offset counts characters (as Python's len) from the prompt's
// start; top_logprobs has `top` entries, keyed as the response writes them (a piece that is
// not whole UTF-8 becomes U+FFFD, so of two keys that look alike the more likely is kept).
class LogprobsLists {
 public:
  void add(const Generation& g, const TokenTexts& t, size_t i, const Tokenizer& tokenizer, int top);
  nlohmann::json take();  // the tokens added since the last take
  bool empty() const { return tokens_.empty(); }

 private:
  nlohmann::json tokens_ = nlohmann::json::array(), token_logprobs_ = nlohmann::json::array(),
                 top_ = nlohmann::json::array(), offsets_ = nlohmann::json::array();
  int64_t characters_ = 0;  // before byte counted_ of the texts
  size_t counted_ = 0;
};

struct CompletionChoice {
  nlohmann::json choice;          // {"index", "text", "logprobs", "finish_reason"}
  int64_t completion_tokens = 0;  // the tokens of its completion (usage)
};
// "text" is the completion (after the prompt with echo) up to completion_end's cut; with echo
// the logprobs start at the prompt's first token.
CompletionChoice completion_choice(const Generation& g, const Tokenizer& tokenizer, const CompletionsRequest& r,
                                   size_t index);

// Whether a byte starts a character of UTF-8 text (is not a continuation byte).
inline bool starts_character(char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }
// The JSON text of a response, invalid UTF-8 (a token that ends inside a character) as U+FFFD.
std::string response_body(const nlohmann::json& response);
// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD, as response_body writes it.
std::string valid_utf8(const std::string& bytes);

}  // namespace trident
