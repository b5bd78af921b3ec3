// TextGenerationService: the work behind Megatron's text-generation API (PUT /api) and the
// OpenAI-style completions endpoint (POST /completions) on one model, apart from HTTP
// (tools/text_generation_server_main.cpp serves them). A request is read and checked
// (prepare: the endpoint's checks, then its prompts' lengths against the model) and then
// run: its prompts decoded together (generate_tokens), or scored (tokens_to_generate 0),
// or searched by beams. /api answers as Megatron answers:
//   {"text": [prompt + generation, ...], "segments": [[one string per token], ...],
//    "logprobs": [[log-probability of each token after the first], ...] or null}
// ("scores" instead of "logprobs" for beam search). "text" holds the token that ended a
// sequence (<|endoftext|>, or the newline of stop_on_eol) as Megatron's does; the
// log-probabilities are those of the model's logits at temperature 1, prompt tokens included.
// /completions answers as OpenAI's legacy completions API (and Megatron's newer server):
//   {"id", "object": "text_completion", "created", "model", "usage": {...},
//    "choices": [{"index", "text", "finish_reason": "stop" or "length",
//                 "logprobs": {"tokens", "token_logprobs", "top_logprobs", "text_offset"} or null}]}
// or, with stream, as the chunks of completion_stream.h.
// With n, each prompt's n choices come in a row (index: prompt i's j-th is i n + j); with
// best_of, best_of are drawn and the n of the highest mean log-probability kept.
// "text" is the completion (after the prompt with echo), without the <|endoftext|> or stop
// string that ended it; with echo the log-probabilities start at the prompt's first token
// (None: nothing predicts it); "text_offset" counts characters from the prompt's start;
// "top_logprobs" holds the `logprobs` most likely tokens at each position, computed as the
// token's own, so a greedy token's equals the largest (lm-evaluation-harness's is_greedy).
//
// Where trident differs from Megatron: each prompt of a batch draws at most
// tokens_to_generate tokens (Megatron lets a shorter prompt draw up to the longest prompt's
// length + tokens_to_generate); errors are ApiErrors for HTTP 400 (Megatron's ValueErrors
// come back with status 200), and its length messages end with the numbers (": 1000 + 64
// tokens, 1024 at most"); --max-tokens-to-oom also bounds beam search (beam_width x
// length); a beam hypothesis ends with its stop token (Megatron's, with <|endoftext|>
// padding to the longest).
//
// Tensor parallelism: every rank of the TP group holds a service over its share of the
// model; rank 0 prepares each request first (a refused one goes no further) and forms the
// batches, and the ranks then run the same batches in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "data/tokenizer.h"
#include "infer/completion_choice.h"
#include "infer/completion_stream.h"
#include "infer/completions_request.h"
#include "infer/generate.h"
#include "infer/text_generation_request.h"
#include "model/config.h"
#include "model/param_store.h"
#include "parallel/comm.h"

