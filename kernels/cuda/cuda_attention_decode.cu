// Attention of new tokens over a KV cache (generation), the CPU op's twin: the T tokens of
// each sequence at positions pos .. pos + T - 1 (pos: the call's, or the sequence's own from
// the per-row positions on the device) write their K and V into the caches, and the query at
// pos + t attends over [0, pos + t]. T = 1 is a decoding step; T > 1 feeds a prompt in one
// pass. The launch is planned from the call's largest position (the host does not read the
// per-row ones): a sequence behind it leaves some key ranges empty.
//
// Keys and values before `pos` come from the caches, those of the new tokens from qkv itself:
// another block of the same launch writes them into the cache, with no ordering between
// blocks (the values are the same: qkv and the caches share the dtype). Every sum is in a
// fixed order (the result does not depend on the schedule). Two kernels:
// - the vector kernel (16-byte aligned rows, D a multiple of a vector: every GPT-2 shape).
//   In a block, each key is read by a group of G lanes, one 16-byte vector a lane (a key row
//   is one coalesced read of G x 16 bytes), 4 keys a lane in flight; the group's lanes sum
//   the dot product by shuffles, the scores go to shared memory, and the weighted values are
//   summed per group in registers, then over the groups in shared memory. One block per
//   (query, head) and, when those are too few to fill the GPU, per range of keys as well
//   ("split-K", the flash-decoding way): a decoding step of one sequence has only H rows, and
//   one block keeps only a few kilobytes of loads in flight, so each row's keys are cut into
//   up to 4 x SMs / rows ranges of at least kMinSplitKeys keys (and into as many as the
//   scores' shared memory needs, GPU full or not); each block writes its range's maximum, sum
//   of exponentials and unnormalised output, and a second kernel combines them. The ranges
//   depend on the SM count and on B T H, so a sequence's last bits can differ between GPUs
//   and between batches (as the GEMMs' can), never between runs.
// - the scalar kernel (any other view, or TRIDENT_ATTN_DECODE_SCALAR=1): one block per
//   (query, head), each thread a key at a time, element by element.
// A prompt from position 0 (every sequence) in 16-bit types goes through the training forward's flash kernels
// (cuda_attention.cu: each key read once a tile of 64 queries; their probabilities are
// rounded to 16 bits before P V, and their TRIDENT_ATTN_* settings apply) and a copy of its
// K and V rows into the caches. Other prefill passes (after cached positions, or in fp32)
// take the kernels above, which read each key once per later query of its head (T^2 / 2
// reads, from L2 mostly).
// tests/cuda/emulated/test_attention_decode.cpp runs both kernels and the plans below on the
// CPU emulator (extract_device_code.cmake copies the anonymous namespace).
#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/env_switch.h"

