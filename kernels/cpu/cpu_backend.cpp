// CpuBackend: memory, copies and the element-wise ops; every other op family forwards to
// its own file (cpu_*.cpp) through the free functions of cpu_ops.h.
#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_ops.h"

namespace trident {
namespace {

// Elements per chunk of the element-wise loops: each chunk converts through a small
// fp32 buffer on the stack, so 16-bit tensors need no heap scratch.
constexpr int64_t kChunk = 1024;

// Runs f(offset, n) over [0, numel) in chunks of kChunk, in parallel.
template <typename F>
void for_chunks(int64_t numel, F&& f) {
  const int64_t chunks = (numel + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t off = ci * kChunk;
    f(off, std::min(kChunk, numel - off));
  }
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : Backend(Device::Cpu) {}
  ~CpuBackend() override { release_all_memory(); }

  std::string name() const override { return "cpu"; }

  void* raw_alloc(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  }
  void raw_free(void* p) override { std::free(p); }

  void copy_from_host(const Tensor& dst, const void* src) override {
    cpu::check_cpu("copy_from_host", dst);
    // An empty tensor's side may be a null pointer, which memcpy must not be given.
    if (dst.nbytes() != 0) std::memcpy(dst.data, src, dst.nbytes());
  }
  void copy_to_host(void* dst, const Tensor& src) override {
    cpu::check_cpu("copy_to_host", src);
    if (src.nbytes() != 0) std::memcpy(dst, src.data, src.nbytes());
  }
  void copy(const Tensor& dst, const Tensor& src) override {
    cpu::check_cpu("copy", dst);
    cpu::check_cpu("copy", src);
    CPU_CHECK("copy", dst.dtype == src.dtype && dst.numel() == src.numel(), "dst ",
              dst.shape.str(), " ", dtype_name(dst.dtype), " vs src ", src.shape.str(), " ",
              dtype_name(src.dtype));
    if (dst.data != src.data && src.nbytes() != 0) std::memmove(dst.data, src.data, src.nbytes());
  }
  void fill(const Tensor& t, float value) override {
    cpu::check_cpu("fill", t);
    for_chunks(t.numel(), [&](int64_t off, int64_t n) {
      float buf[kChunk];
      for (int64_t i = 0; i < n; ++i) buf[i] = value;
      cpu::store_f32(t, off, n, buf);
    });
  }
  void synchronize() override {}

  void cast(const Tensor& src, const Tensor& dst) override {
    cpu::check_cpu("cast", src);
    cpu::check_cpu("cast", dst);
    CPU_CHECK("cast", src.numel() == dst.numel(), src.shape.str(), " vs ", dst.shape.str());
    if (src.dtype == dst.dtype) return copy(dst, src);
    for_chunks(src.numel(), [&](int64_t off, int64_t n) {
      float buf[kChunk];
      cpu::load_f32(src, off, n, buf);
      cpu::store_f32(dst, off, n, buf);
    });
  }
  void scale(const Tensor& t, float alpha) override {
    cpu::check_float("scale", t);
    for_chunks(t.numel(), [&](int64_t off, int64_t n) {
      float buf[kChunk];
      cpu::load_f32(t, off, n, buf);
      for (int64_t i = 0; i < n; ++i) buf[i] *= alpha;
      cpu::store_f32(t, off, n, buf);
    });
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    cpu::check_float("add", a);
    cpu::check_float("add", b);
    cpu::check_float("add", out);
    CPU_CHECK("add", a.numel() == out.numel() && b.numel() == out.numel(), a.shape.str(), " + ",
              b.shape.str(), " -> ", out.shape.str());
    for_chunks(out.numel(), [&](int64_t off, int64_t n) {
      float x[kChunk], y[kChunk];
      cpu::load_f32(a, off, n, x);
      cpu::load_f32(b, off, n, y);
      for (int64_t i = 0; i < n; ++i) x[i] += y[i];
      cpu::store_f32(out, off, n, x);
    });
  }
  void accumulate(const Tensor& dst, const Tensor& src) override { add(dst, src, dst); }

  void embedding_forward(const Tensor& tokens, const Tensor& wte, int64_t vocab_start,
                         const Tensor& wpe, int T, const Tensor& out) override {
    cpu::embedding_forward(tokens, wte, vocab_start, wpe, T, out);
  }
  void embedding_backward(const Tensor& dout, const Tensor& tokens, int64_t vocab_start, int T,
                          const Tensor& dwte, const Tensor& dwpe) override {
    cpu::embedding_backward(dout, tokens, vocab_start, T, dwte, dwpe, embedding_scratch_);
  }

  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& out, const Tensor& mean, const Tensor& rstd) override {
    cpu::layernorm_forward(x, gamma, beta, out, mean, rstd);
  }
  void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma,
                          const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                          const Tensor& dgamma, const Tensor& dbeta) override {
    cpu::layernorm_backward(dout, x, gamma, mean, rstd, dx, dgamma, dbeta);
  }

