#include "core/backend.h"

#include "core/attn_dropout_mask.h"
#include "core/error.h"

namespace trident {

Backend::Backend(Device device)
    : device_(device),
      allocator_(std::make_unique<CachingAllocator>([this](size_t n) { return raw_alloc(n); },
                                                    [this](void* p) { raw_free(p); })) {}

// Derived destructors have already called release_all_memory(); a cache still alive here
// could not free through the (already destroyed) derived raw_free.
Backend::~Backend() = default;

std::optional<double> Backend::energy_joules(std::string* why_none) {
  if (why_none) *why_none = "the " + name() + " backend has no energy counter";
  return std::nullopt;
}

bool Backend::saves_attention_dropout_mask() const { return attn_mask_save_requested(); }

Buffer Backend::empty(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return Buffer(allocator_.get(), Tensor(allocator_->allocate(bytes), shape, dtype, device_));
}

DecodeShape check_decode_shapes(const char* op, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                                const DecodePositions& at, const Tensor& out) {
  const int pos = at.pos;
  for (const Tensor* t : {&qkv, &k_cache, &v_cache, &out})
    TRIDENT_CHECK(is_float(t->dtype), op, ": float tensors expected, got ", dtype_name(t->dtype));
  TRIDENT_CHECK(k_cache.dtype == qkv.dtype && v_cache.dtype == qkv.dtype, op, ": the caches must have qkv's dtype ",
                dtype_name(qkv.dtype));
  const bool one = qkv.ndim() == 4;  // [B, 3, H, D]: one token per sequence
  TRIDENT_CHECK((one || qkv.ndim() == 5) && qkv.shape[one ? 1 : 2] == 3, op,
                ": qkv must be [B, T, 3, H, D] or [B, 3, H, D], got ", qkv.shape.str());
  DecodeShape s;
  s.B = qkv.shape[0];
  s.T = one ? 1 : qkv.shape[1];
  s.H = qkv.shape[qkv.ndim() - 2];
  s.D = qkv.shape[qkv.ndim() - 1];
  TRIDENT_CHECK(k_cache.ndim() == 4 && k_cache.shape[0] == s.B && k_cache.shape[2] == s.H &&
                    k_cache.shape[3] == s.D && v_cache.shape == k_cache.shape,
                op, ": caches must be [B, Tmax, H, D] = [", s.B, ", Tmax, ", s.H, ", ", s.D, "], got ",
                k_cache.shape.str(), " and ", v_cache.shape.str());
  s.Tmax = k_cache.shape[1];
  TRIDENT_CHECK(s.T >= 1 && pos >= 0 && pos + s.T <= s.Tmax, op, ": positions ", pos, " to ", pos + s.T - 1,
                " outside the cache of ", s.Tmax);
  TRIDENT_CHECK(out.numel() == s.B * s.T * s.H * s.D, op, ": out ", out.shape.str(), " for [", s.B, ", ", s.T, ", ",
                s.H, ", ", s.D, "]");
  TRIDENT_CHECK(at.rows.empty() || (at.rows.dtype == DType::I32 && at.rows.numel() == s.B &&
                                    at.rows.device == qkv.device),
                op, ": per-row positions must be I32 [", s.B, "] on qkv's device, got ", dtype_name(at.rows.dtype), " ",
                at.rows.shape.str());
  return s;
}

// ---- default compositions of the fused ops (their meaning) -------------------------------

void Backend::residual_layernorm_forward(const Tensor& x, const Tensor& branch, const Tensor& resid,
                                         const Tensor& gamma, const Tensor& beta, const Tensor& out,
                                         const Tensor& mean, const Tensor& rstd) {
  add(x, branch, resid);
  layernorm_forward(resid, gamma, beta, out, mean, rstd);
}

void Backend::dropout_residual_layernorm_forward(const Tensor& x, const Tensor& branch, int T,
                                                 const DropoutKey& drop, const Tensor& resid, const Tensor& gamma,
                                                 const Tensor& beta, const Tensor& out, const Tensor& mean,
                                                 const Tensor& rstd) {
  dropout_forward(branch, branch, T, drop);
  residual_layernorm_forward(x, branch, resid, gamma, beta, out, mean, rstd);
}

void Backend::dropout_bias_backward(const Tensor& dout, int T, const DropoutKey& drop, const Tensor& dx,
                                    const Tensor& dbias) {
  dropout_backward(dout, dx, T, drop);
  bias_backward(dx, dbias);
}

void Backend::xent_stats_sumexp(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                int64_t vocab_valid, const Tensor& row_max, const Tensor& target_logit,
                                const Tensor& sumexp) {
  xent_stats(logits, targets, vocab_start, vocab_valid, row_max, target_logit);
  xent_sumexp(logits, vocab_valid, row_max, sumexp);
}

void Backend::matmul_bias_gelu(const Tensor& pre, const Tensor& out, const Tensor& a, const Tensor& b,
                               const Tensor& bias, bool trans_a, bool trans_b, Gelu form) {
  matmul(pre, a, b, bias, trans_a, trans_b, false);
  gelu_forward(pre, out, form);
}

void Backend::matmul_gelu_backward(const Tensor& dpre, const Tensor& a, const Tensor& b, const Tensor& pre,
                                   bool trans_a, bool trans_b, Gelu form) {
  matmul(dpre, a, b, Tensor(), trans_a, trans_b, false);
  gelu_backward(dpre, pre, dpre, form);  // element-wise: in place is fine
}

void Backend::linear_param_grads(const Tensor& dout, const Tensor& x, const Tensor& dw, const Tensor& dbias) {
  matmul(dw, dout, x, Tensor(), true, false, true);
  if (!dbias.empty()) bias_backward(dout, dbias);
}

void check_adamw_multi_list(const std::vector<AdamWArgs>& list) {
  for (const AdamWArgs& a : list) {
    const AdamWArgs& f = list.front();
    TRIDENT_CHECK(a.lr == f.lr && a.beta1 == f.beta1 && a.beta2 == f.beta2 && a.eps == f.eps &&
                      a.grad_scale == f.grad_scale && a.step == f.step,
                  "adamw_multi: every piece must share lr, betas, eps, grad_scale and step");
  }
}

void Backend::adamw_multi(const std::vector<AdamWArgs>& list) {
  check_adamw_multi_list(list);
  for (const AdamWArgs& a : list) adamw(a);
}

double Backend::sum_squares_multi(const std::vector<Tensor>& list) {
  double total = 0;
  for (const Tensor& t : list) total += sum_squares(t);
  return total;
}

Buffer Backend::zeros(Shape shape, DType dtype) {
  Buffer b = empty(shape, dtype);
  fill(b, 0.0f);
  return b;
}

}  // namespace trident
