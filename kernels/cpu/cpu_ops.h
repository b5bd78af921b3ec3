// Internal to the CPU backend: the op families as free functions (one file each) and the
// helpers they share for moving any stored dtype in and out of fp32.
//
// Determinism rule for every op here: a result never depends on the OpenMP thread count.
// Parallel loops only split independent outputs; every reduction runs over a fixed
// partition (rows, columns, or fixed-size blocks) and combines partials in a fixed order.
// The one exception is OpenBLAS's sgemm inside matmul: its sums depend on its thread count
// (the same from run to run at one count; tests/unit/kernels/test_determinism.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend.h"

namespace trident::cpu {

// ---- dtype helpers (switch once per span, not per element) ----------------------------
// dst[i] = float(src[offset + i]) for i < n.
void load_f32(const Tensor& src, int64_t offset, int64_t n, float* dst);
// dst[offset + i] = src[i] rounded to dst's dtype (round to nearest even).
void store_f32(const Tensor& dst, int64_t offset, int64_t n, const float* src);
// Float element i of t (slow path for scattered reads).
inline float at(const Tensor& t, int64_t i) { return load_as_float(t.data, t.dtype, static_cast<size_t>(i)); }

// Grow-only scratch: resizes only upward, so a steady-state step loop allocates nothing.
inline float* grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// Per-thread grow-only scratch of at least n floats; buffers of different `slot`s
// (0..7) may be used at the same time. Valid until the same thread asks for that slot again.
float* thread_scratch(int slot, int64_t n);

// Throws InternalError naming `op` when `cond` fails.
#define CPU_CHECK(op, cond, ...) TRIDENT_CHECK(cond, op, ": ", ##__VA_ARGS__)

void check_cpu(const char* op, const Tensor& t);
void check_float(const char* op, const Tensor& t);
void check_f32(const char* op, const Tensor& t);

// ---- op families ----------------------------------------------------------------------
void embedding_forward(const Tensor& tokens, const Tensor& wte, int64_t vocab_start,
                       const Tensor& wpe, int T, const Tensor& out);
// `scratch` keeps the sorted (id, row) pairs between calls (grow-only).
void embedding_backward(const Tensor& dout, const Tensor& tokens, int64_t vocab_start, int T,
                        const Tensor& dwte, const Tensor& dwpe, std::vector<int64_t>& scratch);

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd);
void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta);

// How the linked OpenBLAS runs its threads: "openmp" (the build CMake asks for: its GEMMs
// on this backend's OpenMP threads), "pthreads" or "sequential".
const char* blas_threading();  // "unknown" when the BLAS is not OpenBLAS

// Scratch for 16-bit operands of matmul, kept by the backend (grow-only).
struct MatmulScratch {
  std::vector<float> a, b, c;
};
void matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a,
            bool trans_b, bool accumulate, MatmulScratch& scratch);
void bias_backward(const Tensor& dout, const Tensor& dbias);

void gelu_forward(const Tensor& x, const Tensor& out, Gelu form);
void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form);

void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                       const AttentionShape& s, const DropoutKey& drop);
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& lse, const Tensor& dqkv,
                        const AttentionShape& s, const DropoutKey& drop);
void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, const DecodePositions& at,
                      const Tensor& out);

void dropout_forward(const Tensor& x, const Tensor& out, int T, const DropoutKey& drop);
void dropout_backward(const Tensor& dout, const Tensor& dx, int T, const DropoutKey& drop);

void xent_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                const Tensor& row_max, const Tensor& target_logit);
void xent_sumexp(const Tensor& logits, int64_t vocab_valid, const Tensor& row_max, const Tensor& sumexp);
void xent_loss_grad(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                    const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit,
                    const Tensor& losses, const Tensor& correct, float grad_scale);
void logits_argmax(const Tensor& logits, int64_t vocab_valid, const Tensor& values, const Tensor& ids);
void sample_logits(const Tensor& logits, int64_t vocab_valid, double temperature, int top_k,
                   const std::vector<RowDraw>& draws, const Tensor& ids);

void adamw(const AdamWArgs& a);

double sum_squares(const Tensor& t);
double sum(const Tensor& t);
bool has_inf_or_nan(const Tensor& t);
int64_t count_zeros_multi(const std::vector<Tensor>& list);
MagnitudeStats magnitude_stats_multi(const std::vector<Tensor>& list);

}  // namespace trident::cpu
