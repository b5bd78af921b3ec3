// Host entry points of the CUDA op families, one group per .cu file. Each entry point
// checks shapes and dtypes (throwing InternalError that names the op), dispatches on the
// storage type and launches on the given stream. Semantics are those of core/backend.h.
// Only CudaBackend calls these; tests go through the Backend interface.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "core/backend.h"
#include "core/tensor.h"

namespace trident::cuda {

// cuda_elementwise.cu
void fill(const Tensor& t, float value, cudaStream_t s);
void cast(const Tensor& src, const Tensor& dst, cudaStream_t s);
void scale(const Tensor& t, float alpha, cudaStream_t s);
void add(const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t s);
void accumulate(const Tensor& dst, const Tensor& src, cudaStream_t s);
void add_row_bias(const Tensor& out, const Tensor& bias, cudaStream_t s);  // out[r, :] += bias

// cuda_embedding.cu
void embedding_forward(const Tensor& tokens, const Tensor& wte, int64_t vocab_start, const Tensor& wpe,
                       int T, const Tensor& out, cudaStream_t s);
void embedding_backward(const Tensor& dout, const Tensor& tokens, int64_t vocab_start, int T,
                        const Tensor& dwte, const Tensor& dwpe, CachingAllocator& scratch, cudaStream_t s);

// cuda_layernorm.cu
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, cudaStream_t s);
// x, branch and resid share one dtype (the backend falls back to add + layernorm otherwise).
// With branch_drop enabled, the branch goes through dropout_forward(branch, T, branch_drop)
// first (the same mask), in the same pass; branch itself is not written.
void residual_layernorm_forward(const Tensor& x, const Tensor& branch, const Tensor& resid, const Tensor& gamma,
                                const Tensor& beta, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                cudaStream_t s, int T = 1, const DropoutKey& branch_drop = DropoutKey{});
void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        CachingAllocator& scratch, cudaStream_t s);

// cuda_gelu.cu
void gelu_forward(const Tensor& x, const Tensor& out, Gelu form, cudaStream_t s);
void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form, cudaStream_t s);

// cuda_attention.cu (fused causal attention; dqkv "=", deterministic)
void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const AttentionShape& shape,
                       const DropoutKey& drop, cudaStream_t s);
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const Tensor& dqkv, const AttentionShape& shape, const DropoutKey& drop,
                        CachingAllocator& scratch, cudaStream_t s);

// cuda_attention_decode.cu (generation: new queries of each sequence over a KV cache)
void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, const DecodePositions& at,
                      const Tensor& out, CachingAllocator& scratch, cudaStream_t s);

// cuda_dropout.cu
void dropout_forward(const Tensor& x, const Tensor& out, int T, const DropoutKey& drop, cudaStream_t s);
void dropout_backward(const Tensor& dout, const Tensor& dx, int T, const DropoutKey& drop, cudaStream_t s);

// cuda_xent.cu
void xent_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                const Tensor& row_max, const Tensor& target_logit, cudaStream_t s);
void xent_sumexp(const Tensor& logits, int64_t vocab_valid, const Tensor& row_max, const Tensor& sumexp,
                 cudaStream_t s);
void xent_stats_sumexp(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                       const Tensor& row_max, const Tensor& target_logit, const Tensor& sumexp, cudaStream_t s);
void xent_loss_grad(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                    const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit,
                    const Tensor& losses, const Tensor& correct, float grad_scale, cudaStream_t s);
void logits_argmax(const Tensor& logits, int64_t vocab_valid, const Tensor& values, const Tensor& ids,
                   cudaStream_t s);

// cuda_sample.cu (the draws go up through `scratch`)
void sample_logits(const Tensor& logits, int64_t vocab_valid, double temperature, int top_k,
                   const std::vector<RowDraw>& draws, const Tensor& ids, CachingAllocator& scratch, cudaStream_t s);

// cuda_adamw.cu (multi-tensor: few launches for the whole list)
void adamw_multi(const std::vector<AdamWArgs>& list, cudaStream_t s);

// cuda_gemv.cu: out[M, N] = a[M, K] w[N, K]^T (+ bias), M <= kGemvMaxRows, one dtype, K a
// multiple of a 16-byte vector, a and w 16-byte aligned; with `pre`, pre = that and out =
// gelu(pre), the tanh form. false (nothing done) when it does not fit.
constexpr int kGemvMaxRows = 16;
bool gemv_small_m(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& w, const Tensor& bias,
                  cudaStream_t s);

// cuda_reduce.cu
void bias_backward(const Tensor& dout, const Tensor& dbias, CachingAllocator& scratch, cudaStream_t s);
// dropout_backward(dout, dx, T, drop) and bias_backward(dx, dbias) in one pass over dout.
void dropout_bias_backward(const Tensor& dout, int T, const DropoutKey& drop, const Tensor& dx, const Tensor& dbias,
                           CachingAllocator& scratch, cudaStream_t s);
double sum(const Tensor& t, bool squares, CachingAllocator& scratch, cudaStream_t s);  // synchronises
double sum_squares_multi(const std::vector<Tensor>& list, CachingAllocator& scratch, cudaStream_t s);  // synchronises
int64_t count_zeros_multi(const std::vector<Tensor>& list, CachingAllocator& scratch, cudaStream_t s);  // synchronises
MagnitudeStats magnitude_stats_multi(const std::vector<Tensor>& list, CachingAllocator& scratch,
                                     cudaStream_t s);  // synchronises
bool has_inf_or_nan(const Tensor& t, CachingAllocator& scratch, cudaStream_t s);       // synchronises

// Column reductions in two deterministic passes (used by bias_backward and the LayerNorm
// parameter gradients): rows are cut into chunks (`column_chunks(rows, cols, vector)` of
// them, `vector` columns per thread of the first pass, or the fused LayerNorm backward's
// own), pass one writes f32 partials [chunks, cols], pass two adds them to dst in a fixed
// order (column_partials_accumulate: two partial sets of one shape, LayerNorm's dgamma and
// dbeta, in one launch).
int column_chunks(int64_t rows, int64_t cols, int vector = 1);
void column_partials_accumulate(const float* partials_a, void* dst_a, DType dtype_a, const float* partials_b,
                                void* dst_b, DType dtype_b, int64_t chunks, int64_t cols, cudaStream_t s);

}  // namespace trident::cuda