namespace trident::cuda {
namespace {

constexpr int kThreads = 128;  // >= the largest head dim (128)
// Blocks an SM the splits aim at (4 warps each: 16 warps an SM, each with 4 x 512 bytes of
// loads in flight), and a split's keys at least (one pass of the block's 16 groups x 4 keys
// at D 64 in 16 bits: with fewer, the block's fixed costs, its three block reductions and
// the partials, would outweigh its loads).
constexpr int kSplitBlocksPerSm = 4;
constexpr int kMinSplitKeys = 64;
// Keys a lane has in flight in the vector kernel's loops.
constexpr int kUnroll = 4;
// Dynamic shared memory without an opt-in: 48 KiB a block, less the kernels' static red[32].
constexpr size_t kSmemLimit = 48 * 1024 - 32 * sizeof(float);

struct DecodeArgs {
  const void* qkv = nullptr;  // [B, T, 3, H, D]
  void* k_cache = nullptr;    // [B, Tmax, H, D]
  void* v_cache = nullptr;
  AnyPtr out{};               // [B, T, H, D]
  float* part_o = nullptr;    // splits > 1: [B T H, splits, D] each range's unnormalised output
  float* part_ml = nullptr;   // splits > 1: [B T H, splits, 2] its maximum score, sum of exponentials
  const int* row_pos = nullptr;  // [B] sequence b's first new position, or null: every sequence's is pos
  int B = 0, pos = 0, Tnew = 1, H = 0, D = 0;
  int64_t Tmax = 0;
  int splits = 1, chunk = 0;  // split s takes keys [s chunk, (s + 1) chunk) (those the query sees)
  float scale = 1.f;
};

// Sequence b's first new position.
__device__ __forceinline__ int first_position(const int* row_pos, int pos, int b) {
  return row_pos ? row_pos[b] : pos;
}

// The scalar kernel: its threads write the token's K/V slice, compute the pos + t + 1 scaled
// scores into shared memory, take the block maximum and the sum of exponentials, then thread
// d of the first D threads accumulates out[d] over the positions.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    attention_decode_kernel(const T* qkv, T* k_cache, T* v_cache, AnyPtr out, const int* row_pos, int call_pos,
                            int Tnew, int64_t Tmax, int H, int D, float scale) {
  extern __shared__ float smem[];  // [pos + t + 1] scores, then [D] query
  __shared__ float red[32];
  const int h = blockIdx.x % H, t = blockIdx.x / H % Tnew, b = blockIdx.x / (H * Tnew);
  const int pos = first_position(row_pos, call_pos, b);
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

// The vector kernel: block (row, split) with row = (b, t, h) = blockIdx.x; G lanes a key
// (a power of two, G vectors >= D), kV = 16 / sizeof(T) elements a vector. Lanes past D (D
// 120 at 16 lanes of 8) hold zeros.
template <typename T, int G>
__global__ void __launch_bounds__(kThreads) attention_decode_vec_kernel(const DecodeArgs a) {
  constexpr int kV = static_cast<int>(16 / sizeof(T)), kGroups = kThreads / G, kStep = kGroups * kUnroll;
  static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "a key's lanes: a power of two within a warp");
  extern __shared__ float smem[];  // [kGroups][D] the groups' outputs, then the split's scores
  __shared__ float red[32];
  const int H = a.H, D = a.D;
  const int row = static_cast<int>(blockIdx.x), split = static_cast<int>(blockIdx.y);
  const int h = row % H, t = row / H % a.Tnew, b = row / (H * a.Tnew);
  const int pos = first_position(a.row_pos, a.pos, b);
  const int64_t C = static_cast<int64_t>(H) * D;
  const T* new_tokens = static_cast<const T*>(a.qkv) + static_cast<int64_t>(b) * a.Tnew * 3 * C + h * D;
  const T* q = new_tokens + t * 3 * C;
  T* k_cache = static_cast<T*>(a.k_cache);
  T* v_cache = static_cast<T*>(a.v_cache);
  const int64_t head0 = b * a.Tmax * C + h * D;  // (b, position 0, h, 0) in a cache
  const int last = pos + t;
  const int begin = split * a.chunk, end = min(begin + a.chunk, last + 1);  // this block's keys
  const int g = static_cast<int>(threadIdx.x) / G, gl = static_cast<int>(threadIdx.x) % G;
  const int col = gl * kV;     // the lane's first element of a row
  const bool lane_has = col < D;
  // Key (which = 1) or value (2) of position j: the cache's before pos, qkv's from pos on.
  const auto row_of = [&](int which, int j) -> const T* {
    return j < pos ? (which == 1 ? k_cache : v_cache) + head0 + static_cast<int64_t>(j) * C
                   : new_tokens + static_cast<int64_t>(j - pos) * 3 * C + which * C;
  };
  if (split == 0 && static_cast<int>(threadIdx.x) * kV < D) {  // the token's K and V into the caches
    const int d = static_cast<int>(threadIdx.x) * kV;
    store_vec<T, kV>(k_cache + head0 + static_cast<int64_t>(last) * C + d, load_vec<T, kV>(q + C + d));
    store_vec<T, kV>(v_cache + head0 + static_cast<int64_t>(last) * C + d, load_vec<T, kV>(q + 2 * C + d));
  }
  float qf[kV] = {};
  if (lane_has) load_k<kV>(q + col, qf);
  float* outs = smem;
  float* scores = smem + kGroups * D;

  // Scores: group g takes keys begin + g, + kGroups, ... The loop bounds are the same for
  // every lane (the group sums shuffle across the warp); keys past `end` are not read.
  float mx = -INFINITY;
  for (int base = begin; base < end; base += kStep) {
    float kf[kUnroll][kV];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kGroups + g;
      if (lane_has && j < end) {
        load_k<kV>(row_of(1, j) + col, kf[u]);
      } else {
#pragma unroll
        for (int e = 0; e < kV; ++e) kf[u][e] = 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float s = 0.f;
#pragma unroll
      for (int e = 0; e < kV; ++e) s += qf[e] * kf[u][e];
#pragma unroll
      for (int m = G / 2; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);  // the same sum in every lane
      const int j = base + u * kGroups + g;
      if (j < end) {
        s *= a.scale;
        mx = fmaxf(mx, s);
        if (gl == 0) scores[j - begin] = s;
      }
    }
  }
  mx = block_max(mx, red);  // its barriers also publish the scores
  float sum = 0.f;
  for (int i = static_cast<int>(threadIdx.x); i < end - begin; i += kThreads) {
    const float p = expf(scores[i] - mx);
    scores[i] = p;
    sum += p;
  }
  sum = block_sum(sum, red);  // ends with a barrier: every weight is written

  // Weighted values: each group sums its keys' in registers, in key order.
  float acc[kV] = {};
  for (int base = begin; base < end; base += kStep) {
    float vf[kUnroll][kV], w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kGroups + g;
      w[u] = 0.f;
#pragma unroll
      for (int e = 0; e < kV; ++e) vf[u][e] = 0.f;
      if (lane_has && j < end) {
        load_k<kV>(row_of(2, j) + col, vf[u]);
        w[u] = scores[j - begin];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int e = 0; e < kV; ++e) acc[e] += w[u] * vf[u][e];
  }
  if (lane_has)
#pragma unroll
    for (int e = 0; e < kV; ++e) outs[g * D + col + e] = acc[e];
  __syncthreads();
  const int d = static_cast<int>(threadIdx.x);
  if (d < D) {
    float o = 0.f;
    for (int k = 0; k < kGroups; ++k) o += outs[k * D + d];
    const int64_t at = static_cast<int64_t>(row) * a.splits + split;
    if (a.splits == 1) {
      store_any(a.out, static_cast<int64_t>(row) * D + d, o / sum);
    } else {
      a.part_o[at * D + d] = o;
      if (d == 0) {
        a.part_ml[2 * at] = mx;  // -inf for a range past the query's keys (sum 0)
        a.part_ml[2 * at + 1] = sum;
      }
    }
  }
}

// The splits' partials of each row combined (split order): out = sum_s e^(m_s - M) o_s /
// sum_s e^(m_s - M) l_s, M the largest m_s. Thread d of block `row` writes out[row, d].
__global__ void __launch_bounds__(kThreads) attention_decode_combine_kernel(const DecodeArgs a) {
  const int64_t row = blockIdx.x;
  const int d = static_cast<int>(threadIdx.x);
  if (d >= a.D) return;
  const float* ml = a.part_ml + row * a.splits * 2;
  float M = -INFINITY;
  for (int s = 0; s < a.splits; ++s) M = fmaxf(M, ml[2 * s]);
  float l = 0.f, o = 0.f;
  for (int s = 0; s < a.splits; ++s) {
    if (ml[2 * s] == -INFINITY) continue;  // a range past the query's keys
    const float w = expf(ml[2 * s] - M);
    l += w * ml[2 * s + 1];
    o += w * a.part_o[(row * a.splits + s) * a.D + d];
  }
  store_any(a.out, row * a.D + d, o / l);
}

// The T new tokens' K and V rows into the caches at positions pos .. pos + T - 1, a 16-byte
// vector a thread (the flash prefill's share of a call, every sequence at pos: the attention
// kernels write them otherwise).
template <typename T>
__global__ void __launch_bounds__(kThreads) attention_decode_cache_kernel(const DecodeArgs a) {
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  const int64_t C = static_cast<int64_t>(a.H) * a.D, vectors = C / kV;
  const int64_t n = static_cast<int64_t>(a.B) * a.Tnew * vectors;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t token = i / vectors, c = (i - token * vectors) * kV;  // token: b T + t
    const int64_t b = token / a.Tnew, t = token - b * a.Tnew;
    const T* k = static_cast<const T*>(a.qkv) + token * 3 * C + C + c;
    const int64_t at = (b * a.Tmax + a.pos + t) * C + c;
    store_vec<T, kV>(static_cast<T*>(a.k_cache) + at, load_vec<T, kV>(k));
    store_vec<T, kV>(static_cast<T*>(a.v_cache) + at, load_vec<T, kV>(k + C));
  }
}
template <typename T>
void launch_cache_rows(const DecodeArgs& a, cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(a.B) * a.Tnew * a.H * a.D / static_cast<int64_t>(16 / sizeof(T));
  attention_decode_cache_kernel<T><<<grid_for(n, kThreads), kThreads, 0, s>>>(a);
}

