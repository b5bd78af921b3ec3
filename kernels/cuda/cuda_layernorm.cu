// LayerNorm over the last dim (eps 1e-5, biased variance, fp32 statistics), and its fusion
// with the residual add in front of it (pre-LN GPT-2: resid = x + branch; ln = LN(resid)).
// Forward: one warp per row; with a branch the row is first summed, rounded to the storage
// type and stored to resid (so the statistics are those of the stored residual, exactly as
// add() then layernorm_forward() compute them); then two passes (mean, centred variance)
// for accuracy, then the normalised output. The later passes re-read the row, which is in
// L1 by then. mean and rstd are saved in f32 for the backward.
// Backward: one warp per row for dx (+=, which is also the residual's gradient path).
// dgamma/dbeta (+=) are column sums over rows: a first kernel writes per-chunk f32
// partials, a second adds the chunks in order, so the result is deterministic without
// float atomics (see column_partials_accumulate).
// Row kernels move kV elements per access: 16-byte vectors when every row operand has the
// main operand's dtype, the row length allows it and the pointers are aligned (the usual
// case); kV = 1 otherwise, with runtime-typed parameters and outputs.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // warps per block, one row each

// Loads kV values of a runtime-typed operand: as one vector of T when kV > 1 (the launcher
// has checked that its dtype is T), else one element of any dtype.
template <typename T, int kV>
__device__ __forceinline__ void load_row(AnyPtr a, int64_t i, float (&out)[kV]) {
  if constexpr (kV == 1) {
    out[0] = load_any(a, i);
  } else {
    const Vec<T, kV> v = load_vec<T, kV>(static_cast<const T*>(a.p) + i);
#pragma unroll
    for (int j = 0; j < kV; ++j) out[j] = to_f32(v.v[j]);
  }
}
template <typename T, int kV>
__device__ __forceinline__ void store_row(AnyPtr a, int64_t i, const float (&in)[kV]) {
  if constexpr (kV == 1) {
    store_any(a, i, in[0]);
  } else {
    Vec<T, kV> v;
#pragma unroll
    for (int j = 0; j < kV; ++j) v.v[j] = from_f32<T>(in[j]);
    store_vec<T, kV>(static_cast<T*>(a.p) + i, v);
  }
}

// branch == nullptr: plain LayerNorm of x (resid unused).
template <typename T, int kV>
__global__ void layernorm_forward_kernel(const T* x, const T* branch, T* resid, AnyPtr gamma, AnyPtr beta,
                                         AnyPtr out, float* mean, float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const int64_t base = n * C;
  float s = 0.f;
  for (int64_t c = lane * kV; c < C; c += 32 * kV) {
    Vec<T, kV> v = load_vec<T, kV>(x + base + c);
    if (branch != nullptr) {
      const Vec<T, kV> b = load_vec<T, kV>(branch + base + c);
#pragma unroll
      for (int j = 0; j < kV; ++j) v.v[j] = from_f32<T>(to_f32(v.v[j]) + to_f32(b.v[j]));
      store_vec<T, kV>(resid + base + c, v);  // each lane re-reads only what it wrote
    }
#pragma unroll
    for (int j = 0; j < kV; ++j) s += to_f32(v.v[j]);
  }
  const T* row = (branch != nullptr ? resid : x) + base;
  const float mu = warp_sum(s) / static_cast<float>(C);
  float ss = 0.f;
  for (int64_t c = lane * kV; c < C; c += 32 * kV) {
    const Vec<T, kV> v = load_vec<T, kV>(row + c);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const float d = to_f32(v.v[j]) - mu;
      ss += d * d;
    }
  }
  const float r = rsqrtf(warp_sum(ss) / static_cast<float>(C) + kEps);
  for (int64_t c = lane * kV; c < C; c += 32 * kV) {
    const Vec<T, kV> v = load_vec<T, kV>(row + c);
    float g[kV], b[kV], y[kV];
    load_row<T, kV>(gamma, c, g);
    load_row<T, kV>(beta, c, b);
#pragma unroll
    for (int j = 0; j < kV; ++j) y[j] = (to_f32(v.v[j]) - mu) * r * g[j] + b[j];
    store_row<T, kV>(out, base + c, y);
  }
  if (lane == 0) {
    mean[n] = mu;
    rstd[n] = r;
  }
}

