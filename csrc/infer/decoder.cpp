#include "infer/decoder.h"

#include "core/error.h"

namespace trident {
Gpt2Decoder::Gpt2Decoder(const ModelConfig& cfg, Backend& backend, const ParamStore& params, int batch,
                         int max_positions, Comm* tp_comm)
    : cfg_(cfg),
      be_(backend),
      params_(params),
      tp_comm_(tp_comm),
      tp_(params.tp()),
      tp_rank_(params.tp_rank()),
      B_(batch),
      max_pos_(max_positions) {
  cfg_.validate(tp_);
  TRIDENT_CHECK(tp_ == 1 || (tp_comm_ && tp_comm_->size() == tp_ && tp_comm_->rank() == tp_rank_),
                "Gpt2Decoder: parameters of TP rank ", tp_rank_, " of ", tp_, " need that TP group's Comm");
  TRIDENT_CHECK(batch > 0, "Gpt2Decoder: batch must be positive");
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
  for (int l = 0; l < cfg_.num_layers; ++l) {
    k_cache_.push_back(be_.empty({B, max_pos_, Hl_, D_}, dt));
    v_cache_.push_back(be_.empty({B, max_pos_, Hl_, D_}, dt));
  }
  tokens_ = be_.empty({B}, DType::I32);
  x_ = be_.empty({B, C_}, dt);
  ln_ = be_.empty({B, C_}, dt);
  ln_mean_ = be_.empty({B}, DType::F32);
  ln_rstd_ = be_.empty({B}, DType::F32);
  qkv_ = be_.empty({B, 3, Hl_, D_}, dt);
  att_ = be_.empty({B, Hl_, D_}, dt);
  proj_ = be_.empty({B, C_}, dt);
  fc_ = be_.empty({B, Fl_}, dt);
  gelu_ = be_.empty({B, Fl_}, dt);
  logits_ = be_.empty({B, vocab_local_}, dt);
  logits_bytes_.resize(logits_.t().nbytes());
  logits_local_.resize(static_cast<size_t>(B * vocab_local_));
  logits_all_.resize(logits_local_.size() * static_cast<size_t>(tp_));
  logits_host_.resize(static_cast<size_t>(B * cfg_.vocab_size));
}

void Gpt2Decoder::tp_sum(const Buffer& b) const {
  if (tp_ > 1) tp_comm_->allreduce(b.t(), ReduceOp::Sum);
}

void Gpt2Decoder::row_parallel(const Buffer& out, const Tensor& in, const std::string& weight,
                               const std::string& bias) {
  be_.matmul(out, in, p(weight), tp_rank_ == 0 ? p(bias) : Tensor(), false, true, false);
  tp_sum(out);
}

void Gpt2Decoder::gather_logits() {
  be_.copy_to_host(logits_bytes_.data(), logits_);
  for (size_t i = 0; i < logits_local_.size(); ++i)
    logits_local_[i] = load_as_float(logits_bytes_.data(), logits_.t().dtype, static_cast<int64_t>(i));
  if (tp_ > 1) {
    const auto host = [](std::vector<float>& v) {
      return Tensor(v.data(), Shape{static_cast<int64_t>(v.size())}, DType::F32, Device::Cpu);
    };
    tp_comm_->allgather(host(logits_local_), host(logits_all_));
  } else {
    logits_all_ = logits_local_;
  }
  // logits_all_ is [tp][B][vocab_local]: vocabulary id v sits on rank v / vocab_local.
  const int64_t V = cfg_.vocab_size, Vl = vocab_local_;
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t v = 0; v < V; ++v)
      logits_host_[b * V + v] = logits_all_[((v / Vl) * B_ + b) * Vl + v % Vl];
}

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
  // Each row holds max_pos_ positions; only the first pos_ are written so far.
  const int64_t row = scratch.numel() / B_, used = static_cast<int64_t>(pos_) * Hl_ * D_;
  const auto part = [&](const Tensor& t, int b) { return t.flat_slice(b * row, used); };
  for (std::vector<Buffer>* caches : {&k_cache_, &v_cache_})
    for (const Buffer& cache : *caches) {
      for (int b = 0; b < B_; ++b)
        if (source[b]) be_.copy(part(scratch, b), part(cache.t(), b));
      for (int b = 0; b < B_; ++b)
        if (rows[b] != b) be_.copy(part(cache.t(), b), part(scratch, rows[b]));
    }
}

void Gpt2Decoder::residual_norm(const Tensor& branch, const std::string& ln) {
  be_.residual_layernorm_forward(x_, branch, x_, p(ln + ".weight"), p(ln + ".bias"), ln_, ln_mean_, ln_rstd_);
}

const std::vector<float>& Gpt2Decoder::step(const std::vector<int32_t>& tokens) {
  TRIDENT_CHECK(static_cast<int>(tokens.size()) == B_, "Gpt2Decoder::step: ", tokens.size(), " tokens for ", B_,
                " sequences");
  if (pos_ >= max_pos_)
    throw ConfigError("generation reached " + std::to_string(max_pos_) + " positions, the most this model takes");
  for (int32_t t : tokens)
    TRIDENT_CHECK(t >= 0 && t < cfg_.vocab_size, "Gpt2Decoder::step: token ", t, " outside the vocabulary");
  be_.copy_from_host(tokens_, tokens.data());
  // x = wte[token] + wpe[pos]: this rank's vocabulary rows (other ids give 0), the position
  // table's row `pos` as a one-row table (T = 1) added by rank 0 only, summed over TP.
  const Tensor wpe_row =
      tp_rank_ == 0 ? p("wpe").flat_slice(static_cast<int64_t>(pos_) * C_, C_).view({1, C_}) : Tensor();
  be_.embedding_forward(tokens_, p("wte"), vocab_start_, wpe_row, 1, x_);
  tp_sum(x_);
  be_.layernorm_forward(x_, p("h.0.ln_1.weight"), p("h.0.ln_1.bias"), ln_, ln_mean_, ln_rstd_);
  const Tensor none;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    be_.matmul(qkv_.t().view({B_, 3 * Hl_ * D_}), ln_, p(h + "attn.qkv.weight"), p(h + "attn.qkv.bias"), false, true,
               false);
    be_.attention_decode(qkv_, k_cache_[l], v_cache_[l], pos_, att_);
    row_parallel(proj_, att_.t().view({B_, Hl_ * D_}), h + "attn.proj.weight", h + "attn.proj.bias");
    residual_norm(proj_, h + "ln_2");
    be_.matmul_bias_gelu(fc_, gelu_, ln_, p(h + "mlp.fc.weight"), p(h + "mlp.fc.bias"), false, true);
    row_parallel(proj_, gelu_, h + "mlp.proj.weight", h + "mlp.proj.bias");
    residual_norm(proj_, l + 1 < cfg_.num_layers ? "h." + std::to_string(l + 1) + ".ln_1" : std::string("ln_f"));
  }
  be_.matmul(logits_, ln_, p("wte"), none, false, true, false);  // tied LM head, this rank's rows
  gather_logits();
  ++pos_;
  return logits_host_;
}

}  // namespace trident