// What one call launches. vector: the vector kernel with `lanes` lanes a key and `splits`
// ranges of `chunk` keys (splits > 1: then the combine kernel, with partials of
// partial_floats() floats); else the scalar kernel. smem: the first kernel's dynamic shared
// memory.
struct DecodePlan {
  bool vector = false;
  int lanes = 0, splits = 1, chunk = 0;
  size_t smem = 0;
  int64_t rows = 0;  // B T H: the blocks of one split
  int64_t partial_floats() const { return splits > 1 ? rows * splits : 0; }  // times D + 2 (part_o, part_ml)
};

// The plan of a call of shape d from position pos (the largest, with per-row positions):
// `vectors` when the vector kernel can run (16-byte aligned tensors, D a multiple of 16 /
// elem_bytes), `sms` the GPU's multiprocessors (the splits' target: kSplitBlocksPerSm blocks
// each). Throws when the scalar kernel's scores do not fit in shared memory.
DecodePlan plan_decode(const DecodeShape& d, int pos, bool vectors, int elem_bytes, int sms) {
  DecodePlan plan;
  plan.rows = d.B * d.T * d.H;
  const int64_t keys = pos + d.T;  // the last query's
  if (!vectors) {
    plan.smem = sizeof(float) * static_cast<size_t>(keys + d.D);
    TRIDENT_CHECK(plan.smem <= kSmemLimit, "attention_decode: position ", keys - 1,
                  " needs more shared memory than 48 KiB");
    return plan;
  }
  plan.vector = true;
  const int kV = 16 / elem_bytes;
  plan.lanes = 1;
  while (plan.lanes * kV < d.D) plan.lanes *= 2;
  const size_t outs = sizeof(float) * static_cast<size_t>(kThreads / plan.lanes * d.D);
  int64_t splits = 1;
  const int64_t target = static_cast<int64_t>(kSplitBlocksPerSm) * sms;
  if (plan.rows < target)
    splits = std::min((target + plan.rows - 1) / plan.rows, (keys + kMinSplitKeys - 1) / kMinSplitKeys);
  const int64_t max_keys = static_cast<int64_t>((kSmemLimit - outs) / sizeof(float));
  splits = std::max({splits, (keys + max_keys - 1) / max_keys, int64_t{1}});
  plan.chunk = static_cast<int>((keys + splits - 1) / splits);
  plan.splits = static_cast<int>((keys + plan.chunk - 1) / plan.chunk);
  TRIDENT_CHECK(plan.splits <= 65535, "attention_decode: ", keys, " keys need more than 65535 ranges");
  plan.smem = outs + sizeof(float) * static_cast<size_t>(plan.chunk);
  return plan;
}

