// TextGenerationService::batches (which waiting requests the server decodes together) and
// run_batch (a batch answers as its requests alone): consecutive greedy /completions
// requests that decode alike share a batch, up to --max-tokens-to-oom; sampled ones, /api
// ones and ones that decode differently run alone. And /completions' n and best_of: n
// choices a prompt are the draws of the prompt repeated n times; best_of keeps the n of the
// highest mean log-probability.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "data/tokenizer.h"
#include "infer/text_generation_service.h"
#include "tiny_model.h"

namespace trident {
namespace {

PreparedRequest completion(int64_t max_tokens, double temperature, std::vector<std::vector<int32_t>> prompts) {
  PreparedRequest p;
  p.endpoint = Endpoint::kCompletions;
  p.completions.max_tokens = max_tokens;
  p.completions.temperature = temperature;
  p.completions.wants_logprobs = true;
  p.completions.logprobs = 1;
  p.completions.echo = true;
  p.prompts = std::move(prompts);
  return p;
}

struct Service {
  test::TinyModel m{DType::F32};
  std::unique_ptr<Tokenizer> gpt2 =
      make_tokenizer("GPT2BPETokenizer", std::string(TRIDENT_SHARED_GPT2_DIR) + "/gpt2-vocab.json",
                     std::string(TRIDENT_SHARED_GPT2_DIR) + "/gpt2-merges.txt");
  TextGenerationService make(int64_t max_tokens_to_oom) {
    return TextGenerationService(m.cfg, *m.be, *m.params, *gpt2, nullptr, 1, max_tokens_to_oom);
  }
};

TEST(RequestBatches, GreedyCompletionsThatDecodeAlikeShareABatch) {
  Service s;
  std::vector<PreparedRequest> r = {completion(1, 0.0, {{1, 2}}), completion(1, 0.0, {{3}, {4, 5, 6}}),
                                    completion(1, 1.0, {{7}}),     completion(2, 0.0, {{8}}),
                                    PreparedRequest{},             completion(1, 0.0, {{9}}),
                                    completion(1, 0.0, {{9, 9}})};
  r[4].prompts = {{1}};  // an /api request
  r[6].completions.top_k = 1;  // greedy too (temperature 1, top_k 1)
  r[6].completions.temperature = 1.0;
  using B = std::vector<std::vector<size_t>>;
  EXPECT_EQ(s.make(12000).batches(r), (B{{0, 1}, {2}, {3}, {4}, {5, 6}}));
  // 3 prompts x (3 + 1) tokens = 12: a limit of 11 splits the first batch.
  EXPECT_EQ(s.make(11).batches(r), (B{{0}, {1}, {2}, {3}, {4}, {5, 6}}));
  r[1].completions.stop = {"x"};  // decodes differently
  EXPECT_EQ(s.make(12000).batches(r), (B{{0}, {1}, {2}, {3}, {4}, {5, 6}}));
  EXPECT_TRUE(s.make(12000).batches({}).empty());
  // A batch goes through in passes, shorter prompts padded to the longest, then each
  // sequence decodes at its own length: lengths may spread by max(16, the shortest's),
  // whatever is drawn. 1 and 17 batch, 1 and 18 do not; 20 and 40 batch, 20 and 41 do not.
  struct Spread {
    size_t shortest, longest;
    bool together;
  };
  for (int64_t max_tokens : {0, 1, 2, 30})
    for (const auto& [shortest, longest, together] : {Spread{1, 17, true}, Spread{1, 18, false},
                                                      Spread{20, 40, true}, Spread{20, 41, false}}) {
      const std::vector<PreparedRequest> spread = {completion(max_tokens, 0.0, {std::vector<int32_t>(shortest, 1)}),
                                                   completion(max_tokens, 0.0, {std::vector<int32_t>(longest, 2)})};
      EXPECT_EQ(s.make(12000).batches(spread), together ? (B{{0, 1}}) : (B{{0}, {1}}))
          << max_tokens << " tokens, prompts of " << shortest << " and " << longest;
    }
}

// Three greedy requests decoded as one batch answer as each decoded alone (texts, tokens,
// usage; log-probabilities within 1e-5), and the ids go on counting: drawing 3 tokens (the
// prompts in passes, shorter ones padded, then steps at each sequence's own length) and 1
// (lm-evaluation-harness's loglikelihood requests: all in passes).
TEST(RequestBatches, ABatchAnswersAsItsRequestsAlone) {
  Service s;
  for (const int64_t max_tokens : {3, 1}) {
    SCOPED_TRACE("max_tokens " + std::to_string(max_tokens));
    const std::vector<PreparedRequest> r = {completion(max_tokens, 0.0, {{1, 2}}),
                                            completion(max_tokens, 0.0, {{3}, {4, 5, 6}}),
                                            completion(max_tokens, 0.0, {{7, 8, 9, 10}})};
    TextGenerationService together = s.make(12000), alone = s.make(12000);
    const std::vector<nlohmann::json> batched = together.run_batch({&r[0], &r[1], &r[2]});
    ASSERT_EQ(batched.size(), 3u);
    double worst = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      const nlohmann::json one = alone.run(r[i]);
      ASSERT_EQ(batched[i]["choices"].size(), one["choices"].size());
      for (size_t c = 0; c < one["choices"].size(); ++c) {
        const nlohmann::json &a = batched[i]["choices"][c], &b = one["choices"][c];
        EXPECT_EQ(a["text"], b["text"]) << "request " << i;
        EXPECT_EQ(a["logprobs"]["tokens"], b["logprobs"]["tokens"]) << "request " << i;
        EXPECT_EQ(a["logprobs"]["tokens"].size(), r[i].prompts[c].size() + max_tokens) << "request " << i;
        EXPECT_EQ(a["finish_reason"], b["finish_reason"]) << "request " << i;
        // The logits of a batch of 4 and of 1 differ in the order of their sums.
        for (size_t t = 1; t < b["logprobs"]["token_logprobs"].size(); ++t)
          worst = std::max(worst, std::fabs(a["logprobs"]["token_logprobs"][t].get<double>() -
                                            b["logprobs"]["token_logprobs"][t].get<double>()));
      }
      EXPECT_EQ(batched[i]["usage"], one["usage"]) << "request " << i;
      EXPECT_EQ(batched[i]["id"], one["id"]) << "request " << i;
    }
    EXPECT_LE(worst, 1e-5);
    EXPECT_EQ(batched[1]["choices"].size(), 2u);
  }
}

}  // namespace
}  // namespace trident