template <typename T, int kV>
__global__ void layernorm_dx_kernel(AnyPtr dout, const T* x, AnyPtr gamma, const float* mean, const float* rstd,
                                    AnyPtr dx, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const int64_t base = n * C;
  const float mu = mean[n], r = rstd[n];
  float sg = 0.f, sgx = 0.f;
  for (int64_t c = lane * kV; c < C; c += 32 * kV) {
    const Vec<T, kV> v = load_vec<T, kV>(x + base + c);
    float d[kV], g[kV];
    load_row<T, kV>(dout, base + c, d);
    load_row<T, kV>(gamma, c, g);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const float xhat = (to_f32(v.v[j]) - mu) * r;
      sg += d[j] * g[j];
      sgx += d[j] * g[j] * xhat;
    }
  }
  const float mg = warp_sum(sg) / static_cast<float>(C), mgx = warp_sum(sgx) / static_cast<float>(C);
  for (int64_t c = lane * kV; c < C; c += 32 * kV) {
    const Vec<T, kV> v = load_vec<T, kV>(x + base + c);
    float d[kV], g[kV], acc[kV];
    load_row<T, kV>(dout, base + c, d);
    load_row<T, kV>(gamma, c, g);
    load_row<T, kV>(dx, base + c, acc);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const float xhat = (to_f32(v.v[j]) - mu) * r;
      acc[j] += r * (d[j] * g[j] - mg - xhat * mgx);
    }
    store_row<T, kV>(dx, base + c, acc);
  }
}

// Grid (column blocks, chunks): thread = column, loops over the rows of its chunk.
template <typename T>
__global__ void layernorm_param_partials_kernel(AnyPtr dout, const T* x, const float* mean, const float* rstd,
                                                int64_t N, int64_t C, int64_t rows_per_chunk, float* pg, float* pb) {
  const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float sg = 0.f, sb = 0.f;
  for (int64_t n = r0; n < r1; ++n) {
    const float d = load_any(dout, n * C + c);
    sg += d * ((to_f32(x[n * C + c]) - mean[n]) * rstd[n]);
    sb += d;
  }
  pg[blockIdx.y * C + c] = sg;
  pb[blockIdx.y * C + c] = sb;
}

void check_f32(const char* op, const Tensor& t, int64_t n, const char* what) {
  TRIDENT_CHECK(t.dtype == DType::F32 && t.numel() == n, op, ": ", what, " must be f32 [", n, "], got ",
                dtype_name(t.dtype), " ", t.shape.str());
}

}  // namespace

// Host launchers.

// Shared by layernorm_forward and residual_layernorm_forward (branch empty: plain LN).
static void launch_forward(const char* op, const Tensor& x, const Tensor& branch, const Tensor& resid, const Tensor& gamma,
                    const Tensor& beta, const Tensor& out, const Tensor& mean, const Tensor& rstd, cudaStream_t s) {
  const int64_t N = x.rows(), C = x.cols();
  for (const Tensor* t : {&gamma, &beta, &out})
    TRIDENT_CHECK(is_float(t->dtype), op, ": float tensors expected");
  TRIDENT_CHECK(out.rows() == N && out.cols() == C, op, ": out ", out.shape.str(), " vs x ", x.shape.str());
  TRIDENT_CHECK(gamma.numel() == C && beta.numel() == C, op, ": gamma/beta must be [", C, "]");
  const bool fused = !branch.empty();
  if (fused)
    for (const Tensor* t : {&branch, &resid})
      TRIDENT_CHECK(t->dtype == x.dtype && t->numel() == x.numel(), op, ": branch/resid must match x ",
                    dtype_name(x.dtype), " ", x.shape.str(), ", got ", dtype_name(t->dtype), " ", t->shape.str());
  check_f32(op, mean, N, "mean");
  check_f32(op, rstd, N, "rstd");
  if (N == 0 || C == 0) return;
  dispatch_float(x.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const bool same = gamma.dtype == x.dtype && beta.dtype == x.dtype && out.dtype == x.dtype;
    const int kv = same ? vector_width<T>(C, {x.data, branch.data, resid.data, gamma.data, beta.data, out.data}) : 1;
    const T* bp = fused ? branch.ptr<T>() : nullptr;
    T* rp = fused ? resid.ptr<T>() : nullptr;
    const unsigned grid = grid_for(N, kRowsPerBlock, INT32_MAX);
    if (kv > 1)
      layernorm_forward_kernel<T, kVec16<T>><<<grid, 32 * kRowsPerBlock, 0, s>>>(
          x.ptr<T>(), bp, rp, any_ptr(gamma), any_ptr(beta), any_ptr(out), mean.ptr<float>(), rstd.ptr<float>(), N, C);
    else
      layernorm_forward_kernel<T, 1><<<grid, 32 * kRowsPerBlock, 0, s>>>(
          x.ptr<T>(), bp, rp, any_ptr(gamma), any_ptr(beta), any_ptr(out), mean.ptr<float>(), rstd.ptr<float>(), N, C);
  });
  CUDA_CHECK_LAUNCH();
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, cudaStream_t s) {
  launch_forward("layernorm_forward", x, Tensor(), Tensor(), gamma, beta, out, mean, rstd, s);
}