// The kernels' arguments of a call (check_decode_shapes' d); no partials yet.
DecodeArgs decode_args(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, const DecodePositions& at,
                       const Tensor& out, const DecodeShape& d) {
  DecodeArgs a;
  a.qkv = qkv.data;
  a.k_cache = k_cache.data;
  a.v_cache = v_cache.data;
  a.out = any_ptr(out);
  a.B = static_cast<int>(d.B);
  a.pos = at.pos;
  a.row_pos = static_cast<const int*>(at.rows.data);
  a.Tnew = static_cast<int>(d.T);
  a.H = static_cast<int>(d.H);
  a.D = static_cast<int>(d.D);
  a.Tmax = d.Tmax;
  a.scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  return a;
}

// Launches `plan` on stream s. a.part_o and a.part_ml: partial_floats() x D and x 2 floats
// when the plan splits.
template <typename T>
void launch_decode(const DecodePlan& plan, DecodeArgs a, cudaStream_t s) {
  const unsigned rows = static_cast<unsigned>(plan.rows);
  if (!plan.vector) {
    attention_decode_kernel<T><<<rows, kThreads, plan.smem, s>>>(
        static_cast<const T*>(a.qkv), static_cast<T*>(a.k_cache), static_cast<T*>(a.v_cache), a.out, a.row_pos, a.pos,
        a.Tnew, a.Tmax, a.H, a.D, a.scale);
    return;
  }
  a.splits = plan.splits;
  a.chunk = plan.chunk;
  const dim3 grid(rows, static_cast<unsigned>(plan.splits));
  const auto go = [&](auto lanes) {
    constexpr int G = decltype(lanes)::value;
    attention_decode_vec_kernel<T, G><<<grid, kThreads, plan.smem, s>>>(a);
  };
  switch (plan.lanes) {
    case 1: go(std::integral_constant<int, 1>{}); break;
    case 2: go(std::integral_constant<int, 2>{}); break;
    case 4: go(std::integral_constant<int, 4>{}); break;
    case 8: go(std::integral_constant<int, 8>{}); break;
    case 16: go(std::integral_constant<int, 16>{}); break;
    default:  // 32: D above 64 in fp32 (16-bit rows of D <= 128 take at most 16 lanes)
      if constexpr (sizeof(T) == 4) {
        go(std::integral_constant<int, 32>{});
      } else {
        TRIDENT_CHECK(false, "attention_decode: ", plan.lanes, " lanes a key for a 16-bit head dim of ", a.D);
      }
      break;
  }
  if (plan.splits > 1) attention_decode_combine_kernel<<<rows, kThreads, 0, s>>>(a);
}

}  // namespace