  void matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
              bool trans_a, bool trans_b, bool accumulate) override {
    cpu::matmul(out, a, b, bias, trans_a, trans_b, accumulate, matmul_scratch_);
  }
  void bias_backward(const Tensor& dout, const Tensor& dbias) override {
    cpu::bias_backward(dout, dbias);
  }

  void gelu_forward(const Tensor& x, const Tensor& out, Gelu form) override { cpu::gelu_forward(x, out, form); }
  void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form) override {
    cpu::gelu_backward(dout, x, dx, form);
  }

  void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                         const AttentionShape& s, const DropoutKey& drop) override {
    cpu::attention_forward(qkv, out, lse, s, drop);
  }
  // `out` is not needed: the backward recomputes every row's softmax from lse exactly.
  void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, const DecodePositions& at,
                        const Tensor& out) override {
    cpu::attention_decode(qkv, k_cache, v_cache, at, out);
  }
  void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& /*out*/,
                          const Tensor& lse, const Tensor& dqkv, const AttentionShape& s,
                          const DropoutKey& drop) override {
    cpu::attention_backward(dout, qkv, lse, dqkv, s, drop);
  }

  void dropout_forward(const Tensor& x, const Tensor& out, int T, const DropoutKey& drop) override {
    cpu::dropout_forward(x, out, T, drop);
  }
  void dropout_backward(const Tensor& dout, const Tensor& dx, int T, const DropoutKey& drop) override {
    cpu::dropout_backward(dout, dx, T, drop);
  }

  void xent_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                  int64_t vocab_valid, const Tensor& row_max, const Tensor& target_logit) override {
    cpu::xent_stats(logits, targets, vocab_start, vocab_valid, row_max, target_logit);
  }
  void xent_sumexp(const Tensor& logits, int64_t vocab_valid, const Tensor& row_max,
                   const Tensor& sumexp) override {
    cpu::xent_sumexp(logits, vocab_valid, row_max, sumexp);
  }
  void xent_loss_grad(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                      int64_t vocab_valid, const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit, const Tensor& losses, const Tensor& correct,
                      float grad_scale) override {
    cpu::xent_loss_grad(logits, targets, vocab_start, vocab_valid, row_max, sumexp, target_logit,
                        losses, correct, grad_scale);
  }
  void logits_argmax(const Tensor& logits, int64_t vocab_valid, const Tensor& values, const Tensor& ids) override {
    cpu::logits_argmax(logits, vocab_valid, values, ids);
  }
  void sample_logits(const Tensor& logits, int64_t vocab_valid, double temperature, int top_k,
                     const std::vector<RowDraw>& draws, const Tensor& ids) override {
    cpu::sample_logits(logits, vocab_valid, temperature, top_k, draws, ids);
  }

  void adamw(const AdamWArgs& a) override { cpu::adamw(a); }
  double sum_squares(const Tensor& t) override { return cpu::sum_squares(t); }
  double sum(const Tensor& t) override { return cpu::sum(t); }
  bool has_inf_or_nan(const Tensor& t) override { return cpu::has_inf_or_nan(t); }
  int64_t count_zeros_multi(const std::vector<Tensor>& list) override { return cpu::count_zeros_multi(list); }
  MagnitudeStats magnitude_stats_multi(const std::vector<Tensor>& list) override {
    return cpu::magnitude_stats_multi(list);
  }

 private:
  // Grow-only scratch (see cpu_ops.h); the backend is used from one host thread at a time.
  cpu::MatmulScratch matmul_scratch_;
  std::vector<int64_t> embedding_scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace trident
