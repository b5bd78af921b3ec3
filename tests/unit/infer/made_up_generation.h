// GPT-2's tokenizer (the shared vocabulary) and made-up generations over it, for the tests of
// /completions answers (completion_choice, CompletionStream).
#pragma once

#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "infer/generate.h"

namespace trident::test {

inline const Tokenizer& gpt2() {
  static const auto t = make_tokenizer("GPT2BPETokenizer", std::string(TRIDENT_SHARED_GPT2_DIR) + "/gpt2-vocab.json",
                                       std::string(TRIDENT_SHARED_GPT2_DIR) + "/gpt2-merges.txt");
  return *t;
}

// A generation of `prompt` then `drawn`, each token's log-probability -(its index) and
// itself the one most likely token.
inline Generation made_up(const std::vector<int32_t>& prompt, const std::vector<int32_t>& drawn, bool finished) {
  Generation g;
  g.tokens = prompt;
  g.tokens.insert(g.tokens.end(), drawn.begin(), drawn.end());
  g.prompt_length = static_cast<int64_t>(prompt.size());
  g.finished = finished;
  for (size_t i = 1; i < g.tokens.size(); ++i) {
    g.logprobs.push_back(-static_cast<double>(i));
    g.top_logprobs.push_back({{g.tokens[i], -static_cast<double>(i)}});
  }
  return g;
}

}  // namespace trident::test