// Host launchers.

// The current GPU's multiprocessors (the split's target), asked once a device and thread.
static int multiprocessors() {
  thread_local int cached_dev = -1, cached_sms = 0;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev != cached_dev) {
    CUDA_CHECK(cudaDeviceGetAttribute(&cached_sms, cudaDevAttrMultiProcessorCount, dev));
    cached_dev = dev;
  }
  return cached_sms;
}

void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, const DecodePositions& at,
                      const Tensor& out, CachingAllocator& scratch, cudaStream_t s) {
  const char* op = "attention_decode";
  const DecodeShape d = check_decode_shapes(op, qkv, k_cache, v_cache, at, out);
  TRIDENT_CHECK(d.D <= kThreads, op, ": head dim ", d.D, " above ", kThreads);
  if (d.B == 0 || d.H == 0 || d.D == 0) return;
  TRIDENT_CHECK(d.B * d.T * d.H <= INT32_MAX, op, ": ", d.B * d.T * d.H, " blocks");
  const size_t elem = dtype_size(qkv.dtype);
  // TRIDENT_ATTN_DECODE_SCALAR=1: the scalar kernel for every call, prefill included (the
  // kernel before the vector one and the flash prefill: the benchmark's "before").
  const bool vectors = d.D * static_cast<int64_t>(elem) % 16 == 0 &&
                       aligned_to({qkv.data, k_cache.data, v_cache.data}, 16) &&
                       env_switch("TRIDENT_ATTN_DECODE_SCALAR", op) != 1;
  DecodeArgs a = decode_args(qkv, k_cache, v_cache, at, out, d);
  // A prompt from position 0 (every sequence's) in 16-bit types: the training forward's flash kernels (a key
  // read once a tile of 64 queries, not once a query; the scalar and vector kernels read
  // T^2 / 2 keys), then the tokens' K and V into the caches.
  if (at.pos == 0 && at.rows.empty() && d.T > 1 && vectors && qkv.dtype != DType::F32 && out.dtype == qkv.dtype) {
    AttentionShape shape;
    shape.B = static_cast<int>(d.B);
    shape.T = static_cast<int>(d.T);
    shape.H = static_cast<int>(d.H);
    shape.D = static_cast<int>(d.D);
    Scratch lse(scratch, static_cast<size_t>(d.B * d.H * d.T) * sizeof(float));
    attention_forward(qkv, out, Tensor(lse.as<float>(), Shape{d.B * d.H * d.T}, DType::F32, qkv.device), shape,
                      DropoutKey{}, s);
    dispatch_float(qkv.dtype, op, [&](auto tag) { launch_cache_rows<decltype(tag)>(a, s); });
    CUDA_CHECK_LAUNCH();
    return;
  }
  const DecodePlan plan = plan_decode(d, at.pos, vectors, static_cast<int>(elem), multiprocessors());
  std::optional<Scratch> part;  // the splits' partials
  if (const int64_t partials = plan.partial_floats(); partials > 0) {
    a.part_o = part.emplace(scratch, static_cast<size_t>(partials * (d.D + 2)) * sizeof(float)).as<float>();
    a.part_ml = a.part_o + partials * d.D;
  }
  dispatch_float(qkv.dtype, op, [&](auto tag) { launch_decode<decltype(tag)>(plan, a, s); });
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
