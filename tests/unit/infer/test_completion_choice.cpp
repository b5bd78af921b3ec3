// completion_choice (one choice of a /completions answer) from made-up generations over
// GPT-2's tokenizer: what lm-evaluation-harness's echoed scoring reads (one log-probability
// per token, None first, the drawn token last even when it is <|endoftext|>), stop strings,
// text offsets in characters, and top-logprob keys that look alike once written.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "infer/text_generation_service.h"
#include "made_up_generation.h"

namespace trident {
namespace {

using nlohmann::json;

using test::gpt2;
using test::made_up;

// The choice as a client reads it (written and parsed again).
json as_read(const CompletionChoice& c) { return json::parse(response_body(c.choice)); }

CompletionsRequest request(bool echo, int logprobs) {
  CompletionsRequest r;
  r.echo = echo;
  r.wants_logprobs = true;
  r.logprobs = logprobs;
  return r;
}

TEST(CompletionChoice, EndOfTextStaysAmongTheScoredTokens) {
  const std::vector<int32_t> prompt = gpt2().encode("Hello world");
  ASSERT_EQ(prompt.size(), 2u);
  const int32_t comma = gpt2().encode(",")[0];
  const Generation g = made_up(prompt, {comma, 50256}, true);
  CompletionChoice c = completion_choice(g, gpt2(), request(true, 1), 3);
  json j = as_read(c);
  EXPECT_EQ(j["index"], 3);
  EXPECT_EQ(j["text"], "Hello world,");
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_EQ(c.completion_tokens, 2);
  const json& lp = j["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"Hello", " world", ",", "<|endoftext|>"}));
  EXPECT_EQ(lp["token_logprobs"], json({nullptr, -1.0, -2.0, -3.0}));
  EXPECT_EQ(lp["top_logprobs"], json({nullptr, {{" world", -1.0}}, {{",", -2.0}}, {{"<|endoftext|>", -3.0}}}));
  EXPECT_EQ(lp["text_offset"], json({0, 5, 11, 12}));
  // lm-evaluation-harness: sum(token_logprobs[ctxlen:-1]) with the context "Hello" (1 token)
  // and continuation " world," is -1 + -2: the drawn token's slot is the one it drops.
  double sum = 0;
  for (size_t i = 1; i + 1 < lp["token_logprobs"].size(); ++i) sum += lp["token_logprobs"][i].get<double>();
  EXPECT_EQ(sum, -3.0);

  // Without echo: the completion alone, its offsets still counted from the prompt's start.
  j = as_read(completion_choice(g, gpt2(), request(false, 0), 0));
  EXPECT_EQ(j["text"], ",");
  EXPECT_EQ(j["logprobs"]["tokens"], json({",", "<|endoftext|>"}));
  EXPECT_EQ(j["logprobs"]["token_logprobs"], json({-2.0, -3.0}));
  EXPECT_EQ(j["logprobs"]["top_logprobs"], json({json::object(), json::object()}));  // logprobs 0
  EXPECT_EQ(j["logprobs"]["text_offset"], json({11, 12}));
  // Not finished: the length limit; no logprobs asked: null.
  CompletionsRequest plain;
  j = as_read(completion_choice(made_up(prompt, {comma}, false), gpt2(), plain, 0));
  EXPECT_EQ(j["text"], ",");
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_TRUE(j["logprobs"].is_null());
}

// A stop string that starts inside a token: the text ends before it, the tokens after its
// start are dropped, the one it starts in is kept.
TEST(CompletionChoice, StopStringCutsTheText) {
  const std::vector<int32_t> prompt = gpt2().encode("The");
  const std::vector<int32_t> drawn = gpt2().encode(" cat sat on");
  ASSERT_EQ(drawn.size(), 3u);
  CompletionsRequest r = request(false, 1);
  r.stop = {"on", "at s"};
  const CompletionChoice c = completion_choice(made_up(prompt, drawn, true), gpt2(), r, 0);
  const json j = as_read(c);
  EXPECT_EQ(j["text"], " c");
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_EQ(j["logprobs"]["tokens"], json({" cat"}));
  EXPECT_EQ(c.completion_tokens, 1);
  r.stop = {"The"};  // in the prompt only: no cut
  EXPECT_EQ(as_read(completion_choice(made_up(prompt, drawn, false), gpt2(), r, 0))["text"], " cat sat on");
}

// text_offset counts characters (Python's len), not bytes: "café" is 4 of them, 5 bytes.
TEST(CompletionChoice, TextOffsetsCountCharacters) {
  const std::vector<int32_t> tokens = gpt2().encode("café au lait");
  const json j = as_read(completion_choice(made_up(tokens, {}, false), gpt2(), request(true, 0), 0));
  const json& lp = j["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), tokens.size());
  bool saw_au = false;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (lp["tokens"][i] == " au") {
      EXPECT_EQ(lp["text_offset"][i], 4);
      saw_au = true;
    }
  EXPECT_TRUE(saw_au);
  EXPECT_EQ(lp["text_offset"].back().get<int>() + lp["tokens"].back().get<std::string>().size(), 12u);
}

// Two top tokens that are lone bytes of a character (GPT-2's byte tokens 158 and 159:
// 0xE2 and 0xE3) are both written "\ufffd": the key keeps the more likely one's value.
TEST(CompletionChoice, TopLogprobKeysThatLookAlikeKeepTheMoreLikely) {
  ASSERT_EQ(gpt2().decode({158}), "\xe2");
  ASSERT_EQ(gpt2().decode({159}), "\xe3");
  Generation g = made_up(gpt2().encode("Hi"), {158}, false);
  g.top_logprobs.back() = {{158, -0.5}, {159, -0.7}};
  const json j = as_read(completion_choice(g, gpt2(), request(true, 2), 0));
  EXPECT_EQ(j["logprobs"]["top_logprobs"].back(), json({{"\xef\xbf\xbd", -0.5}}));
}

}  // namespace
}  // namespace trident
