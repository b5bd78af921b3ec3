// Gpt2Decoder: GPT-2's forward for generation, one token per sequence per step, with a
// key/value cache per layer so each step attends over everything before it without
// recomputing it. It reads the parameters of a ParamStore, the same tensors training uses,
// and calls the Backend ops only (CPU or CUDA).
//
// Tensor parallelism (a ParamStore of tp > 1 ranks, with their TP group's Comm): each rank
// holds Megatron's share, as in training: its heads of the QKV projection and of the cache,
// its columns of the MLP, its rows of the vocabulary. The embedding and the two row-parallel
// projections are summed over the group (rank 0 adds the positions and the biases), and the
// logits are gathered, so every rank returns the same logits, bit for bit.
//
// step() feeds the next token of each of the B sequences and returns the logits of the token
// after it; forward() feeds several tokens of each sequence in one pass (a prompt: the GEMMs
// see B x T rows instead of B, and the LM head only the rows whose logits are wanted). Each
// sequence has its own next position: the same for all after a reset, then moved by
// set_position (prompts of different lengths fed in one padded pass, each then decoding at
// its own length: the attention takes per-row positions, the position embedding rows are
// gathered per sequence). The same numbers as the training forward on the whole
// sequence, up to the order of floating-point sums (tests/unit/infer). step_greedy() is a
// step whose logits stay on the device: it returns each sequence's most likely next token
// (the backend's logits_argmax; with TP the ranks' candidates are compared on the host);
// step_sampled() likewise returns sampled tokens (the backend's sample_logits; with TP on
// every rank's logits, gathered on the device).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "model/config.h"
#include "model/param_store.h"
#include "parallel/comm.h"

namespace trident {

class Gpt2Decoder {
 public:
  // `params`: this rank's parameters (all of them at tp 1), in cfg.dtype. `max_positions`:
  // cache length (at most cfg.max_position_embeddings). `tp_comm`: the TP group, needed
  // when params.tp() > 1 (collective then: every rank of it steps together). `max_chunk`:
  // the most tokens per sequence one forward() feeds (activations are sized for it).
  Gpt2Decoder(const ModelConfig& cfg, Backend& backend, const ParamStore& params, int batch, int max_positions,
              Comm* tp_comm = nullptr, int max_chunk = 1);

  // Feeds tokens[b] at position position(b) of sequence b and returns the next-token
  // logits, [batch, vocab_size] row-major on the host (padding columns left out).
  const std::vector<float>& step(const std::vector<int32_t>& tokens) { return forward(tokens, 1, 1); }
  // The same step, returning each sequence's most likely next token (the first of equal
  // logits, as most_likely(row, V, 1) on step()'s logits) instead of its logits: B ids
  // leave the device, not B rows of logits.
  const std::vector<int32_t>& step_greedy(const std::vector<int32_t>& tokens);
  // The same step, each sequence's next token drawn on the device (Backend::sample_logits)
  // by the rule's temperature and top-k and draws[b]'s uniform and top-p: the token that
  // draw_token(step()'s row b, V, rule with draws[b].top_p, draws[b].uniform) gives (on a GPU
  // up to float rounding at a boundary between two tokens). rule.temperature > 0; rule.top_p
  // is not read (each row's is in draws). With TP the ranks' logits are gathered on the
  // device and every rank draws the same tokens from the same uniforms.
  const std::vector<int32_t>& step_sampled(const std::vector<int32_t>& tokens, const DrawRule& rule,
                                           const std::vector<RowDraw>& draws);
  // Feeds T tokens (1 <= T <= max_chunk) of each sequence, tokens[b * T + t] at position
  // position(b) + t, and returns the next-token logits after the last `keep` (0 <= keep <= T)
  // of them: [batch, keep, vocab_size] row-major on the host.
  const std::vector<float>& forward(const std::vector<int32_t>& tokens, int T, int keep);
  // The same, returning the logits after the fed tokens `kept` lists (rows b * T + t of the
  // pass, increasing): [kept.size(), vocab_size]. Prompts of different lengths keep each
  // sequence's own positions.
  const std::vector<float>& forward(const std::vector<int32_t>& tokens, int T, const std::vector<int64_t>& kept);
  // Feeds positions position() .. length - 1 of each sequence's prompt (prompts[b * length +
  // t]: the prompts batch-major, `length` tokens each; every sequence at position()) in
  // passes of max_chunk positions, and returns the next-token logits after the last:
  // [batch, vocab_size].
  const std::vector<float>& prefill(const std::vector<int32_t>& prompts, int64_t length);
  // The next position of every sequence; an InternalError when they differ.
  int position() const;
  int position(int b) const { return pos_.at(static_cast<size_t>(b)); }
  // Sequence b's next token goes at `position` (0 <= position <= max_positions()): what its
  // cache holds from there on is overwritten as it goes (a padded prompt's tail, or tokens
  // to feed again).
  void set_position(int b, int position);
  int max_positions() const { return max_pos_; }
  int batch() const { return B_; }
  int max_chunk() const { return max_chunk_; }
  void reset();  // start new sequences at position 0 (the caches are overwritten as they go)
  // Sequence b continues what sequence rows[b] held (beam search keeps the best beams):
  // row b of every layer's cache, and its position, become row rows[b]'s.
  void reorder(const std::vector<int>& rows);

