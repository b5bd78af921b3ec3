// LayerNorm over the last dim (eps 1e-5, biased variance, fp32 statistics).
// Forward: one warp per row; two passes over the row (mean, then centred variance) for
// accuracy, then the normalised output; mean and rstd are saved in f32 for the backward.
// Backward: one warp per row for dx (+=). dgamma/dbeta (+=) are column sums over rows:
// a first kernel writes per-chunk f32 partials, a second adds the chunks in order, so the
// result is deterministic without float atomics (see column_partials_accumulate).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // warps per block, one row each

template <typename T>
__global__ void layernorm_forward_kernel(const T* x, AnyPtr gamma, AnyPtr beta, AnyPtr out, float* mean,
                                         float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const T* row = x + n * C;
  float s = 0.f;
  for (int64_t c = lane; c < C; c += 32) s += to_f32(row[c]);
  const float mu = warp_sum(s) / static_cast<float>(C);
  float ss = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = to_f32(row[c]) - mu;
    ss += d * d;
  }
  const float r = rsqrtf(warp_sum(ss) / static_cast<float>(C) + kEps);
  for (int64_t c = lane; c < C; c += 32)
    store_any(out, n * C + c, (to_f32(row[c]) - mu) * r * load_any(gamma, c) + load_any(beta, c));
  if (lane == 0) {
    mean[n] = mu;
    rstd[n] = r;
  }
}

template <typename T>
__global__ void layernorm_dx_kernel(AnyPtr dout, const T* x, AnyPtr gamma, const float* mean, const float* rstd,
                                    AnyPtr dx, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const float mu = mean[n], r = rstd[n];
  float sg = 0.f, sgx = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float xhat = (to_f32(x[n * C + c]) - mu) * r;
    const float g = load_any(dout, n * C + c) * load_any(gamma, c);
    sg += g;
    sgx += g * xhat;
  }
  const float mg = warp_sum(sg) / static_cast<float>(C), mgx = warp_sum(sgx) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += 32) {
    const int64_t i = n * C + c;
    const float xhat = (to_f32(x[i]) - mu) * r;
    const float g = load_any(dout, i) * load_any(gamma, c);
    store_any(dx, i, load_any(dx, i) + r * (g - mg - xhat * mgx));
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

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, cudaStream_t s) {
  const char* op = "layernorm_forward";
  const int64_t N = x.rows(), C = x.cols();
  for (const Tensor* t : {&gamma, &beta, &out})
    TRIDENT_CHECK(is_float(t->dtype), op, ": float tensors expected");
  TRIDENT_CHECK(out.rows() == N && out.cols() == C, op, ": out ", out.shape.str(), " vs x ", x.shape.str());
  TRIDENT_CHECK(gamma.numel() == C && beta.numel() == C, op, ": gamma/beta must be [", C, "]");
  check_f32(op, mean, N, "mean");
  check_f32(op, rstd, N, "rstd");
  if (N == 0 || C == 0) return;
  dispatch_float(x.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_kernel<T><<<grid_for(N, kRowsPerBlock, INT32_MAX), 32 * kRowsPerBlock, 0, s>>>(
        x.ptr<T>(), any_ptr(gamma), any_ptr(beta), any_ptr(out), mean.ptr<float>(), rstd.ptr<float>(), N, C);
  });
  CUDA_CHECK_LAUNCH();
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
    layernorm_dx_kernel<T><<<grid_for(N, kRowsPerBlock, INT32_MAX), 32 * kRowsPerBlock, 0, s>>>(
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