namespace trident {

// The tokens Megatron's options name, as the tokenizer spells them (-1: not a single token).
struct SpecialTokens {
  int32_t eod = -1, newline = -1, double_newline = -1, colon = -1;  // GPT-2: 50256, 198, 628, 25
};
SpecialTokens special_tokens(const Tokenizer& tokenizer);

// Megatron's end of a sampled sequence for a request: with stop_on_double_eol "\n\n", or "\n"
// after "\n"; else with stop_on_eol "\n" or "\n\n"; else <|endoftext|> (so with either
// option <|endoftext|> does not end it).
std::function<bool(const std::vector<int32_t>&, int64_t)> request_stop_rule(const TextGenerationRequest& r,
                                                                            const SpecialTokens& t);
// prevent_newline_after_colon: no "\n" right after ":" (its logit -1e10). Null without it.
std::function<void(int32_t, float*)> request_logit_rule(const TextGenerationRequest& r, const SpecialTokens& t);

// The two endpoints: Megatron's PUT /api, and the OpenAI-style POST /completions.
enum class Endpoint { kApi, kCompletions };

struct PreparedRequest {
  Endpoint endpoint = Endpoint::kApi;
  TextGenerationRequest request;          // kApi's
  CompletionsRequest completions;         // kCompletions'
  std::vector<std::vector<int32_t>> prompts;  // tokenized (with <|endoftext|> first for add_BOS)
  bool no_log() const { return endpoint == Endpoint::kApi && request.no_log; }
};

// A streamed /completions request's client, on rank 0: where its chunks go, and whether it
// has left (polled between decoding steps; null: never). A request whose client left draws
// no more, and its answer is the tokens drawn until then.
struct StreamClient {
  CompletionStream::Sink sink;
  std::function<bool()> left;
};

class TextGenerationService {
 public:
  // `cfg.seq_length`: the longest prompt + generation a request may ask for (the server's
  // default is the model's learned positions, Megatron's limit). `seed`: the generator of
  // requests without a random_seed. `max_tokens_to_oom`: Megatron's --max-tokens-to-oom,
  // the most prompts x (longest prompt + tokens_to_generate) one request may decode.
  TextGenerationService(const ModelConfig& cfg, Backend& backend, const ParamStore& params, const Tokenizer& tokenizer,
                        Comm* tp_comm, uint64_t seed, int64_t max_tokens_to_oom);

  // The request in `body` to `endpoint`, checked and tokenized; ApiError with the reason
  // otherwise. No collective.
  PreparedRequest prepare(Endpoint endpoint, const std::string& body) const;

  // The response to a prepared request. Collective over the TP group.
  nlohmann::json run(const PreparedRequest& r);

  // Requests waiting together, in order, split into batches decoded as one (run_batch):
  // consecutive /completions requests that are greedy (temperature 0 or top_k 1: no draws,
  // so no answer depends on the others) and decode alike (max_tokens, logprobs, stop
  // strings), up to --max-tokens-to-oom tokens in all, whose prompt lengths differ by at
  // most max(16, the shortest prompt's length); every other request alone. Each batch is a
  // list of indices into `requests`. (A batch feeds its prompts in passes, shorter ones
  // padded to the longest, then each sequence's draws one step each at its own length.)
  std::vector<std::vector<size_t>> batches(const std::vector<PreparedRequest>& requests) const;

  // The responses to one of batches()' batches, in order: the same as run() on each alone,
  // decoded together. Collective over the TP group. A /completions request with stream and a
  // client (clients[i], for batch[i]; only rank 0 has them) also sends its chunks to the
  // client's sink as its tokens are drawn (completion_stream.h); its response then is the
  // whole answer, unsent. Once its client has left it draws no more: with tensor
  // parallelism rank 0 tells the other ranks at each decoding step of a batch that streams.
  std::vector<nlohmann::json> run_batch(const std::vector<const PreparedRequest*>& batch,
                                        const std::vector<StreamClient>& clients = {});

 private:
  PreparedRequest prepare_api(const std::string& body) const;
  PreparedRequest prepare_completions(const std::string& body) const;
  // prompts x length against --max-tokens-to-oom.
  void check_batch_tokens(int64_t batch, int64_t length) const;
  nlohmann::json sample(const PreparedRequest& r);
  nlohmann::json beam_search(const PreparedRequest& r);
  std::vector<nlohmann::json> complete(const std::vector<const PreparedRequest*>& batch,
                                       const std::vector<StreamClient>& clients);

  ModelConfig cfg_;
  Backend& backend_;
  const ParamStore& params_;
  const Tokenizer& tokenizer_;
  Comm* tp_comm_;
  int64_t max_tokens_to_oom_;
  SpecialTokens special_;
  std::mt19937_64 rng_;
  int64_t completions_ = 0;  // completions answered: their ids
};

// Of `count` completions drawn for one prompt (with log-probabilities when n < count), the
// n to answer with (best_of): the highest mean log-probability of the drawn tokens first,
// equal ones in drawing order; all of them, in drawing order, when n == count.
std::vector<size_t> best_completions(const Generation* drawn, size_t count, size_t n);

}  // namespace trident
