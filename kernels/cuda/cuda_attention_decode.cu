// Attention of one new token per sequence over a KV cache (generation), the CPU op's twin:
// the token's K and V are written into the caches at `pos`, then q attends over [0, pos].
// One block per (batch, head): its threads write the head's K/V slice, compute the pos + 1
// scaled scores into shared memory, take the block maximum and the sum of exponentials (a
// fixed-order block reduction, so the result is deterministic), then thread d of the
// first D threads accumulates out[d] over the positions. Decoding is bound by reading the
// cache once; one block per head is enough parallelism for the batch sizes of generation.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kThreads = 128;  // >= the largest head dim (128)

template <typename T>
__global__ void __launch_bounds__(kThreads)
    attention_decode_kernel(const T* qkv, T* k_cache, T* v_cache, AnyPtr out, int pos, int64_t Tmax, int H, int D,
                            float scale) {
  extern __shared__ float smem[];  // [pos + 1] scores, then [D] query
  __shared__ float red[32];
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const int64_t C = static_cast<int64_t>(H) * D;
  const T* q = qkv + b * 3 * C + h * D;
  const int64_t head0 = b * Tmax * C + h * D;  // (b, t = 0, h, 0) in a cache
  float* scores = smem;
  float* qs = smem + pos + 1;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    k_cache[head0 + pos * C + d] = q[C + d];
    v_cache[head0 + pos * C + d] = q[2 * C + d];
    qs[d] = to_f32(q[d]);
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int t = threadIdx.x; t <= pos; t += blockDim.x) {
    const T* k = k_cache + head0 + t * C;
    float s = 0.f;
    for (int d = 0; d < D; ++d) s += qs[d] * to_f32(k[d]);
    s *= scale;
    scores[t] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max(mx, red);
  float sum = 0.f;
  for (int t = threadIdx.x; t <= pos; t += blockDim.x) {
    const float p = expf(scores[t] - mx);
    scores[t] = p;
    sum += p;
  }
  sum = block_sum(sum, red);  // ends with a barrier: every score is written
  if (static_cast<int>(threadIdx.x) < D) {
    const T* v = v_cache + head0 + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t <= pos; ++t) acc += scores[t] * to_f32(v[t * C]);
    store_any(out, (static_cast<int64_t>(b) * H + h) * D + threadIdx.x, acc / sum);
  }
}

}  // namespace

// Host launchers.

void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, int pos, const Tensor& out,
                      cudaStream_t s) {
  const char* op = "attention_decode";
  for (const Tensor* t : {&k_cache, &v_cache})
    TRIDENT_CHECK(t->dtype == qkv.dtype, op, ": the caches must have qkv's dtype ", dtype_name(qkv.dtype));
  TRIDENT_CHECK(is_float(out.dtype), op, ": float output expected");
  TRIDENT_CHECK(qkv.ndim() == 4 && qkv.shape[1] == 3, op, ": qkv must be [B, 3, H, D], got ", qkv.shape.str());
  const int64_t B = qkv.shape[0], H = qkv.shape[2], D = qkv.shape[3];
  TRIDENT_CHECK(k_cache.ndim() == 4 && k_cache.shape[0] == B && k_cache.shape[2] == H && k_cache.shape[3] == D &&
                    v_cache.shape == k_cache.shape,
                op, ": caches must be [", B, ", Tmax, ", H, ", ", D, "], got ", k_cache.shape.str(), " and ",
                v_cache.shape.str());
  TRIDENT_CHECK(D <= kThreads, op, ": head dim ", D, " above ", kThreads);
  const int64_t Tmax = k_cache.shape[1];
  TRIDENT_CHECK(pos >= 0 && pos < Tmax, op, ": position ", pos, " outside the cache of ", Tmax);
  TRIDENT_CHECK(out.numel() == B * H * D, op, ": out ", out.shape.str(), " for [", B, ", ", H, ", ", D, "]");
  if (B == 0 || H == 0) return;
  const size_t smem = sizeof(float) * static_cast<size_t>(pos + 1 + D);
  TRIDENT_CHECK(smem <= 48 * 1024, op, ": position ", pos, " needs more shared memory than 48 KiB");
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  dispatch_float(qkv.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    attention_decode_kernel<T><<<static_cast<unsigned>(B * H), kThreads, smem, s>>>(
        qkv.ptr<T>(), k_cache.ptr<T>(), v_cache.ptr<T>(), any_ptr(out), pos, Tmax, static_cast<int>(H),
        static_cast<int>(D), scale);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