 private:
  Tensor p(const std::string& name) const { return params_.param(name); }
  // residual += branch, then the LayerNorm named `ln` (its .weight/.bias) of the result; the
  // first `rows` rows of the buffers.
  void residual_norm(const Tensor& branch, const std::string& ln, int64_t rows);
  void tp_sum(const Tensor& t) const;  // over the TP group
  // Row-parallel projection: out = in W^T (+ bias, added once by TP rank 0), summed over TP.
  void row_parallel(const Tensor& out, const Tensor& in, const std::string& weight, const std::string& bias);
  // Feeds T tokens of each sequence (forward's checks and embedding, the layers, ln_f) and
  // moves the positions on; returns ln_f's output [B T, C].
  Tensor run_layers(const std::vector<int32_t>& tokens, int T);
  // The LM head on `rows` rows of ln_f's output (tied to wte): this rank's logits
  // [rows, vocab_local] on the device.
  Tensor head_logits(const Tensor& in, int64_t rows);
  // head_logits, then every TP rank's logits -> logits_host_ [rows, vocab_size].
  void lm_head(const Tensor& in, int64_t rows);
  // The rows `kept` of the pass's ln_f output `ln` [N, C], gathered (runs of consecutive rows
  // copied at once; one run is used in place).
  Tensor gather_rows(const Tensor& ln, const std::vector<int64_t>& kept);
  // The first `rows` rows of a [B * max_chunk, width] activation buffer.
  static Tensor rows_of(const Buffer& b, int64_t rows, int64_t width);
  // The position embedding rows of a pass of T tokens a sequence, for embedding_forward:
  // wpe's rows pos .. pos + T - 1 as they are when every sequence is at pos (`uniform`), else gathered
  // per sequence into wpe_rows_ (B T rows; a decoding step's by one gather from row_pos_,
  // which must hold the positions). Empty on TP ranks other than 0 (rank 0 adds them).
  Tensor position_rows(int T, bool uniform);
  bool positions_agree() const;  // every sequence at the same next position
  void make_draw_buffers();  // best_values_ and best_ids_, on the first step that draws on the device

  ModelConfig cfg_;
  Backend& be_;
  const ParamStore& params_;
  Comm* tp_comm_;
  int tp_, tp_rank_;
  int B_, max_pos_, max_chunk_, C_, D_;
  int Hl_, Fl_;                    // this rank's heads and MLP columns
  int64_t vocab_local_, vocab_start_;  // this rank's rows of the padded vocabulary
  std::vector<int> pos_;                   // each sequence's next position
  Buffer row_pos_;                         // I32 [B]: pos_ on the device, for per-row attention
  std::vector<Buffer> k_cache_, v_cache_;  // per layer [B, max_pos, H, D]
  Buffer reorder_scratch_;                 // one layer's cache, made by the first reorder()
  // Activations of B * max_chunk rows.
  Buffer tokens_, x_, ln_, ln_mean_, ln_rstd_, qkv_, att_, proj_, fc_, gelu_;
  Buffer wpe_rows_;  // position_rows' gathered rows, made when sequences first differ
  // The LM head's rows: its input gathered from the kept positions, and its logits; both
  // (and the host copies) grow to the most rows a call keeps.
  Buffer head_in_, logits_;
  std::vector<unsigned char> logits_bytes_;
  std::vector<float> logits_local_, logits_all_;  // [rows, vocab_local]; every rank's, rank-major
  std::vector<float> logits_host_;
  Buffer gathered_logits_;  // step_sampled's with TP: every rank's [B, vocab_local] logits, rank-major
  Buffer best_values_, best_ids_;  // step_greedy's logits_argmax of this rank's logits (step_sampled's ids), [B]
  // step_greedy's candidates on the host: this rank's values and ids (the result at tp 1, and
  // step_sampled's), every rank's, rank-major.
  std::vector<float> candidate_values_, all_values_;
  std::vector<int32_t> drawn_ids_, all_ids_;
  std::vector<int64_t> kept_scratch_;  // forward(tokens, T, keep)'s rows
};

// Tokens per sequence that one forward() over `length` prompt positions of `batch` sequences
// should feed: at most 8192 rows (batch x chunk) a pass, so that a batch's prompts go in one
// pass from position 0 where they fit (the CUDA backend's flash kernels take such a pass;
// later passes read each cached key once per query), at the price of activations for 8192
// rows (~15 hidden-size values a row: 1.5 GB at gpt2-16b's 6144 in bf16); and 256 rows when
// every position's logits are kept (they come to the host as floats: at V = 50257, 200 KB a
// row, several copies); at least 1, at most `length`. `requested` above 0 is the caller's
// pass length (DecodeOptions::prefill_chunk), capped at `length`.
int prefill_chunk(int batch, int64_t length, bool all_logits, int64_t requested = 0);

}  // namespace trident