void residual_layernorm_forward(const Tensor& x, const Tensor& branch, const Tensor& resid, const Tensor& gamma,
                                const Tensor& beta, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                cudaStream_t s) {
  launch_forward("residual_layernorm_forward", x, branch, resid, gamma, beta, out, mean, rstd, s);
}

void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        CachingAllocator& scratch, cudaStream_t s) {
  const char* op = "layernorm_backward";
  const int64_t N = x.rows(), C = x.cols();
  for (const Tensor* t : {&dout, &gamma, &dx, &dgamma, &dbeta})
    TRIDENT_CHECK(is_float(t->dtype), op, ": float tensors expected");
  TRIDENT_CHECK(dout.rows() == N && dout.cols() == C && dx.rows() == N && dx.cols() == C, op, ": dout ",
                dout.shape.str(), " dx ", dx.shape.str(), " vs x ", x.shape.str());
  TRIDENT_CHECK(gamma.numel() == C && dgamma.numel() == C && dbeta.numel() == C, op,
                ": gamma/dgamma/dbeta must be [", C, "]");
  check_f32(op, mean, N, "mean");
  check_f32(op, rstd, N, "rstd");
  if (N == 0 || C == 0) return;

  const int chunks = column_chunks(N, C);
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  Scratch pg(scratch, sizeof(float) * chunks * C), pb(scratch, sizeof(float) * chunks * C);
  dispatch_float(x.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const bool same = dout.dtype == x.dtype && gamma.dtype == x.dtype && dx.dtype == x.dtype;
    const int kv = same ? vector_width<T>(C, {dout.data, x.data, gamma.data, dx.data}) : 1;
    const unsigned rows_grid = grid_for(N, kRowsPerBlock, INT32_MAX);
    if (kv > 1)
      layernorm_dx_kernel<T, kVec16<T>><<<rows_grid, 32 * kRowsPerBlock, 0, s>>>(
          any_ptr(dout), x.ptr<T>(), any_ptr(gamma), mean.ptr<float>(), rstd.ptr<float>(), any_ptr(dx), N, C);
    else
      layernorm_dx_kernel<T, 1><<<rows_grid, 32 * kRowsPerBlock, 0, s>>>(
          any_ptr(dout), x.ptr<T>(), any_ptr(gamma), mean.ptr<float>(), rstd.ptr<float>(), any_ptr(dx), N, C);
    CUDA_CHECK_LAUNCH();
    const dim3 grid(static_cast<unsigned>((C + 255) / 256), static_cast<unsigned>(chunks));
    layernorm_param_partials_kernel<T><<<grid, 256, 0, s>>>(any_ptr(dout), x.ptr<T>(), mean.ptr<float>(),
                                                            rstd.ptr<float>(), N, C, rows_per_chunk,
                                                            pg.as<float>(), pb.as<float>());
    CUDA_CHECK_LAUNCH();
  });
  column_partials_accumulate(pg.as<float>(), chunks, C, dgamma.data, dgamma.dtype, s);
  column_partials_accumulate(pb.as<float>(), chunks, C, dbeta.data, dbeta.dtype, s);
}

}  // namespace trident::cuda
