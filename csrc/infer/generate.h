// Continuing token sequences with Gpt2Decoder: the loop behind trident-generate's prompts
// and unconditional samples. A batch of contexts of one length is fed in passes of many
// positions (prefill); then each sequence draws its next tokens, one position a step, until
// it draws <|endoftext|> (unless told to ignore it), has `max_new_tokens`, or context +
// generated fills the model's sequence length. A step whose logits are wanted for nothing
// else (no log-probabilities, no adjust_logits) draws on the device (Gpt2Decoder::step_greedy,
// or step_sampled with the uniforms drawn here): the same tokens, B ids to the host instead
// of B rows of logits.
//
// The length rule: a sequence never holds more than cfg.seq_length tokens, context
// included, so every token of a sample has a position the model was trained at and the
// whole sample can be read by the model again (scored, or cut and continued). This is
// Megatron-DeepSpeed's rule (sample_sequence_batch: the last token at index
// seq_length - 1). The last token drawn is never fed back, so the decoder's cache holds one
// position less.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "infer/sampler.h"
#include "model/config.h"
#include "model/param_store.h"
#include "parallel/comm.h"

namespace trident {

struct GenerationOptions {
  SamplingOptions sampling;
  int64_t max_new_tokens = 128;  // per sequence (--out-seq-length); at least 1
  int32_t eod = 50256;           // <|endoftext|>: ends a sequence and is not kept
  bool stop_at_eod = true;       // false: <|endoftext|> is kept like any token (--ignore-eos)
};

struct Continuation {
  std::vector<int32_t> tokens;  // the new tokens, without a final <|endoftext|>
  bool finished = false;        // ended at <|endoftext|>, not at a length limit
};

// How many tokens a context of `context_length` may still grow by: at least 1 when the
// context is shorter than cfg.seq_length, else 0.
int64_t room_after(const ModelConfig& cfg, int64_t context_length);

// Continues every context (the same length, at least 1, below cfg.seq_length) together.
// Draws come from `rng` in sequence order at each step, skipping finished sequences, so a
// seed gives the same tokens for the same batch. With tensor parallelism (params of tp > 1
// ranks and their group's `tp_comm`) every rank of the group calls it with the same
// arguments and seed: the decoder gives them the same logits bit for bit, so they draw the
// same tokens.
std::vector<Continuation> continue_sequences(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                                             const std::vector<std::vector<int32_t>>& contexts,
                                             const GenerationOptions& o, std::mt19937_64& rng,
                                             Comm* tp_comm = nullptr);

// The general loop, behind continue_sequences and the text-generation server's requests
// (Megatron's generate_tokens_probs_and_return_on_first_stage): prompts of any lengths
// decoded together, each fed its own tokens and then its draws, so each continues as it
// would alone (what Megatron's `started` mask gives); optional log-probabilities of every
// token after the first, prompt tokens included (scoring). The prompts go through the model
// in passes of many positions, the shorter ones padded to the longest; then each sequence
// feeds its draws one position a step at its own length (Megatron instead walks every
// sequence one position a step from the shortest prompt's end).
struct Generation;

struct DecodeOptions {
  SamplingOptions sampling;
  // Tokens drawn per prompt at most, and at most room_after(prompt length). 0 draws none:
  // the prompts are only scored (with `logprobs`).
  int64_t max_new_tokens = 0;
  // Megatron's top_p_decay and top_p_bound: a top-p above 0 becomes top_p * decay (when
  // decay > 0), and no less than the bound (when bound > 0), once for each position from
  // the shortest prompt's end on: the draw after position p uses the top-p decayed for the
  // positions shortest .. p, as in Megatron's loop, whatever the sequence's own length.
  double top_p_decay = 0, top_p_bound = 0;
  bool logprobs = false;
  // With `logprobs`: also the k most likely tokens at each position (OpenAI's logprobs k).
  int top_logprobs = 0;
  // Whether a sequence ends with the token just drawn (it is its last token): the sequence
  // so far, that token included, and its prompt's length. Null: only the length limits end
  // a sequence.
  std::function<bool(const std::vector<int32_t>&, int64_t)> ends;
  // Called on the logits after each token fed from the shortest prompt's last on (that
  // token, and its row of cfg.vocab_size logits) before they are scored or drawn from:
  // Megatron's prevent_newline_after_colon, which changes the logits of its generation
  // loop, not those of its first forward over the shortest prompt. Null: the logits as
  // they are.
  std::function<void(int32_t, float*)> adjust_logits;
  // Called after each token drawn for sequence b (appended to its Generation, `finished` set,
  // its log-probabilities recorded), in drawing order; `last`: b draws no more (it ended, or
  // reached its length limit). Not called for a sequence that draws nothing. It only watches:
  // what it does changes no draw (a streamed answer, completion_stream.h). Null: none.
  std::function<void(size_t b, const Generation& g, bool last)> on_token;
  // Called before each decoding step (after the prompts' passes) with a flag a sequence, 0 at
  // first. Setting a drawing sequence's flag cancels it: it draws no more (as at its length
  // limit; `cancelled` set, on_token not called again), e.g. a streamed answer whose client
  // left. With tensor parallelism every rank must set the same flags (the text-generation
  // service broadcasts rank 0's). Null: none.
  std::function<void(std::vector<int32_t>& cancel)> poll_cancel;
  // Positions a prefill pass feeds at most; 0: prefill_chunk()'s choice (decoder.h). 1 feeds
  // one position a step, as decoding does.
  int64_t prefill_chunk = 0;
};

struct Generation {
  std::vector<int32_t> tokens;  // the prompt's, then those drawn (the one that ended it included)
  int64_t prompt_length = 0;
  bool finished = false;          // `ends` said so, rather than a length limit
  bool cancelled = false;         // poll_cancel ended it
  std::vector<double> logprobs;   // with `logprobs`: of tokens[i + 1] under the (adjusted)
                                  // logits after tokens[i], natural log, temperature 1
  // With top_logprobs k: after tokens[i], the k most likely tokens and their log-probabilities
  // (computed as `logprobs`, so a greedy token's equals the first), most likely first.
  std::vector<std::vector<std::pair<int32_t, double>>> top_logprobs;
};

// Every prompt at least 1 token and at most cfg.seq_length (below it when tokens are to be
// drawn). Draws come from `rng` in position order in the prompts' passes (each sequence's
// first draw, sequences in order at a position), then a step at a time, sequences in order:
// with prompts of different lengths that is not Megatron's order (position by position), so
// a seed gives other samples than it does there. Collective over `tp_comm` as
// continue_sequences.
std::vector<Generation> generate_tokens(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                                        const std::vector<std::vector<int32_t>>& prompts, const DecodeOptions& o,
                                        std::mt19937_64& rng, Comm* tp_comm = nullptr);

}  // namespace trident
