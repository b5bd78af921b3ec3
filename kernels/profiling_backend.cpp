#include "kernels/profiling_backend.h"

#include <chrono>

namespace trident {

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner)
    : Backend(inner->device()), inner_(std::move(inner)) {}

ProfilingBackend::~ProfilingBackend() { release_all_memory(); }

template <typename F>
auto ProfilingBackend::timed(const char* op, F&& f) {
  if (!timing_) return f();
  const auto start = std::chrono::steady_clock::now();
  auto finish = [&] {
    inner_->synchronize();
    OpTime& t = times_[op];
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++t.calls;
  };
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    finish();
  } else {
    auto r = f();
    finish();
    return r;
  }
}

void ProfilingBackend::copy_from_host(const Tensor& d, const void* s) { timed("copy", [&] { inner_->copy_from_host(d, s); }); }
void ProfilingBackend::copy_to_host(void* d, const Tensor& s) { timed("copy", [&] { inner_->copy_to_host(d, s); }); }
void ProfilingBackend::copy(const Tensor& d, const Tensor& s) { timed("copy", [&] { inner_->copy(d, s); }); }
void ProfilingBackend::fill(const Tensor& t, float v) { timed("fill", [&] { inner_->fill(t, v); }); }
void ProfilingBackend::cast(const Tensor& s, const Tensor& d) { timed("cast", [&] { inner_->cast(s, d); }); }
void ProfilingBackend::scale(const Tensor& t, float a) { timed("elementwise", [&] { inner_->scale(t, a); }); }
void ProfilingBackend::add(const Tensor& a, const Tensor& b, const Tensor& o) {
  timed("elementwise", [&] { inner_->add(a, b, o); });
}
void ProfilingBackend::accumulate(const Tensor& d, const Tensor& s) {
  timed("elementwise", [&] { inner_->accumulate(d, s); });
}
void ProfilingBackend::embedding_forward(const Tensor& tokens, const Tensor& wte, int64_t vs, const Tensor& wpe, int T,
                                         const Tensor& out) {
  timed("embedding", [&] { inner_->embedding_forward(tokens, wte, vs, wpe, T, out); });
}
void ProfilingBackend::embedding_backward(const Tensor& dout, const Tensor& tokens, int64_t vs, int T,
                                          const Tensor& dwte, const Tensor& dwpe) {
  timed("embedding", [&] { inner_->embedding_backward(dout, tokens, vs, T, dwte, dwpe); });
}
void ProfilingBackend::layernorm_forward(const Tensor& x, const Tensor& g, const Tensor& b, const Tensor& out,
                                         const Tensor& mean, const Tensor& rstd) {
  timed("layernorm", [&] { inner_->layernorm_forward(x, g, b, out, mean, rstd); });
}
void ProfilingBackend::layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& g, const Tensor& mean,
                                          const Tensor& rstd, const Tensor& dx, const Tensor& dg, const Tensor& db) {
  timed("layernorm", [&] { inner_->layernorm_backward(dout, x, g, mean, rstd, dx, dg, db); });
}
void ProfilingBackend::matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool ta, bool tb,
                              bool acc) {
  timed("matmul", [&] { inner_->matmul(out, a, b, bias, ta, tb, acc); });
}
void ProfilingBackend::bias_backward(const Tensor& dout, const Tensor& dbias) {
  timed("bias_backward", [&] { inner_->bias_backward(dout, dbias); });
}
void ProfilingBackend::gelu_forward(const Tensor& x, const Tensor& out, Gelu form) {
  timed("gelu", [&] { inner_->gelu_forward(x, out, form); });
}
void ProfilingBackend::gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form) {
  timed("gelu", [&] { inner_->gelu_backward(dout, x, dx, form); });
}
void ProfilingBackend::attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                         const AttentionShape& s, const DropoutKey& d) {
  timed("attention", [&] { inner_->attention_forward(qkv, out, lse, s, d); });
}
void ProfilingBackend::attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                          const Tensor& dqkv, const AttentionShape& s, const DropoutKey& d) {
  timed("attention", [&] { inner_->attention_backward(dout, qkv, out, lse, dqkv, s, d); });
}
void ProfilingBackend::attention_decode(const Tensor& qkv, const Tensor& kc, const Tensor& vc,
                                        const DecodePositions& at, const Tensor& out) {
  timed("attention", [&] { inner_->attention_decode(qkv, kc, vc, at, out); });
}
void ProfilingBackend::dropout_forward(const Tensor& x, const Tensor& out, int T, const DropoutKey& d) {
  timed("dropout", [&] { inner_->dropout_forward(x, out, T, d); });
}
void ProfilingBackend::dropout_backward(const Tensor& dout, const Tensor& dx, int T, const DropoutKey& d) {
  timed("dropout", [&] { inner_->dropout_backward(dout, dx, T, d); });
}
void ProfilingBackend::xent_stats(const Tensor& logits, const Tensor& targets, int64_t vs, int64_t vv,
                                  const Tensor& row_max, const Tensor& tl) {
  timed("cross_entropy", [&] { inner_->xent_stats(logits, targets, vs, vv, row_max, tl); });
}
void ProfilingBackend::xent_sumexp(const Tensor& logits, int64_t vv, const Tensor& row_max, const Tensor& sumexp) {
  timed("cross_entropy", [&] { inner_->xent_sumexp(logits, vv, row_max, sumexp); });
}
void ProfilingBackend::xent_loss_grad(const Tensor& logits, const Tensor& targets, int64_t vs, int64_t vv,
                                      const Tensor& row_max, const Tensor& sumexp, const Tensor& tl,
                                      const Tensor& losses, const Tensor& correct, float gs) {
  timed("cross_entropy", [&] { inner_->xent_loss_grad(logits, targets, vs, vv, row_max, sumexp, tl, losses, correct, gs); });
}
void ProfilingBackend::logits_argmax(const Tensor& logits, int64_t vv, const Tensor& values, const Tensor& ids) {
  timed("argmax", [&] { inner_->logits_argmax(logits, vv, values, ids); });
}
void ProfilingBackend::sample_logits(const Tensor& logits, int64_t vv, double temperature, int top_k,
                                     const std::vector<RowDraw>& draws, const Tensor& ids) {
  timed("sample", [&] { inner_->sample_logits(logits, vv, temperature, top_k, draws, ids); });
}
void ProfilingBackend::adamw(const AdamWArgs& a) { timed("adamw", [&] { inner_->adamw(a); }); }
void ProfilingBackend::residual_layernorm_forward(const Tensor& x, const Tensor& branch, const Tensor& resid,
                                                  const Tensor& g, const Tensor& b, const Tensor& out,
                                                  const Tensor& mean, const Tensor& rstd) {
  timed("residual_layernorm", [&] { inner_->residual_layernorm_forward(x, branch, resid, g, b, out, mean, rstd); });
}
void ProfilingBackend::dropout_residual_layernorm_forward(const Tensor& x, const Tensor& branch, int T,
                                                          const DropoutKey& d, const Tensor& resid, const Tensor& g,
                                                          const Tensor& b, const Tensor& out, const Tensor& mean,
                                                          const Tensor& rstd) {
  timed("residual_layernorm",
        [&] { inner_->dropout_residual_layernorm_forward(x, branch, T, d, resid, g, b, out, mean, rstd); });
}
void ProfilingBackend::dropout_bias_backward(const Tensor& dout, int T, const DropoutKey& d, const Tensor& dx,
                                             const Tensor& dbias) {
  timed("bias_backward", [&] { inner_->dropout_bias_backward(dout, T, d, dx, dbias); });
}
void ProfilingBackend::xent_stats_sumexp(const Tensor& logits, const Tensor& targets, int64_t vs, int64_t vv,
                                         const Tensor& row_max, const Tensor& tl, const Tensor& sumexp) {
  timed("cross_entropy", [&] { inner_->xent_stats_sumexp(logits, targets, vs, vv, row_max, tl, sumexp); });
}
void ProfilingBackend::matmul_bias_gelu(const Tensor& pre, const Tensor& out, const Tensor& a, const Tensor& b,
                                        const Tensor& bias, bool ta, bool tb, Gelu form) {
  timed("matmul_gelu", [&] { inner_->matmul_bias_gelu(pre, out, a, b, bias, ta, tb, form); });
}
void ProfilingBackend::matmul_gelu_backward(const Tensor& dpre, const Tensor& a, const Tensor& b, const Tensor& pre,
                                            bool ta, bool tb, Gelu form) {
  timed("matmul_gelu", [&] { inner_->matmul_gelu_backward(dpre, a, b, pre, ta, tb, form); });
}
void ProfilingBackend::adamw_multi(const std::vector<AdamWArgs>& list) {
  timed("adamw", [&] { inner_->adamw_multi(list); });
}
double ProfilingBackend::sum_squares_multi(const std::vector<Tensor>& list) {
  return timed("reduce", [&] { return inner_->sum_squares_multi(list); });
}
double ProfilingBackend::sum_squares(const Tensor& t) { return timed("reduce", [&] { return inner_->sum_squares(t); }); }
double ProfilingBackend::sum(const Tensor& t) { return timed("reduce", [&] { return inner_->sum(t); }); }
bool ProfilingBackend::has_inf_or_nan(const Tensor& t) { return timed("reduce", [&] { return inner_->has_inf_or_nan(t); }); }
int64_t ProfilingBackend::count_zeros_multi(const std::vector<Tensor>& list) {
  return timed("reduce", [&] { return inner_->count_zeros_multi(list); });
}

MagnitudeStats ProfilingBackend::magnitude_stats_multi(const std::vector<Tensor>& list) {
  return timed("reduce", [&] { return inner_->magnitude_stats_multi(list); });
}

}  // namespace trident
