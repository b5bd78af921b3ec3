#include "infer/decoder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace trident {
namespace {

// A host vector as a CPU tensor of dtype t (the TP group's collectives on the host).
template <typename T>
Tensor host_tensor(std::vector<T>& v, DType t) {
  return Tensor(v.data(), Shape{static_cast<int64_t>(v.size())}, t, Device::Cpu);
}

}  // namespace

int prefill_chunk(int batch, int64_t length, bool all_logits, int64_t requested) {
  const int64_t rows = all_logits ? 256 : 8192;
  return static_cast<int>(
      std::clamp<int64_t>(requested > 0 ? requested : rows / batch, 1, std::max<int64_t>(length, 1)));
}

Gpt2Decoder::Gpt2Decoder(const ModelConfig& cfg, Backend& backend, const ParamStore& params, int batch,
                         int max_positions, Comm* tp_comm, int max_chunk)
    : cfg_(cfg),
      be_(backend),
      params_(params),
      tp_comm_(tp_comm),
      tp_(params.tp()),
      tp_rank_(params.tp_rank()),
      B_(batch),
      max_pos_(max_positions),
      max_chunk_(max_chunk) {
  cfg_.validate(tp_);
  TRIDENT_CHECK(tp_ == 1 || (tp_comm_ && tp_comm_->size() == tp_ && tp_comm_->rank() == tp_rank_),
                "Gpt2Decoder: parameters of TP rank ", tp_rank_, " of ", tp_, " need that TP group's Comm");
  TRIDENT_CHECK(batch > 0, "Gpt2Decoder: batch must be positive");
  TRIDENT_CHECK(max_chunk > 0, "Gpt2Decoder: max_chunk must be positive");
  TRIDENT_CHECK(max_positions > 0 && max_positions <= cfg_.max_position_embeddings, "Gpt2Decoder: ",
                max_positions, " positions for a model of ", cfg_.max_position_embeddings);
  C_ = cfg_.hidden_size;
  D_ = cfg_.head_dim();
  Hl_ = cfg_.num_attention_heads / tp_;
  Fl_ = static_cast<int>(cfg_.ffn_hidden_size() / tp_);
  vocab_local_ = cfg_.padded_vocab_size(tp_) / tp_;
  vocab_start_ = vocab_local_ * tp_rank_;
  const DType dt = cfg_.dtype;
  const int64_t B = B_;
  pos_.assign(static_cast<size_t>(B_), 0);
  row_pos_ = be_.empty({B}, DType::I32);
  for (int l = 0; l < cfg_.num_layers; ++l) {
    k_cache_.push_back(be_.empty({B, max_pos_, Hl_, D_}, dt));
    v_cache_.push_back(be_.empty({B, max_pos_, Hl_, D_}, dt));
  }
  const int64_t rows = B * max_chunk_;
  tokens_ = be_.empty({rows}, DType::I32);
  x_ = be_.empty({rows, C_}, dt);
  ln_ = be_.empty({rows, C_}, dt);
  ln_mean_ = be_.empty({rows}, DType::F32);
  ln_rstd_ = be_.empty({rows}, DType::F32);
  qkv_ = be_.empty({rows, 3 * Hl_ * D_}, dt);
  att_ = be_.empty({rows, Hl_ * D_}, dt);
  proj_ = be_.empty({rows, C_}, dt);
  fc_ = be_.empty({rows, Fl_}, dt);
  gelu_ = be_.empty({rows, Fl_}, dt);
}

Tensor Gpt2Decoder::rows_of(const Buffer& b, int64_t rows, int64_t width) {
  return b.t().flat_slice(0, rows * width).view({rows, width});
}

