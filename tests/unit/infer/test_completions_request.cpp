// parse_completions_request: OpenAI's prompt forms and defaults, the fields lm-evaluation-
// harness's local-completions sends, and one refusal per bad field.
#include <gtest/gtest.h>

#include <string>

#include "infer/completions_request.h"

namespace trident {
namespace {

std::string error_of(const std::string& body) {
  try {
    parse_completions_request(body);
  } catch (const ApiError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(CompletionsRequest, PromptFormsAndDefaults) {
  CompletionsRequest r = parse_completions_request(R"({"prompt": "Hello"})");
  EXPECT_EQ(r.prompts, std::vector<std::string>{"Hello"});
  EXPECT_TRUE(r.token_ids.empty());
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.temperature, 1.0);
  EXPECT_EQ(r.top_p, 1.0);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_FALSE(r.wants_logprobs);
  EXPECT_FALSE(r.echo);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.best_of, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.stream_usage);
  r = parse_completions_request(R"({"prompt": "x", "stream": true, "n": 2, "stream_options": {"include_usage": true}})");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.stream_usage);
  EXPECT_FALSE(parse_completions_request(R"({"prompt": "x", "stream": true, "stream_options": {}})").stream_usage);
  EXPECT_FALSE(parse_completions_request(R"({"prompt": "x", "stream": false, "stream_options": null})").stream);
  r = parse_completions_request(R"({"prompt": "Hello", "n": 3})");
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.best_of, 3);  // best_of defaults to n
  EXPECT_EQ(parse_completions_request(R"({"prompt": "x", "n": 2, "best_of": 20})").best_of, 20);
  EXPECT_EQ(parse_completions_request(R"({"prompt": ["a", "b"]})").prompts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(parse_completions_request(R"({"prompt": [1, 2, 3]})").token_ids,
            (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(parse_completions_request(R"({"prompt": [[1, 2], [3]]})").token_ids,
            (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
}

// lm-evaluation-harness's loglikelihood request, and its generation request.
TEST(CompletionsRequest, LmEvaluationHarnessRequests) {
  CompletionsRequest r = parse_completions_request(
      R"({"model": "gpt2", "prompt": [[464, 3290]], "temperature": 0, "max_tokens": 1, "logprobs": 1,
          "seed": 1234, "echo": true})");
  EXPECT_EQ(r.model, "gpt2");
  EXPECT_EQ(r.temperature, 0.0);
  EXPECT_EQ(r.max_tokens, 1);
  EXPECT_TRUE(r.wants_logprobs);
  EXPECT_EQ(r.logprobs, 1);
  EXPECT_EQ(r.seed, 1234);
  EXPECT_TRUE(r.echo);
  r = parse_completions_request(
      R"({"prompt": ["Q: 2+2?\nA:"], "model": "gpt2", "max_tokens": 256, "temperature": 0,
          "stop": ["\n\n", "<|endoftext|>"], "seed": 1234})");
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "<|endoftext|>"}));
  EXPECT_EQ(parse_completions_request(R"({"prompt": "x", "stop": "END"})").stop, std::vector<std::string>{"END"});
  EXPECT_EQ(parse_completions_request(R"({"prompt": "x", "logprobs": 0})").logprobs, 0);
  EXPECT_TRUE(parse_completions_request(R"({"prompt": "x", "logprobs": 0})").wants_logprobs);
  EXPECT_EQ(parse_completions_request(R"({"prompt": "x", "max_tokens": null, "user": "me"})").max_tokens, 16);
}

TEST(CompletionsRequest, Refusals) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({})", "prompt is required"},
      {R"({"prompt": 5})", "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids"},
      {R"({"prompt": ["a", [1]]})", "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids"},
      {R"({"prompt": [1, -2]})", "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids"},
      {R"({"prompt": []})", "prompt is empty"},
      {R"({"prompt": [[]]})", "prompt: a list of token ids is empty"},
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens must be an integer greater than or equal to 0"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens 0 returns nothing without echo: set echo to true"},
      {R"({"prompt": "x", "temperature": -1})", "temperature must be a number from 0 to 100"},
      {R"({"prompt": "x", "top_p": 0})", "top_p must be a number above 0 and at most 1"},
      {R"({"prompt": "x", "top_k": 1001})", "top_k must be an integer from 0 to 1000"},
      {R"({"prompt": "x", "logprobs": 11})", "logprobs must be an integer from 0 to 10"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs must be an integer from 0 to 10"},
      {R"({"prompt": "x", "echo": 1})", "echo must be a boolean value"},
      {R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop must be a string or a list of at most 4 strings"},
      {R"({"prompt": "x", "stop": [""]})", "stop: an empty string would end every completion at once"},
      {R"({"prompt": "x", "seed": "s"})", "seed must be an integer"},
      {R"({"prompt": "x", "n": 0})", "n must be an integer from 1 to 20"},
      {R"({"prompt": "x", "n": 21})", "n must be an integer from 1 to 20"},
      {R"({"prompt": "x", "n": 1.5})", "n must be an integer from 1 to 20"},
      {R"({"prompt": "x", "n": 3, "best_of": 2})", "best_of must be an integer from n (3) to 20"},
      {R"({"prompt": "x", "best_of": 21})", "best_of must be an integer from n (1) to 20"},
      {R"({"prompt": "x", "stream": 1})", "stream must be a boolean value"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options is only allowed with stream true"},
      {R"({"prompt": "x", "stream": true, "stream_options": true})", "stream_options must be an object"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage must be a boolean value"},
      {R"({"prompt": "x", "stream": true, "n": 2, "best_of": 3})",
       "best_of above n cannot be streamed: the best completions are known only once all are drawn"},
  };
  for (const auto& [body, message] : cases) EXPECT_EQ(error_of(body), message) << body;
  EXPECT_EQ(error_of(R"({"prompt": "x", "max_tokens": 0, "echo": true})"), "(accepted)");
  std::string many = "{\"prompt\": [\"a\"";
  for (int i = 1; i < 129; ++i) many += ", \"a\"";
  EXPECT_EQ(error_of(many + "]}"), "at most 128 prompts in one request");
}

}  // namespace
}  // namespace trident