namespace trident {
namespace {

// Seeds in a batch apply in order (greedy requests draw nothing): a sampled request after a
// batch whose requests carry seeds 5 then 7 draws as after them one by one, and as after
// seed 7 alone; after the batch in the other order, as after seed 5.
TEST(RequestBatches, SeedsApplyInOrder) {
  Service s;
  std::vector<PreparedRequest> r = {completion(2, 0.0, {{1, 2}}), completion(2, 0.0, {{3}})};
  r[0].completions.seed = 5;
  r[1].completions.seed = 7;
  r[1].completions.top_k = 1;  // greedy by top_k 1 first in no batch, and
  r[1].completions.temperature = 1.0;
  r[1].completions.echo = false;  // echo differs within the batch: read per request
  PreparedRequest sampled = completion(4, 1.0, {{4, 5}});
  TextGenerationService together = s.make(12000), one_by_one = s.make(12000), seven = s.make(12000);
  ASSERT_EQ(together.batches(r), (std::vector<std::vector<size_t>>{{0, 1}}));
  const auto batched = together.run_batch({&r[0], &r[1]});
  one_by_one.run(r[0]);
  const nlohmann::json second = one_by_one.run(r[1]);
  EXPECT_EQ(batched[1]["choices"][0]["text"], second["choices"][0]["text"]);
  EXPECT_FALSE(batched[1]["choices"][0]["text"].get<std::string>().empty());
  PreparedRequest seven_only = r[1];
  seven.run(seven_only);
  const auto a = together.run(sampled)["choices"], b = one_by_one.run(sampled)["choices"],
             c = seven.run(sampled)["choices"];
  EXPECT_EQ(a[0]["text"], b[0]["text"]);
  EXPECT_EQ(a[0]["text"], c[0]["text"]);
  // The other order leaves seed 5 in force: the draws after it are seed 5's.
  TextGenerationService reversed = s.make(12000), five = s.make(12000);
  reversed.run_batch({&r[1], &r[0]});
  five.run(r[0]);
  EXPECT_EQ(reversed.run(sampled)["choices"], five.run(sampled)["choices"]);
}

}  // namespace
}  // namespace trident