Tensor Gpt2Decoder::position_rows(int T, bool uniform) {
  if (tp_rank_ != 0) return Tensor();
  const Tensor wpe = p("wpe");
  const auto rows_from = [&](int first) { return wpe.flat_slice(static_cast<int64_t>(first) * C_, int64_t{T} * C_); };
  if (uniform) return rows_from(pos_[0]).view({T, C_});
  // A table of B T rows, row b T + t = wpe[pos_b + t]: embedding_forward adds row n % (B T) = n.
  if (wpe_rows_.empty()) wpe_rows_ = be_.empty({static_cast<int64_t>(B_) * max_chunk_, C_}, wpe.dtype);
  const int64_t n = static_cast<int64_t>(B_) * T;
  const Tensor table = rows_of(wpe_rows_, n, C_);
  if (T == 1)  // a decoding step: one gather launch, wpe's rows at the positions on the device
    be_.embedding_forward(row_pos_.t(), wpe, 0, Tensor(), 1, table);
  else
    for (int b = 0; b < B_; ++b) be_.copy(table.flat_slice(int64_t{b} * T * C_, int64_t{T} * C_), rows_from(pos_[b]));
  return table;
}

void Gpt2Decoder::tp_sum(const Tensor& t) const {
  if (tp_ > 1) tp_comm_->allreduce(t, ReduceOp::Sum);
}

void Gpt2Decoder::row_parallel(const Tensor& out, const Tensor& in, const std::string& weight,
                               const std::string& bias) {
  be_.matmul(out, in, p(weight), tp_rank_ == 0 ? p(bias) : Tensor(), false, true, false);
  tp_sum(out);
}

Tensor Gpt2Decoder::head_logits(const Tensor& in, int64_t rows) {
  const int64_t Vl = vocab_local_;
  if (logits_.empty() || logits_.t().shape[0] < rows) logits_ = be_.empty({rows, Vl}, cfg_.dtype);  // grows
  const Tensor logits = rows_of(logits_, rows, Vl);
  be_.matmul(logits, in, p("wte"), Tensor(), false, true, false);  // tied LM head, this rank's rows
  return logits;
}

void Gpt2Decoder::lm_head(const Tensor& in, int64_t rows) {
  const int64_t V = cfg_.vocab_size, Vl = vocab_local_;
  const Tensor logits = head_logits(in, rows);
  logits_bytes_.resize(logits.nbytes());  // the host copy: lm_head's alone (step_greedy keeps logits on the device)
  be_.copy_to_host(logits_bytes_.data(), logits);
  const size_t n = static_cast<size_t>(rows * Vl);
  logits_local_.resize(n);
  logits_host_.resize(static_cast<size_t>(rows * V));
  to_floats(logits_bytes_.data(), logits.dtype, logits_local_.data(), static_cast<int64_t>(n));
  const float* all = logits_local_.data();  // [tp][rows][vocab_local]: id v on rank v / vocab_local
  if (tp_ > 1) {
    logits_all_.resize(n * static_cast<size_t>(tp_));
    tp_comm_->allgather(host_tensor(logits_local_, DType::F32), host_tensor(logits_all_, DType::F32));
    all = logits_all_.data();
  }
  // Each rank's columns of each row, padding columns left out.
  for (int k = 0; k < tp_; ++k) {
    const int64_t first = k * Vl, count = std::min(Vl, V - first);
    if (count <= 0) break;
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(all + (k * rows + r) * Vl, count, logits_host_.data() + r * V + first);
  }
}

bool Gpt2Decoder::positions_agree() const {
  return std::all_of(pos_.begin(), pos_.end(), [&](int q) { return q == pos_[0]; });
}

int Gpt2Decoder::position() const {
  TRIDENT_CHECK(positions_agree(), "Gpt2Decoder::position: the sequences are at different positions");
  return pos_[0];
}

void Gpt2Decoder::set_position(int b, int position) {
  TRIDENT_CHECK(b >= 0 && b < B_, "Gpt2Decoder::set_position: sequence ", b, " of ", B_);
  TRIDENT_CHECK(position >= 0 && position <= max_pos_, "Gpt2Decoder::set_position: position ", position,
                " outside [0, ", max_pos_, "]");
  pos_[static_cast<size_t>(b)] = position;
}

void Gpt2Decoder::reset() { std::fill(pos_.begin(), pos_.end(), 0); }

