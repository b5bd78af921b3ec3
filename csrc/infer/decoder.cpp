#include "infer/decoder.h"

#include "core/error.h"

namespace trident {
Gpt2Decoder::Gpt2Decoder(const ModelConfig& cfg, Backend& backend, const ParamStore& params, int batch,
                         int max_positions)
    : cfg_(cfg), be_(backend), params_(params), B_(batch), max_pos_(max_positions) {
  cfg_.validate(1);
  TRIDENT_CHECK(batch > 0, "Gpt2Decoder: batch must be positive");
  TRIDENT_CHECK(max_positions > 0 && max_positions <= cfg_.max_position_embeddings, "Gpt2Decoder: ",
                max_positions, " positions for a model of ", cfg_.max_position_embeddings);
  C_ = cfg_.hidden_size;
  H_ = cfg_.num_attention_heads;
  D_ = cfg_.head_dim();
  F_ = static_cast<int>(cfg_.ffn_hidden_size());
  vocab_padded_ = cfg_.padded_vocab_size(1);
  const DType dt = cfg_.dtype;
  const int64_t B = B_;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    k_cache_.push_back(be_.empty({B, max_pos_, H_, D_}, dt));
    v_cache_.push_back(be_.empty({B, max_pos_, H_, D_}, dt));
  }
  tokens_ = be_.empty({B}, DType::I32);
  x_ = be_.empty({B, C_}, dt);
  ln_ = be_.empty({B, C_}, dt);
  ln_mean_ = be_.empty({B}, DType::F32);
  ln_rstd_ = be_.empty({B}, DType::F32);
  qkv_ = be_.empty({B, 3, H_, D_}, dt);
  att_ = be_.empty({B, H_, D_}, dt);
  proj_ = be_.empty({B, C_}, dt);
  fc_ = be_.empty({B, F_}, dt);
  gelu_ = be_.empty({B, F_}, dt);
  logits_ = be_.empty({B, vocab_padded_}, dt);
  logits_bytes_.resize(logits_.t().nbytes());
  logits_host_.resize(static_cast<size_t>(B * cfg_.vocab_size));
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
  // x = wte[token] + wpe[pos]: the position table's row `pos` as a one-row table (T = 1).
  const Tensor wpe_row = p("wpe").flat_slice(static_cast<int64_t>(pos_) * C_, C_).view({1, C_});
  be_.embedding_forward(tokens_, p("wte"), 0, wpe_row, 1, x_);
  be_.layernorm_forward(x_, p("h.0.ln_1.weight"), p("h.0.ln_1.bias"), ln_, ln_mean_, ln_rstd_);
  const Tensor none;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    be_.matmul(qkv_.t().view({B_, 3 * C_}), ln_, p(h + "attn.qkv.weight"), p(h + "attn.qkv.bias"), false, true,
               false);
    be_.attention_decode(qkv_, k_cache_[l], v_cache_[l], pos_, att_);
    be_.matmul(proj_, att_.t().view({B_, C_}), p(h + "attn.proj.weight"), p(h + "attn.proj.bias"), false, true,
               false);
    residual_norm(proj_, h + "ln_2");
    be_.matmul_bias_gelu(fc_, gelu_, ln_, p(h + "mlp.fc.weight"), p(h + "mlp.fc.bias"), false, true);
    be_.matmul(proj_, gelu_, p(h + "mlp.proj.weight"), p(h + "mlp.proj.bias"), false, true, false);
    residual_norm(proj_, l + 1 < cfg_.num_layers ? "h." + std::to_string(l + 1) + ".ln_1" : std::string("ln_f"));
  }
  be_.matmul(logits_, ln_, p("wte"), none, false, true, false);  // tied LM head
  be_.copy_to_host(logits_bytes_.data(), logits_);
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t v = 0; v < cfg_.vocab_size; ++v)
      logits_host_[b * cfg_.vocab_size + v] = load_as_float(logits_bytes_.data(), logits_.t().dtype, b * vocab_padded_ + v);
  ++pos_;
  return logits_host_;
}

}  // namespace trident
