// parse_text_generation_request against Megatron's server (megatron/
// text_generation_server.py): its defaults, and each check's message for a body that fails
// it and only it. The stop and logit rules a request sets (text_generation_service.h) on
// GPT-2's tokens.
#include <gtest/gtest.h>

#include <string>

#include "data/tokenizer.h"
#include "infer/text_generation_request.h"
#include "infer/text_generation_service.h"

namespace trident {
namespace {

std::string error_of(const std::string& body) {
  try {
    parse_text_generation_request(body);
  } catch (const ApiError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(TextGenerationRequest, MegatronDefaults) {
  const TextGenerationRequest r = parse_text_generation_request(R"({"prompts": ["Hello", "a, b"]})");
  EXPECT_EQ(r.prompts, (std::vector<std::string>{"Hello", "a, b"}));
  EXPECT_EQ(r.tokens_to_generate, 64);
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(r.temperature, 1.0);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_EQ(r.top_p, 0.0);
  EXPECT_FALSE(r.add_BOS || r.stop_on_eol || r.stop_on_double_eol || r.prevent_newline_after_colon || r.no_log);
  EXPECT_FALSE(r.random_seed.has_value());
  EXPECT_FALSE(r.beam_width.has_value());
  EXPECT_EQ(r.stop_token, 50256);
  EXPECT_EQ(r.length_penalty, 1.0);
}

TEST(TextGenerationRequest, EveryFieldRead) {
  const TextGenerationRequest r = parse_text_generation_request(
      R"({"prompts": [""], "tokens_to_generate": 0, "logprobs": true, "temperature": 0.5, "top_p": 0.9,
          "top_p_decay": 0.5, "top_p_bound": 0.2, "add_BOS": true, "stop_on_eol": true,
          "stop_on_double_eol": true, "prevent_newline_after_colon": true, "random_seed": 7, "no_log": true,
          "beam_width": 3, "stop_token": 13, "length_penalty": 2})");
  EXPECT_EQ(r.tokens_to_generate, 0);
  EXPECT_TRUE(r.logprobs && r.add_BOS && r.stop_on_eol && r.stop_on_double_eol && r.prevent_newline_after_colon &&
              r.no_log);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.top_p_decay, 0.5);
  EXPECT_EQ(r.top_p_bound, 0.2);
  EXPECT_EQ(r.random_seed, 7);
  EXPECT_EQ(r.beam_width, 3);
  EXPECT_EQ(r.stop_token, 13);
  EXPECT_EQ(r.length_penalty, 2.0);
  EXPECT_EQ(parse_text_generation_request(R"({"prompts": ["x"], "top_k": 1000})").top_k, 1000);
}

TEST(TextGenerationRequest, MegatronMessages) {
  const std::string p = R"("prompts": ["x"])";
  const std::pair<std::string, std::string> cases[] = {
      {R"({})", "prompts argument required"},
      {R"({"prompts": ["x"], "max_len": 5})", "max_len is no longer used.  Replace with tokens_to_generate"},
      {R"({"prompts": ["x"], "sentences": ["x"]})", "sentences is no longer used.  Replace with prompts"},
      {R"({"prompts": "x"})", "prompts is not a list of strings"},
      {R"({"prompts": ["x", 3]})", "prompts is not a list of strings"},
      {R"({"prompts": []})", "prompts is empty"},
      {"{" + p + R"(, "tokens_to_generate": 1.5})", "tokens_to_generate must be an integer greater than 0"},
      {"{" + p + R"(, "tokens_to_generate": -1})", "tokens_to_generate must be an integer greater than or equal to 0"},
      {"{" + p + R"(, "logprobs": 1})", "logprobs must be a boolean value"},
      {"{" + p + R"(, "tokens_to_generate": 0})", "tokens_to_generate=0 implies logprobs should be True"},
      {"{" + p + R"(, "temperature": 0})", "temperature must be a positive number less than or equal to 100.0"},
      {"{" + p + R"(, "temperature": 100.5})", "temperature must be a positive number less than or equal to 100.0"},
      {"{" + p + R"(, "temperature": "hot"})", "temperature must be a positive number less than or equal to 100.0"},
      {"{" + p + R"(, "top_k": 2.5})", "top_k must be an integer equal to or greater than 0 and less than or equal to 1000"},
      {"{" + p + R"(, "top_k": 1001})", "top_k must be equal to or greater than 0 and less than or equal to 1000"},
      {"{" + p + R"(, "top_k": -1})", "top_k must be equal to or greater than 0 and less than or equal to 1000"},
      {"{" + p + R"(, "top_p": "x"})", "top_p must be a positive float less than or equal to 1.0"},
      {"{" + p + R"(, "top_p": 0.5, "top_k": 5})", "cannot set both top-k and top-p samplings."},
      {"{" + p + R"(, "top_p": 1.5})", "top_p must be less than or equal to 1.0"},
      {"{" + p + R"(, "top_p_decay": 0.5})", "top_p_decay cannot be set without top_p"},
      {"{" + p + R"(, "top_p": 0.5, "top_p_decay": 2.0})", "top_p_decay must be less than or equal to 1.0"},
      {"{" + p + R"(, "top_p_bound": 0.1})", "top_p_bound cannot be set without top_p"},
      {"{" + p + R"(, "top_p": 0.5, "top_p_bound": 0.6})", "top_p_bound must be greater than 0 and less than top_p"},
      {"{" + p + R"(, "add_BOS": "yes"})", "add_BOS must be a boolean value"},
      {R"({"prompts": ["x", ""]})", "Empty prompts require add_BOS=true"},
      {"{" + p + R"(, "stop_on_double_eol": 0})", "stop_on_double_eol must be a boolean value"},
      {"{" + p + R"(, "stop_on_eol": null})", "stop_on_eol must be a boolean value"},
      {"{" + p + R"(, "prevent_newline_after_colon": 1})", "prevent_newline_after_colon must be a boolean value"},
      {"{" + p + R"(, "random_seed": 1.5})", "random_seed must be integer"},
      {"{" + p + R"(, "random_seed": -2})", "random_seed must be a positive integer"},
      {"{" + p + R"(, "no_log": 1})", "no_log must be a boolean value"},
      {"{" + p + R"(, "beam_width": "2"})", "beam_width must be integer"},
      {"{" + p + R"(, "beam_width": 0})", "beam_width must be an integer > 1"},
      {R"({"prompts": ["x", "y"], "beam_width": 2})", "When doing beam_search, batch size must be 1"},
      {"{" + p + R"(, "stop_token": 1.5})", "stop_token must be an integer"},
      {"{" + p + R"(, "length_penalty": "long"})", "length_penalty must be a float"},
      {"[1, 2]", "the request body is not a JSON object"},
  };
  for (const auto& [body, message] : cases) EXPECT_EQ(error_of(body), message) << body;
  EXPECT_EQ(error_of("{\"prompts\": [" + std::string(128 * 4 - 1, ' ') + "]}"), "prompts is empty");
  std::string many = "{\"prompts\": [\"a\"";
  for (int i = 1; i < 129; ++i) many += ", \"a\"";
  EXPECT_EQ(error_of(many + "]}"), "Maximum number of prompts is 128");
  EXPECT_EQ(error_of("{\"prompts\": [\"x\"], ").rfind("the request body is not JSON: ", 0), 0u);
  // Megatron's beam_width 1 is accepted (its message says "> 1").
  EXPECT_EQ(error_of("{" + p + R"(, "beam_width": 1})"), "(accepted)");
}

}  // namespace
}  // namespace trident

