// GEMM with few rows, as decoding runs it: out[M, N] = a[M, K] w[N, K]^T (+ bias[N]), M up to
// kGemvMaxRows (a step's sequences), w a linear layer's weight [out, in] read once. cuBLASLt
// tiles such a product like any other (a few tiles of M = 8, each walking K): ~10 us a call
// where reading the weight takes ~1 us. Here a warp takes kCols whole weight rows (columns n
// of out) and walks K in 16-byte vectors, each lane multiplying its slice by every row of a
// (a is small: it stays in L1/L2), then the warp adds its lanes' sums by shuffles (a fixed
// order: deterministic). With `pre`, the GELU layer's product: pre = the product (+ bias)
// rounded to T, out = gelu(pre) of the tanh form (as the unfused matmul and gelu kernels
// compute it; the erf form's layer takes the unfused ops, as with cuBLASLt).
// Opt-in (TRIDENT_GEMM_GEMV=1, read by Gemm on every call) until timed on a GPU.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gelu.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kGemvWarps = 4;  // warps a block

// Warp (blockIdx.x, warp w) takes columns n0 .. n0 + kCols of out; rows m < M <= kRows.
template <typename T, int kRows, int kCols, bool kGelu>
__global__ void __launch_bounds__(32 * kGemvWarps)
    gemv_kernel(const T* __restrict__ a, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                T* __restrict__ pre, int M, int64_t N, int64_t K) {
  constexpr int kV = kVec16<T>;
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5)) * kCols;
  if (n0 >= N) return;
  float acc[kCols][kRows];
#pragma unroll
  for (int c = 0; c < kCols; ++c)
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc[c][m] = 0.f;
  // Columns past N and rows past M read the last ones again (no branch in the loop; their
  // sums are not written).
  const T* w_row[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) w_row[c] = w + (n0 + c < N ? n0 + c : N - 1) * K;
  const T* a_row[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) a_row[m] = a + static_cast<int64_t>(m < M ? m : M - 1) * K;
  for (int64_t k = static_cast<int64_t>(lane) * kV; k < K; k += 32 * kV) {
    float wv[kCols][kV];
#pragma unroll
    for (int c = 0; c < kCols; ++c) load_k<kV>(w_row[c] + k, wv[c]);
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      float av[kV];
      load_k<kV>(a_row[m] + k, av);
#pragma unroll
      for (int c = 0; c < kCols; ++c)
#pragma unroll
        for (int j = 0; j < kV; ++j) acc[c][m] += wv[c][j] * av[j];
    }
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c)
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc[c][m] = warp_sum(acc[c][m]);
  // Every lane holds every sum; lane i writes sum i = c kRows + m, (m, n0 + c) of out (more
  // than 32 sums: in turns).
  constexpr int kSums = kCols * kRows;
#pragma unroll
  for (int turn = 0; turn < (kSums + 31) / 32; ++turn) {
    const int i = turn * 32 + lane;
    float v = 0.f;
#pragma unroll
    for (int c = 0; c < kCols; ++c)
#pragma unroll
      for (int m = 0; m < kRows; ++m)
        if (c * kRows + m == i) v = acc[c][m];
    const int c = i / kRows, m = i % kRows;
    const int64_t n = n0 + c;
    if (i >= kSums || m >= M || n >= N) continue;
    if (bias != nullptr) v += to_f32(bias[n]);
    if constexpr (kGelu) {
      const T rounded = from_f32<T>(v);
      pre[m * N + n] = rounded;
      out[m * N + n] = from_f32<T>(gelu<Gelu::Tanh>(to_f32(rounded)));
    } else {
      out[m * N + n] = from_f32<T>(v);
    }
  }
}

// The launch for M rows: the fewest rows of kRows in {1, 4, 8, 16} that hold M; 4 columns
// a warp when there are enough columns for two blocks an SM of 132, else 1 (more warps in
// flight for small N).
template <typename T, bool kGelu>
void launch_gemv(const T* a, const T* w, const T* bias, T* out, T* pre, int M, int64_t N, int64_t K,
                 cudaStream_t s) {
  const auto go = [&](auto kernel, int cols) {
    const int64_t per_block = int64_t{kGemvWarps} * cols;
    const unsigned grid = static_cast<unsigned>((N + per_block - 1) / per_block);
    kernel<<<grid, 32 * kGemvWarps, 0, s>>>(a, w, bias, out, pre, M, N, K);
  };
  const bool wide = N >= int64_t{2} * 132 * kGemvWarps * 4;
  if (M == 1) {
    wide ? go(gemv_kernel<T, 1, 4, kGelu>, 4) : go(gemv_kernel<T, 1, 1, kGelu>, 1);
  } else if (M <= 4) {
    wide ? go(gemv_kernel<T, 4, 4, kGelu>, 4) : go(gemv_kernel<T, 4, 1, kGelu>, 1);
  } else if (M <= 8) {
    wide ? go(gemv_kernel<T, 8, 4, kGelu>, 4) : go(gemv_kernel<T, 8, 1, kGelu>, 1);
  } else {
    wide ? go(gemv_kernel<T, 16, 4, kGelu>, 4) : go(gemv_kernel<T, 16, 1, kGelu>, 1);
  }
}

// What the kernel takes (here for the CPU emulator's test too).
inline bool gemv_shape_fits(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& w,
                            const Tensor& bias) {
  const DType t = out.dtype;
  if (!is_float(t) || a.dtype != t || w.dtype != t || (!pre.empty() && pre.dtype != t) ||
      (!bias.empty() && bias.dtype != t))
    return false;
  const int64_t M = a.rows(), K = a.cols();
  if (M < 1 || M > kGemvMaxRows || K < 1 || w.cols() != K || out.rows() != M || out.cols() != w.rows()) return false;
  if (!pre.empty() && (pre.rows() != M || pre.cols() != w.rows())) return false;
  if (!bias.empty() && bias.numel() != w.rows()) return false;
  const int64_t v = static_cast<int64_t>(16 / dtype_size(t));  // kVec16
  return K % v == 0 && aligned_to({a.data, w.data}, 16);
}

// gemv_small_m's launch after its checks (here for the CPU emulator's test too).
inline void gemv_typed(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& w, const Tensor& bias,
                       cudaStream_t s) {
  const int M = static_cast<int>(a.rows());
  const int64_t N = w.rows(), K = w.cols();
  dispatch_float(out.dtype, "gemv", [&](auto tag) {
    using T = decltype(tag);
    const T* b = bias.empty() ? nullptr : bias.ptr<T>();
    if (pre.empty())
      launch_gemv<T, false>(a.ptr<T>(), w.ptr<T>(), b, out.ptr<T>(), nullptr, M, N, K, s);
    else
      launch_gemv<T, true>(a.ptr<T>(), w.ptr<T>(), b, out.ptr<T>(), pre.ptr<T>(), M, N, K, s);
  });
}

}  // namespace

bool gemv_small_m(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& w, const Tensor& bias,
                  cudaStream_t s) {
  if (!gemv_shape_fits(out, pre, a, w, bias)) return false;
  gemv_typed(out, pre, a, w, bias, s);
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace trident::cuda