void Gpt2Decoder::reorder(const std::vector<int>& rows) {
  TRIDENT_CHECK(static_cast<int>(rows.size()) == B_, "Gpt2Decoder::reorder: ", rows.size(), " rows for ", B_,
                " sequences");
  for (int r : rows) TRIDENT_CHECK(r >= 0 && r < B_, "Gpt2Decoder::reorder: row ", r, " of ", B_);
  std::vector<bool> source(B_, false);  // rows another row takes
  bool moves = false;
  for (int b = 0; b < B_; ++b)
    if (rows[b] != b) source[rows[b]] = moves = true;
  if (!moves) return;
  if (reorder_scratch_.empty()) reorder_scratch_ = be_.empty(k_cache_[0].t().shape, cfg_.dtype);
  const Tensor scratch = reorder_scratch_.t();
  // Each row holds max_pos_ positions; only the first pos_[b] of row b are written so far.
  const int64_t row = scratch.numel() / B_;
  const auto part = [&](const Tensor& t, int b, int positions) {
    return t.flat_slice(b * row, static_cast<int64_t>(positions) * Hl_ * D_);
  };
  for (std::vector<Buffer>* caches : {&k_cache_, &v_cache_})
    for (const Buffer& cache : *caches) {
      for (int b = 0; b < B_; ++b)
        if (source[b]) be_.copy(part(scratch, b, pos_[b]), part(cache.t(), b, pos_[b]));
      for (int b = 0; b < B_; ++b)
        if (rows[b] != b) be_.copy(part(cache.t(), b, pos_[rows[b]]), part(scratch, rows[b], pos_[rows[b]]));
    }
  std::vector<int> moved(pos_.size());
  for (int b = 0; b < B_; ++b) moved[b] = pos_[rows[b]];
  pos_ = std::move(moved);
}

void Gpt2Decoder::residual_norm(const Tensor& branch, const std::string& ln, int64_t rows) {
  const Tensor x = rows_of(x_, rows, C_);
  be_.residual_layernorm_forward(x, branch, x, p(ln + ".weight"), p(ln + ".bias"), rows_of(ln_, rows, C_),
                                 rows_of(ln_mean_, rows, 1).view({rows}), rows_of(ln_rstd_, rows, 1).view({rows}));
}

const std::vector<float>& Gpt2Decoder::forward(const std::vector<int32_t>& tokens, int T, int keep) {
  TRIDENT_CHECK(T >= 1 && keep >= 0 && keep <= T, "Gpt2Decoder::forward: ", T, " tokens, keeping ", keep);
  std::vector<int64_t>& kept = kept_scratch_;  // the last `keep` rows of each sequence
  kept.clear();
  for (int64_t b = 0; b < B_; ++b)
    for (int t = T - keep; t < T; ++t) kept.push_back(b * T + t);
  return forward(tokens, T, kept);
}

Tensor Gpt2Decoder::gather_rows(const Tensor& ln, const std::vector<int64_t>& kept) {
  TRIDENT_CHECK(!kept.empty(), "Gpt2Decoder::gather_rows: no row kept");
  const int64_t n = static_cast<int64_t>(kept.size());
  if (kept.back() - kept.front() + 1 == n)  // one run: ln's rows as they are
    return ln.flat_slice(kept.front() * C_, n * C_).view({n, C_});
  if (head_in_.empty() || head_in_.t().shape[0] < n) head_in_ = be_.empty({n, C_}, cfg_.dtype);
  const Tensor head_in = rows_of(head_in_, n, C_);
  for (int64_t i = 0; i < n;) {
    int64_t run = 1;
    while (i + run < n && kept[i + run] == kept[i] + run) ++run;
    be_.copy(head_in.flat_slice(i * C_, run * C_), ln.flat_slice(kept[i] * C_, run * C_));
    i += run;
  }
  return head_in;
}

const std::vector<float>& Gpt2Decoder::forward(const std::vector<int32_t>& tokens, int T,
                                               const std::vector<int64_t>& kept) {
  const int64_t N = static_cast<int64_t>(B_) * T;  // rows, batch-major: row b * T + t
  for (size_t i = 0; i < kept.size(); ++i)
    TRIDENT_CHECK(kept[i] >= 0 && kept[i] < N && (i == 0 || kept[i] > kept[i - 1]), "Gpt2Decoder::forward: kept row ",
                  kept[i], " of ", N, " (rows increasing)");
  const Tensor ln = run_layers(tokens, T);
  if (kept.empty()) {
    logits_host_.clear();
    return logits_host_;
  }
  lm_head(gather_rows(ln, kept), static_cast<int64_t>(kept.size()));
  return logits_host_;
}