namespace trident {
namespace {

// n 3 over two prompts answers as the six prompts a, a, a, b, b, b with the same seed: the
// same texts in that order, indices 0..5, the same completion tokens, the prompts' tokens
// counted once each.
TEST(CompletionsChoices, NChoicesAreThePromptRepeatedNTimes) {
  Service s;
  TextGenerationService with_n = s.make(12000), repeated = s.make(12000);
  const nlohmann::json a = with_n.run(with_n.prepare(
      Endpoint::kCompletions, R"({"prompt": [[1, 2], [3]], "n": 3, "max_tokens": 4, "temperature": 1, "seed": 5})"));
  const nlohmann::json b = repeated.run(repeated.prepare(
      Endpoint::kCompletions,
      R"({"prompt": [[1, 2], [1, 2], [1, 2], [3], [3], [3]], "max_tokens": 4, "temperature": 1, "seed": 5})"));
  ASSERT_EQ(a["choices"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["text"], b["choices"][i]["text"]) << "choice " << i;
  }
  EXPECT_NE(a["choices"][0]["text"], a["choices"][1]["text"]);  // three draws, not one
  EXPECT_EQ(a["usage"]["completion_tokens"], b["usage"]["completion_tokens"]);
  EXPECT_EQ(a["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(b["usage"]["prompt_tokens"], 9);
}

// best_of 4, n 2 draws what n 4 draws (the same seed) and keeps the two of the highest mean
// log-probability of their tokens (computed here from n 4's token_logprobs), most likely
// first, re-indexed; its usage counts all four; without logprobs asked, none come back.
TEST(CompletionsChoices, BestOfKeepsTheMostLikely) {
  Service s;
  TextGenerationService all = s.make(12000), best = s.make(12000);
  const nlohmann::json four = all.run(all.prepare(
      Endpoint::kCompletions,
      R"({"prompt": [[5, 6, 7]], "n": 4, "max_tokens": 5, "temperature": 1.5, "seed": 9, "logprobs": 0})"));
  const nlohmann::json two = best.run(best.prepare(
      Endpoint::kCompletions, R"({"prompt": [[5, 6, 7]], "n": 2, "best_of": 4, "max_tokens": 5, "temperature": 1.5, "seed": 9})"));
  ASSERT_EQ(four["choices"].size(), 4u);
  std::vector<std::pair<double, size_t>> means;
  for (size_t j = 0; j < 4; ++j) {
    const nlohmann::json& lp = four["choices"][j]["logprobs"]["token_logprobs"];
    double sum = 0;
    for (const auto& x : lp) sum += x.get<double>();
    means.emplace_back(-sum / static_cast<double>(lp.size()), j);  // ascending: most likely first
  }
  std::stable_sort(means.begin(), means.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  ASSERT_EQ(two["choices"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(two["choices"][i]["index"], i);
    EXPECT_EQ(two["choices"][i]["text"], four["choices"][means[i].second]["text"]) << "choice " << i;
    EXPECT_TRUE(two["choices"][i]["logprobs"].is_null());
  }
  EXPECT_EQ(two["usage"], four["usage"]);
}

// The chunks each request's client received, written and read again as a client reads them.
struct Clients {
  std::vector<std::vector<nlohmann::json>> chunks;
  std::vector<StreamClient> clients;
  explicit Clients(size_t requests) : chunks(requests) {
    for (size_t i = 0; i < requests; ++i)
      clients.push_back({[this, i](const nlohmann::json& c) { chunks[i].push_back(nlohmann::json::parse(response_body(c))); },
                         nullptr});
  }
};

// Greedy /completions requests of two prompts ([1, 2] and [3]) and max_tokens each, streamed
// or not, that batches() puts in one batch.
std::vector<PreparedRequest> one_greedy_batch(const TextGenerationService& service, int max_tokens,
                                              const std::vector<bool>& streamed) {
  std::vector<PreparedRequest> r;
  for (bool stream : streamed)
    r.push_back(service.prepare(Endpoint::kCompletions, R"({"prompt": [[1, 2], [3]], "temperature": 0, "max_tokens": )" +
                                                            std::to_string(max_tokens) +
                                                            R"(, "stream": )" + (stream ? "true}" : "false}")));
  std::vector<size_t> all(r.size());
  std::iota(all.begin(), all.end(), size_t{0});
  EXPECT_EQ(service.batches(r), std::vector<std::vector<size_t>>{all});
  return r;
}

// A streamed answer's chunks, joined as a client joins them: each choice's text, logprobs
// lists and finish_reason (in order of index), and the usage chunk's usage (null without).
nlohmann::json joined(const std::vector<nlohmann::json>& chunks) {
  nlohmann::json choices = nlohmann::json::array(), usage = nullptr;
  for (const nlohmann::json& c : chunks) {
    if (c["choices"].empty()) {
      usage = c["usage"];
      continue;
    }
    const nlohmann::json& part = c["choices"][0];
    const size_t i = part["index"];
    while (choices.size() <= i) choices.push_back({{"index", choices.size()}, {"text", ""}, {"logprobs", nullptr},
                                                   {"finish_reason", nullptr}});
    nlohmann::json& choice = choices[i];
    EXPECT_TRUE(choice["finish_reason"].is_null()) << "a chunk after choice " << i << "'s last";
    choice["text"] = choice["text"].get<std::string>() + part["text"].get<std::string>();
    choice["finish_reason"] = part["finish_reason"];
    if (part["logprobs"].is_null()) continue;
    if (choice["logprobs"].is_null()) choice["logprobs"] = part["logprobs"];
    else
      for (auto& [list, values] : part["logprobs"].items())
        for (const nlohmann::json& v : values) choice["logprobs"][list].push_back(v);
  }
  return {{"choices", choices}, {"usage", usage}};
}

// Streamed, a request's chunks join to the answer it gets unstreamed with the same seed, for
// sampled choices (n 2) with stop strings, echo and logprobs, and greedy requests decoded
// together with one that is not streamed (each sink gets its own request's chunks).
TEST(CompletionsStream, ChunksJoinToTheWholeAnswer) {
  Service s;
  const std::vector<std::string> bodies = {
      R"({"prompt": [[5, 6, 7], [8]], "n": 2, "max_tokens": 5, "temperature": 1.5, "seed": 4,
          "stop": ["A", "B", "C", "12"]})",
      R"({"prompt": [[9, 10]], "max_tokens": 5, "temperature": 1, "seed": 2, "echo": true, "logprobs": 2})",
      R"({"prompt": [[17]], "max_tokens": 7, "temperature": 2, "seed": 3, "top_k": 40})",
  };
  for (const std::string& body : bodies) {
    TextGenerationService whole = s.make(12000), streamed = s.make(12000);
    const nlohmann::json expected = nlohmann::json::parse(response_body(whole.run(whole.prepare(Endpoint::kCompletions, body))));
    std::string with_stream = body;
    with_stream.insert(1, R"("stream": true, "stream_options": {"include_usage": true}, )");
    const PreparedRequest p = streamed.prepare(Endpoint::kCompletions, with_stream);
    Clients clients(1);
    const nlohmann::json response = streamed.run_batch({&p}, clients.clients)[0];
    const nlohmann::json got = joined(clients.chunks[0]);
    EXPECT_EQ(got["choices"], expected["choices"]) << body;
    if (body == bodies[0]) {  // (the seed makes two of its choices end at a stop string)
      EXPECT_EQ(std::count_if(got["choices"].begin(), got["choices"].end(),
                              [](const nlohmann::json& c) { return c["finish_reason"] == "stop"; }), 2);
    }
    EXPECT_EQ(got["usage"], expected["usage"]) << body;
    EXPECT_EQ(clients.chunks[0].front()["id"], response["id"]);
    EXPECT_EQ(clients.chunks[0].back()["choices"], nlohmann::json::array());  // the usage chunk last
  }
  // Three greedy requests decoded as one batch, the first and last streamed.
  TextGenerationService service = s.make(12000);
  const std::vector<PreparedRequest> r = one_greedy_batch(service, 3, {true, false, true});
  Clients clients(3);
  clients.clients[1] = {};
  const std::vector<nlohmann::json> answers = service.run_batch({&r[0], &r[1], &r[2]}, clients.clients);
  EXPECT_TRUE(clients.chunks[1].empty());
  for (size_t i : {0, 2}) {
    const nlohmann::json got = joined(clients.chunks[i]);
    EXPECT_EQ(got["choices"], nlohmann::json::parse(response_body(answers[i]))["choices"]) << "request " << i;
    EXPECT_TRUE(got["usage"].is_null());
    for (const nlohmann::json& c : clients.chunks[i]) EXPECT_FALSE(c.contains("usage"));
  }
}

// A streamed request whose client leaves draws no more from the next decoding step on; the
// requests decoded beside it answer as they would alone. Greedy, three requests in one batch:
// the middle one streamed, its client gone after its third chunk (a chunk a token: no stop
// strings, and the model's tokens are whole characters).
TEST(CompletionsStream, AClientThatLeavesEndsItsRequestOnly) {
  Service s;
  TextGenerationService service = s.make(12000), alone = s.make(12000);
  const std::vector<PreparedRequest> r = one_greedy_batch(service, 6, {false, true, false});
  Clients clients(3);
  clients.clients[0] = clients.clients[2] = {};
  int polls = 0;  // the client is asked once a sequence a step: it leaves once 3 chunks are sent
  clients.clients[1].left = [&] {
    ++polls;
    return clients.chunks[1].size() >= 3;
  };
  const std::vector<nlohmann::json> answers = service.run_batch({&r[0], &r[1], &r[2]}, clients.clients);
  EXPECT_GT(polls, 0);
  const nlohmann::json cut = nlohmann::json::parse(response_body(answers[1]));
  const nlohmann::json whole = nlohmann::json::parse(response_body(alone.run(r[1])));
  ASSERT_EQ(cut["choices"].size(), 2u);
  // Its choices' first tokens were drawn in the prompts' pass (the shorter prompt's at its end);
  // then each step drew one token for each until the client had 3 chunks: 2 or 3 tokens each.
  const int64_t drawn = cut["usage"]["completion_tokens"];
  EXPECT_GE(drawn, 3);
  EXPECT_LE(drawn, 6);
  EXPECT_EQ(whole["usage"]["completion_tokens"], 12);
  for (size_t c = 0; c < 2; ++c) {
    const std::string text = cut["choices"][c]["text"], full = whole["choices"][c]["text"];
    EXPECT_LT(text.size(), full.size()) << "choice " << c;
    EXPECT_EQ(full.substr(0, text.size()), text) << "choice " << c;  // the same greedy draws, cut short
  }
  for (size_t i : {0, 2})
    EXPECT_EQ(answers[i]["choices"], alone.run(r[i])["choices"]) << "request " << i;
}

}  // namespace
}  // namespace trident