namespace trident {
namespace {

// The options' tokens as GPT-2's tokenizer spells them, and the rules built on them.
TEST(TextGenerationRequest, StopAndLogitRules) {
  const std::string dir = TRIDENT_SHARED_GPT2_DIR;
  const auto gpt2 = make_tokenizer("GPT2BPETokenizer", dir + "/gpt2-vocab.json", dir + "/gpt2-merges.txt");
  const SpecialTokens t = special_tokens(*gpt2);
  EXPECT_EQ(t.eod, 50256);
  EXPECT_EQ(t.newline, 198);
  EXPECT_EQ(t.double_newline, 628);
  EXPECT_EQ(t.colon, 25);

  TextGenerationRequest r;
  const auto plain = request_stop_rule(r, t);
  EXPECT_TRUE(plain({5, 50256}, 1));
  EXPECT_FALSE(plain({5, 198}, 1));
  r.stop_on_eol = true;
  const auto eol = request_stop_rule(r, t);
  EXPECT_TRUE(eol({5, 198}, 1));
  EXPECT_TRUE(eol({5, 628}, 1));
  EXPECT_FALSE(eol({5, 50256}, 1));  // Megatron: with stop_on_eol, <|endoftext|> does not stop
  r.stop_on_double_eol = true;    // wins over stop_on_eol
  const auto double_eol = request_stop_rule(r, t);
  EXPECT_TRUE(double_eol({5, 628}, 1));
  EXPECT_TRUE(double_eol({198, 198}, 1));
  EXPECT_FALSE(double_eol({5, 198}, 1));
  EXPECT_FALSE(double_eol({198}, 1));

  EXPECT_EQ(request_logit_rule(r, t), nullptr);
  r.prevent_newline_after_colon = true;
  const auto rule = request_logit_rule(r, t);
  std::vector<float> row(50257, 1.0f);
  rule(5, row.data());
  EXPECT_EQ(row[198], 1.0f);
  rule(25, row.data());
  EXPECT_EQ(row[198], -1e10f);
  EXPECT_EQ(row[628], 1.0f);  // "\n\n" stays allowed, as in Megatron
}

}  // namespace
}  // namespace trident