void Gpt2Decoder::make_draw_buffers() {
  if (!best_ids_.empty()) return;
  best_values_ = be_.empty({B_}, DType::F32);
  best_ids_ = be_.empty({B_}, DType::I32);
}

const std::vector<int32_t>& Gpt2Decoder::step_greedy(const std::vector<int32_t>& tokens) {
  const Tensor logits = head_logits(run_layers(tokens, 1), B_);
  const int64_t first = static_cast<int64_t>(tp_rank_) * vocab_local_;
  const int64_t valid = std::min<int64_t>(vocab_local_, cfg_.vocab_size - first);  // < 1: a TP rank of padding
  drawn_ids_.assign(static_cast<size_t>(B_), 0);
  candidate_values_.assign(static_cast<size_t>(B_), NAN);  // a rank of padding offers no candidate
  if (valid >= 1) {
    make_draw_buffers();
    be_.logits_argmax(logits, valid, best_values_, best_ids_);
    be_.copy_to_host(drawn_ids_.data(), best_ids_);
    if (tp_ == 1) return drawn_ids_;
    be_.copy_to_host(candidate_values_.data(), best_values_);
    for (int32_t& id : drawn_ids_) id += static_cast<int32_t>(first);
  }
  // Every rank's candidates; the largest value wins, of equal ones the lower rank's (the
  // lower id). NaN never wins.
  all_values_.resize(static_cast<size_t>(B_) * tp_);
  all_ids_.resize(static_cast<size_t>(B_) * tp_);
  tp_comm_->allgather(host_tensor(candidate_values_, DType::F32), host_tensor(all_values_, DType::F32));
  tp_comm_->allgather(host_tensor(drawn_ids_, DType::I32), host_tensor(all_ids_, DType::I32));
  for (int b = 0; b < B_; ++b) {
    int best = -1;
    for (int k = 0; k < tp_; ++k) {
      const float v = all_values_[static_cast<size_t>(k) * B_ + b];
      if (!std::isnan(v) && (best < 0 || v > all_values_[static_cast<size_t>(best) * B_ + b])) best = k;
    }
    drawn_ids_[b] = best < 0 ? 0 : all_ids_[static_cast<size_t>(best) * B_ + b];
  }
  return drawn_ids_;
}

const std::vector<int32_t>& Gpt2Decoder::step_sampled(const std::vector<int32_t>& tokens, const DrawRule& rule,
                                                      const std::vector<RowDraw>& draws) {
  TRIDENT_CHECK(static_cast<int>(draws.size()) == B_, "Gpt2Decoder::step_sampled: ", draws.size(), " draws for ", B_,
                " sequences");
  Tensor logits = head_logits(run_layers(tokens, 1), B_);
  if (tp_ > 1) {  // every rank's rows of the vocabulary, rank-major: sample_logits's segments
    if (gathered_logits_.empty()) gathered_logits_ = be_.empty({tp_ * B_, vocab_local_}, cfg_.dtype);
    tp_comm_->allgather(logits, gathered_logits_);
    logits = gathered_logits_;
  }
  make_draw_buffers();
  be_.sample_logits(logits, cfg_.vocab_size, rule.temperature, rule.top_k, draws, best_ids_);
  drawn_ids_.resize(static_cast<size_t>(B_));
  be_.copy_to_host(drawn_ids_.data(), best_ids_);
  return drawn_ids_;
}

