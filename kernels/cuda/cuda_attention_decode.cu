// Attention of new tokens over a KV cache (generation), the CPU op's twin: the T tokens of
// each sequence at positions pos .. pos + T - 1 write their K and V into the caches, and the
// query at pos + t attends over [0, pos + t]. T = 1 is a decoding step; T > 1 feeds a prompt
// in one pass.
// One block per (batch, token, head): its threads write the token's K/V slice, compute the
// pos + t + 1 scaled scores into shared memory, take the block maximum and the sum of
// exponentials (a fixed-order block reduction, so the result is deterministic), then thread
// d of the first D threads accumulates out[d] over the positions. Keys and values before
// `pos` come from the caches, those of the new tokens from qkv itself: another block of the
// same launch writes them into the cache, with no ordering between blocks (the values are
// the same, qkv and the caches share the dtype). A decoding step is bound by reading the
// cache once, one block per (batch, head). A long prefill reads each key once per later
// query of its head (T^2 / 2 reads, from L2 mostly): simple rather than flash-tiled, as a
// prompt is fed once per request.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kThreads = 128;  // >= the largest head dim (128)

template <typename T>
__global__ void __launch_bounds__(kThreads)
    attention_decode_kernel(const T* qkv, T* k_cache, T* v_cache, AnyPtr out, int pos, int Tnew, int64_t Tmax,
                            int H, int D, float scale) {
  extern __shared__ float smem[];  // [pos + t + 1] scores, then [D] query
  __shared__ float red[32];
  const int h = blockIdx.x % H, t = blockIdx.x / H % Tnew, b = blockIdx.x / (H * Tnew);
  const int64_t C = static_cast<int64_t>(H) * D;
  const T* new_tokens = qkv + static_cast<int64_t>(b) * Tnew * 3 * C + h * D;  // (b, 0, Q, h, 0)
  const T* q = new_tokens + t * 3 * C;
  const int64_t head0 = b * Tmax * C + h * D;  // (b, position 0, h, 0) in a cache
  const int last = pos + t;                      // the last key this query sees
  // Key (which = 1) or value (2) of position j: the cache's before pos, qkv's from pos on.
  const auto key_value = [&](int which, int j) {
    return j < pos ? (which == 1 ? k_cache : v_cache) + head0 + j * C : new_tokens + (j - pos) * 3 * C + which * C;
  };
  float* scores = smem;
  float* qs = smem + last + 1;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    k_cache[head0 + last * C + d] = q[C + d];
    v_cache[head0 + last * C + d] = q[2 * C + d];
    qs[d] = to_f32(q[d]);
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= last; j += blockDim.x) {
    const T* k = key_value(1, j);
    float s = 0.f;
    for (int d = 0; d < D; ++d) s += qs[d] * to_f32(k[d]);
    s *= scale;
    scores[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max(mx, red);
  float sum = 0.f;
  for (int j = threadIdx.x; j <= last; j += blockDim.x) {
    const float p = expf(scores[j] - mx);
    scores[j] = p;
    sum += p;
  }
  sum = block_sum(sum, red);  // ends with a barrier: every score is written
  if (static_cast<int>(threadIdx.x) < D) {
    float acc = 0.f;
    for (int j = 0; j <= last; ++j) acc += scores[j] * to_f32(key_value(2, j)[threadIdx.x]);
    store_any(out, ((static_cast<int64_t>(b) * Tnew + t) * H + h) * D + threadIdx.x, acc / sum);
  }
}

}  // namespace

// Host launchers.

void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, int pos, const Tensor& out,
                      cudaStream_t s) {
  const char* op = "attention_decode";
  const DecodeShape d = check_decode_shapes(op, qkv, k_cache, v_cache, pos, out);
  TRIDENT_CHECK(d.D <= kThreads, op, ": head dim ", d.D, " above ", kThreads);
  if (d.B == 0 || d.H == 0) return;
  const size_t smem = sizeof(float) * static_cast<size_t>(pos + d.T + d.D);
  TRIDENT_CHECK(smem <= 48 * 1024, op, ": position ", pos + d.T - 1, " needs more shared memory than 48 KiB");
  const int64_t blocks = d.B * d.T * d.H;
  TRIDENT_CHECK(blocks <= INT32_MAX, op, ": ", blocks, " blocks");
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  dispatch_float(qkv.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    attention_decode_kernel<T><<<static_cast<unsigned>(blocks), kThreads, smem, s>>>(
        qkv.ptr<T>(), k_cache.ptr<T>(), v_cache.ptr<T>(), any_ptr(out), pos, static_cast<int>(d.T), d.Tmax,
        static_cast<int>(d.H), static_cast<int>(d.D), scale);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
