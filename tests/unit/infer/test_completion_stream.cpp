// CompletionStream (a /completions answer streamed as its tokens are drawn) against
// completion_choice (the same answer whole), over GPT-2's tokenizer: a choice's chunks,
// joined as a client joins them (each chunk's text written as the server writes it), are the
// whole choice's text and logprobs lists; only the last chunk has a finish_reason; text that
// could still become a stop string, and a UTF-8 character split between byte-level tokens,
// wait for the token that settles them, and no longer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "infer/completion_stream.h"
#include "made_up_generation.h"

namespace trident {
namespace {

using nlohmann::json;

using test::gpt2;

constexpr int32_t kEod = 50256;

// The one token of `text` (-1, which no test expects, when it is more).
int32_t one(const std::string& text) {
  const std::vector<int32_t> ids = gpt2().encode(text);
  EXPECT_EQ(ids.size(), 1u) << text;
  return ids.size() == 1 ? ids[0] : -1;
}

// The first `k` drawn tokens of made_up(prompt, drawn, finished).
Generation drawn_so_far(const std::vector<int32_t>& prompt, const std::vector<int32_t>& drawn, size_t k,
                        bool finished) {
  return test::made_up(prompt, std::vector<int32_t>(drawn.begin(), drawn.begin() + static_cast<std::ptrdiff_t>(k)),
                       finished);
}

// The chunks of one choice streamed a drawn token at a time (the last ends it, `finished` or
// at the length limit), each as a client reads it (written and parsed again).
std::vector<json> stream(const std::vector<int32_t>& prompt, const std::vector<int32_t>& drawn, bool finished,
                         const CompletionsRequest& r) {
  std::vector<json> chunks;
  CompletionStream s(gpt2(), r, json{{"id", "cmpl-7"}}, 1,
                     [&](const json& chunk) { chunks.push_back(json::parse(response_body(chunk))); });
  for (size_t k = 1; k <= drawn.size(); ++k)
    s.update(0, drawn_so_far(prompt, drawn, k, finished && k == drawn.size()), k == drawn.size());
  const Generation whole = drawn_so_far(prompt, drawn, drawn.size(), finished);
  s.finish(&whole, json{{"total_tokens", 3}});
  return chunks;
}

// The choice the chunks make, as completion_choice writes one; fails the test where a
// chunk is malformed or a finish_reason comes before the last chunk.
json joined(const std::vector<json>& chunks, const CompletionsRequest& r) {
  json choice = {{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (r.wants_logprobs)
    choice["logprobs"] = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                          {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  for (size_t i = 0; i < chunks.size(); ++i) {
    const json& c = chunks[i];
    EXPECT_EQ(c["id"], "cmpl-7");
    if (c["choices"].empty()) continue;  // the usage chunk
    EXPECT_EQ(c["choices"].size(), 1u);
    const json& part = c["choices"][0];
    EXPECT_TRUE(choice["finish_reason"].is_null()) << "a chunk after the finish_reason: " << c.dump();
    choice["text"] = choice["text"].get<std::string>() + part["text"].get<std::string>();
    choice["finish_reason"] = part["finish_reason"];
    if (!r.wants_logprobs) {
      EXPECT_TRUE(part["logprobs"].is_null());
      continue;
    }
    for (const char* list : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const json& v : part["logprobs"][list]) choice["logprobs"][list].push_back(v);
  }
  return choice;
}

// The whole choice, as a client reads it.
json whole(const std::vector<int32_t>& prompt, const std::vector<int32_t>& drawn, bool finished,
           const CompletionsRequest& r) {
  return json::parse(response_body(completion_choice(drawn_so_far(prompt, drawn, drawn.size(), finished), gpt2(), r, 0).choice));
}

std::vector<std::string> texts(const std::vector<json>& chunks) {
  std::vector<std::string> out;
  for (const json& c : chunks)
    if (!c["choices"].empty()) out.push_back(c["choices"][0]["text"]);
  return out;
}

CompletionsRequest request(std::vector<std::string> stop, bool echo, bool logprobs) {
  CompletionsRequest r;
  r.stream = true;
  r.stop = std::move(stop);
  r.echo = echo;
  r.wants_logprobs = logprobs;
  r.logprobs = logprobs ? 1 : 0;
  return r;
}

TEST(CompletionStream, UTF8SettledEnd) {
  const std::string euro = "\xE2\x82\xAC", emoji = "\xF0\x9F\x98\x80";
  EXPECT_EQ(utf8_settled_end("ab", 2), 2u);
  EXPECT_EQ(utf8_settled_end("", 0), 0u);
  EXPECT_EQ(utf8_settled_end("a" + euro, 4), 4u);
  // Built by append, not "a" + ...: GCC 12 warns falsely (-Wrestrict) on a literal + a temporary.
  EXPECT_EQ(utf8_settled_end(std::string("a").append(euro, 0, 2), 3), 1u);
  EXPECT_EQ(utf8_settled_end(std::string("a").append(euro, 0, 1), 2), 1u);
  EXPECT_EQ(utf8_settled_end(emoji, 4), 4u);
  EXPECT_EQ(utf8_settled_end(emoji.substr(0, 3), 3), 0u);
  EXPECT_EQ(utf8_settled_end("a" + emoji, 3), 1u);  // `end` inside: the prefix's own tail
  EXPECT_EQ(utf8_settled_end("\x80\x80\x80", 3), 3u);  // no character: nothing to wait for
  EXPECT_EQ(utf8_settled_end("a\xFF", 2), 2u);
}

TEST(CompletionStream, ChunksJoinToTheWholeChoice) {
  struct Case {
    std::string name, prompt, drawn;
    std::vector<std::string> stop;
    bool finished, eod;
  };
  const std::vector<Case> cases = {
      {"length limit", "The cat", " sat on the mat and looked", {}, false, false},
      {"<|endoftext|>", "Hello", " world, again", {}, true, true},
      {"stop string across tokens", "Q: 1+1?", " A: 2.\n\nQuestion: 2+2", {"\n\nQuestion:"}, true, false},
      {"a stop string's start that goes on otherwise", "Q", " A.\n\nQuiet now", {"\n\nQuestion:"}, false, false},
      {"the first of two stop strings", "x", " one; two", {", t", "; "}, true, false},
      {"characters split between tokens", "Emoji:", " \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 \xE6\x97\xA5\xE6\x9C\xAC ok",
       {}, false, false},
      {"a split character before a stop string", "Say", " \xF0\x9F\x98\x80" "END", {"END"}, true, false},
  };
  for (const Case& c : cases)
    for (bool echo : {false, true})
      for (bool logprobs : {false, true}) {
        const CompletionsRequest r = request(c.stop, echo, logprobs);
        const std::vector<int32_t> prompt = gpt2().encode(c.prompt);
        std::vector<int32_t> drawn = gpt2().encode(c.drawn);
        if (c.eod) drawn.push_back(kEod);
        const std::vector<json> chunks = stream(prompt, drawn, c.finished, r);
        EXPECT_EQ(joined(chunks, r), whole(prompt, drawn, c.finished, r))
            << c.name << (echo ? ", echo" : "") << (logprobs ? ", logprobs" : "");
        for (const std::string& t : texts(chunks))
          EXPECT_EQ(t.find("\xEF\xBF\xBD"), std::string::npos) << c.name << ": a chunk split a character: " << t;
        EXPECT_FALSE(chunks.empty());
        EXPECT_EQ(chunks.back()["choices"].size(), 1u) << "no usage chunk without include_usage";
        EXPECT_FALSE(chunks.back().contains("usage"));
      }
}

TEST(CompletionStream, TextWaitsOnlyWhileItCouldStillStop) {
  // " A.\n\nQuiet": "\n\nQu" could still become "\n\nQuestion:", "iet" cannot.
  const std::vector<int32_t> prompt = gpt2().encode("Q");
  const std::vector<int32_t> drawn = {one(" A"), one("."), one("\n\n"), one("Qu"), one("iet"), one(" now")};
  const CompletionsRequest r = request({"\n\nQuestion:"}, false, false);
  EXPECT_EQ(texts(stream(prompt, drawn, false, r)), (std::vector<std::string>{" A", ".", "\n\nQuiet", " now"}));
  // The same with the question: the stop string is never sent.
  const std::vector<int32_t> question = {one(" A"), one("."), one("\n\n"), one("Question"), one(":")};
  const std::vector<json> chunks = stream(prompt, question, true, r);
  EXPECT_EQ(texts(chunks), (std::vector<std::string>{" A", ".", ""}));
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "stop");
}

TEST(CompletionStream, SplitCharacterWaitsForItsLastByte) {
  const std::vector<int32_t> prompt = gpt2().encode("A");
  const std::vector<int32_t> drawn = gpt2().encode("\xF0\x9F\x98\x80!");
  ASSERT_EQ(drawn.size(), 3u);  // the emoji's first three bytes, its last, "!"
  const std::vector<json> chunks = stream(prompt, drawn, false, request({}, false, true));
  EXPECT_EQ(texts(chunks), (std::vector<std::string>{"\xF0\x9F\x98\x80", "!"}));
  // A token's logprobs come with the chunk that completes its text: the emoji's tokens
  // together.
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["choices"][0]["logprobs"]["token_logprobs"], json({-1.0, -2.0}));
  EXPECT_EQ(chunks[1]["choices"][0]["logprobs"]["token_logprobs"], json({-3.0}));
}

TEST(CompletionStream, EchoSendsThePromptFirstAndMaxTokensZeroEndsAtFinish) {
  const std::vector<int32_t> prompt = gpt2().encode("Hello world");
  CompletionsRequest r = request({}, true, true);
  r.stream_usage = true;
  std::vector<json> chunks;
  CompletionStream s(gpt2(), r, json{{"id", "cmpl-7"}}, 2,
                     [&](const json& chunk) { chunks.push_back(json::parse(response_body(chunk))); });
  const Generation g = drawn_so_far(prompt, {}, 0, false);
  const Generation both[2] = {g, g};
  s.finish(both, json{{"prompt_tokens", 2}});
  ASSERT_EQ(chunks.size(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    const json& c = chunks[i];
    EXPECT_EQ(c["choices"][0]["index"], i);
    EXPECT_EQ(c["choices"][0]["text"], "Hello world");
    EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"], json({"Hello", " world"}));
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
  }
  EXPECT_EQ(chunks[2]["choices"], json::array());
  EXPECT_EQ(chunks[2]["usage"], json({{"prompt_tokens", 2}}));
}

}  // namespace
}  // namespace trident