Tensor Gpt2Decoder::run_layers(const std::vector<int32_t>& tokens, int T) {
  const int64_t N = static_cast<int64_t>(B_) * T;  // rows, batch-major: row b * T + t
  TRIDENT_CHECK(T >= 1 && T <= max_chunk_, "Gpt2Decoder::forward: ", T, " tokens (at most ", max_chunk_, ")");
  TRIDENT_CHECK(static_cast<int64_t>(tokens.size()) == N, "Gpt2Decoder::forward: ", tokens.size(), " tokens for ",
                B_, " sequences of ", T);
  const int largest = *std::max_element(pos_.begin(), pos_.end());
  if (largest + T > max_pos_)
    throw ConfigError("generation reached " + std::to_string(max_pos_) + " positions, the most this model takes");
  for (int32_t t : tokens)
    TRIDENT_CHECK(t >= 0 && t < cfg_.vocab_size, "Gpt2Decoder::forward: token ", t, " outside the vocabulary");
  const Tensor tok = tokens_.t().flat_slice(0, N), x = rows_of(x_, N, C_), ln = rows_of(ln_, N, C_);
  const Tensor mean = rows_of(ln_mean_, N, 1).view({N});
  const Tensor rstd = rows_of(ln_rstd_, N, 1).view({N});
  const Tensor qkv = rows_of(qkv_, N, 3 * Hl_ * D_), att = rows_of(att_, N, Hl_ * D_), proj = rows_of(proj_, N, C_);
  const Tensor fc = rows_of(fc_, N, Fl_), gelu = rows_of(gelu_, N, Fl_);
  be_.copy_from_host(tok, tokens.data());
  // Sequences at positions of their own: the positions go to the device first (the
  // attention kernels and the position rows' gather read them).
  const bool uniform = positions_agree();
  if (!uniform) be_.copy_from_host(row_pos_, pos_.data());
  const DecodePositions at = uniform ? DecodePositions(pos_[0]) : DecodePositions(largest, row_pos_.t());
  // x = wte[token] + wpe[position]: this rank's vocabulary rows (other ids give 0), the
  // position rows added by rank 0 only, summed over TP.
  const Tensor wpe_rows = position_rows(T, uniform);
  be_.embedding_forward(tok, p("wte"), vocab_start_, wpe_rows,
                        wpe_rows.empty() ? T : static_cast<int>(wpe_rows.shape[0]), x);
  tp_sum(x);
  be_.layernorm_forward(x, p("h.0.ln_1.weight"), p("h.0.ln_1.bias"), ln, mean, rstd);
  for (int l = 0; l < cfg_.num_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    be_.matmul(qkv, ln, p(h + "attn.qkv.weight"), p(h + "attn.qkv.bias"), false, true, false);
    be_.attention_decode(qkv.view({B_, T, 3, Hl_, D_}), k_cache_[l], v_cache_[l], at, att.view({B_, T, Hl_, D_}));
    row_parallel(proj, att, h + "attn.proj.weight", h + "attn.proj.bias");
    residual_norm(proj, h + "ln_2", N);
    be_.matmul_bias_gelu(fc, gelu, ln, p(h + "mlp.fc.weight"), p(h + "mlp.fc.bias"), false, true, cfg_.gelu);
    row_parallel(proj, gelu, h + "mlp.proj.weight", h + "mlp.proj.bias");
    residual_norm(proj, l + 1 < cfg_.num_layers ? "h." + std::to_string(l + 1) + ".ln_1" : std::string("ln_f"), N);
  }
  for (int& q : pos_) q += T;
  return ln;
}

const std::vector<float>& Gpt2Decoder::prefill(const std::vector<int32_t>& prompts, int64_t length) {
  const int from = position();
  TRIDENT_CHECK(length > from && static_cast<int64_t>(prompts.size()) == static_cast<int64_t>(B_) * length,
                "Gpt2Decoder::prefill: ", prompts.size(), " tokens for ", B_, " prompts of ", length,
                " from position ", from);
  const std::vector<float>* logits = nullptr;
  std::vector<int32_t> feed;
  while (pos_[0] < length) {
    const int64_t at = pos_[0];
    const int n = static_cast<int>(std::min<int64_t>(max_chunk_, length - at));
    feed.clear();
    for (int b = 0; b < B_; ++b)
      feed.insert(feed.end(), prompts.begin() + b * length + at, prompts.begin() + b * length + at + n);
    logits = &forward(feed, n, at + n == length ? 1 : 0);
  }
  return *logits;
}

}  // namespace trident
