// LayerNorm over the last dim (eps 1e-5, biased variance, fp32 statistics), and its fusion
// with the residual add in front of it (pre-LN GPT-2: resid = x + branch; ln = LN(resid)).
// Forward: a warp per row; with a branch the row is first summed (after the branch's
// dropout when one is asked for), rounded to the storage type and stored to resid (so the
// statistics are those of the stored residual, exactly as add() then layernorm_forward()
// compute them); then two passes (mean, centred variance) for accuracy, then the
// normalised output. Rows of up to 16 16-byte vectors per lane (4096 16-bit or 2048 fp32
// values) are held in registers, read once with all their loads in flight, and warps walk
// several rows, loading the next row while they work on the current one
// (layernorm_forward_walk_kernel; TRIDENT_LN_FWD_ROWS_PER_WARP=1 gives the older one row per
// warp, which an H200 ran at 71% of the copy rate against 79-88%). The plain forward's walking
// warps keep their next rows in shared memory instead of registers
// (layernorm_forward_ring_kernel: 81% of the copy rate against 78% on an H200, 2026-12-04;
// TRIDENT_LN_FWD_RING=0 gives the register-walking kernel). Wider rows, mixed dtypes and
// unaligned ones re-read the row (from L1 by then) in each pass. All forward kernels sum
// in the same order. mean and rstd are saved in f32 for the backward.
// Backward (dx +=, which is also the residual's gradient path; dgamma/dbeta +=), two paths:
// - Fused (the usual case: every row operand has x's dtype, 16-byte vectors fit, the row
//   fits one block): one kernel reads dout and x once and dx once, and writes dx once, the
//   minimum traffic. A block owns a chunk of rows (a function of the shape only) and walks
//   them one at a time with all its threads spanning the row: each thread holds kVPT
//   16-byte vectors of dout and x in registers (the next row's are loaded before this
//   row's block reduction, so the loads overlap it), the two row sums go through warp sums
//   and a per-warp shared array added in warp order, and dx is updated from registers.
//   gamma is loaded once per block; each thread accumulates its columns' dgamma (d*xhat)
//   and dbeta (d) over the chunk in registers and writes them as f32 partials [chunk, C].
//   column_partials_accumulate (cuda_reduce.cu) then adds the chunks to dgamma and dbeta
//   in a fixed order, both in one launch.
// - Fallback (mixed dtypes, unaligned pointers, C not a multiple of the vector width, very
//   wide rows): one warp per row for dx, then a thread-per-column kernel for per-chunk
//   dgamma/dbeta partials, then column_partials_accumulate.
// Both are deterministic without float atomics: every sum has a fixed order that depends
// on the shape only (never on the GPU model or on scheduling).
// Row kernels move kV elements per access: 16-byte vectors when every row operand has the
// main operand's dtype, the row length allows it and the pointers are aligned (the usual
// case); kV = 1 otherwise, with runtime-typed parameters and outputs.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dropout.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/env_switch.h"

namespace trident::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = 8;    // warps per block, one row each
constexpr int kMaxRowVectors = 16;  // 16-byte vectors per lane of a forward row held in registers

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

// The fused backward and the walking forward keep row data as raw 16-byte words and convert
// an element to f32 where it is used: the values they hold across reductions and the next
// row's prefetch stay packed (4 registers per vector, not one per 16-bit element).
using Raw = Vec<uint32_t, 4>;

// The 16 bytes at p, or zeros when !ok (columns past the row, or no row).
template <typename T>
__device__ __forceinline__ Raw load_raw(const T* p, bool ok) {
  Raw r;
  if (ok) {
    r = load_vec<uint32_t, 4>(reinterpret_cast<const uint32_t*>(p));
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) r.v[i] = 0u;
  }
  return r;
}

// Element j (of kVec16<T>) of a raw vector, in f32: the same value as to_f32 of the element.
template <typename T>
__device__ __forceinline__ float raw_f32(const Raw& r, int j) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(r.v[j]);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const uint32_t w = r.v[j >> 1];
    return __uint_as_float((j & 1) ? (w & 0xffff0000u) : (w << 16));
  } else {
    const uint32_t w = r.v[j >> 1];
    return __half2float(__ushort_as_half(static_cast<unsigned short>((j & 1) ? (w >> 16) : (w & 0xffffu))));
  }
}

// The 16 bytes of v as a raw vector.
template <typename T, int kV>
__device__ __forceinline__ Raw raw_of(const Vec<T, kV>& v) {
  static_assert(sizeof(Vec<T, kV>) == sizeof(Raw), "16-byte vectors");
  Raw r;
  memcpy(&r, &v, sizeof(Raw));
  return r;
}

// Where row n's elements sit in the dropout's numbering: sample sample_base + n / T, the
// row's first element index (n % T) C (T = rows_per_sample).
struct DropoutRow {
  uint64_t sample, index0;
};
__device__ __forceinline__ DropoutRow dropout_row(const DropoutParams& d, int64_t n, int64_t C, int64_t T) {
  return {d.sample_base + static_cast<uint64_t>(n / T), static_cast<uint64_t>(n % T) * static_cast<uint64_t>(C)};
}

// The residual step of the forward for kV elements at column c of row n: v (x) += the
// branch's values, after the dropout when kDrop (as dropout_forward(branch, T =
// rows_per_sample) draws it: element (n, c) is index (n % T) C + c of sample sample_base +
// n / T, rounded to T before the add); the sum is rounded to T and stored to resid.
// add_branch takes the branch's values b already loaded; residual_step loads them.
template <typename T, int kV, bool kDrop>
__device__ __forceinline__ void add_branch(Vec<T, kV>& v, Vec<T, kV> b, T* resid, int64_t at, uint64_t index,
                                           const DropoutParams& drop, uint64_t sample) {
  if constexpr (kDrop) {
    if constexpr (kV % 4 == 0) {  // C % kV == 0: index starts a Philox block
      dropout_vec<T, kV>(b, drop, sample, index);
    } else {
#pragma unroll
      for (int j = 0; j < kV; ++j) b.v[j] = from_f32<T>(dropout_one(to_f32(b.v[j]), drop, sample, index + j));
    }
  }
#pragma unroll
  for (int j = 0; j < kV; ++j) v.v[j] = from_f32<T>(to_f32(v.v[j]) + to_f32(b.v[j]));
  store_vec<T, kV>(resid + at, v);
}
template <typename T, int kV, bool kDrop>
__device__ __forceinline__ void residual_step(Vec<T, kV>& v, const T* branch, T* resid, int64_t at, uint64_t index,
                                              const DropoutParams& drop, uint64_t sample) {
  add_branch<T, kV, kDrop>(v, load_vec<T, kV>(branch + at), resid, at, index, drop, sample);
}

// branch == nullptr: plain LayerNorm of x (resid unused); else of resid = x + branch (with
// the branch's dropout when kDrop, see residual_step). kDrop is a template argument so that
// the LayerNorms without a dropout keep their register count (with the Philox rounds a
// thread needs ~56 instead of ~40). Rows of any width: three passes over the row, the later
// two re-reading it (from L1 by then).
template <typename T, int kV, bool kDrop>
__global__ void layernorm_forward_kernel(const T* x, const T* branch, T* resid, AnyPtr gamma, AnyPtr beta,
                                         AnyPtr out, float* mean, float* rstd, int64_t N, int64_t C,
                                         DropoutParams drop, int64_t rows_per_sample) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const int64_t base = n * C;
  const DropoutRow dr = dropout_row(drop, n, C, rows_per_sample);
  const uint64_t sample = dr.sample, index0 = dr.index0;
  float s = 0.f;
  for (int64_t c = lane * kV; c < C; c += 32 * kV) {
    Vec<T, kV> v = load_vec<T, kV>(x + base + c);
    // each lane re-reads only the resid it wrote
    if (branch != nullptr) residual_step<T, kV, kDrop>(v, branch, resid, base + c, index0 + c, drop, sample);
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

// A row's mean and rstd from the kVPT vectors of kV values a lane holds (value(i, j):
// element j of vector i, col(i): its column), in the order of layernorm_forward_kernel's
// sums: the mean, then the centred variance (two passes, for accuracy).
template <int kVPT, int kV, typename Col, typename Value>
__device__ __forceinline__ void row_stats(int64_t C, Col col, Value value, float& mu, float& r) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kVPT; ++i)
    if (col(i) < C) {
#pragma unroll
      for (int j = 0; j < kV; ++j) s += value(i, j);
    }
  mu = warp_sum(s) / static_cast<float>(C);
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kVPT; ++i)
    if (col(i) < C) {
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float d = value(i, j) - mu;
        ss += d * d;
      }
    }
  r = rsqrtf(warp_sum(ss) / static_cast<float>(C) + kEps);
}

// The same with the row held in registers: lane l keeps vectors l, l + 32, ... (at most
// kVPT of kVec16<T> elements: rows up to 32 kVPT kV wide, C % kV == 0, every row operand
// of dtype T). All loads of a row are issued before any of them is used and the row is
// read from memory once (the three-pass kernel re-reads it twice and keeps one load in
// flight per lane). The sums run in the three-pass kernel's order: the same bits.
template <typename T, int kVPT, bool kDrop>
__global__ void layernorm_forward_rows_kernel(const T* x, const T* branch, T* resid, const T* gamma, const T* beta,
                                              T* out, float* mean, float* rstd, int64_t N, int64_t C,
                                              DropoutParams drop, int64_t rows_per_sample) {
  constexpr int kV = kVec16<T>;
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * (int64_t)kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const int64_t base = n * C;
  const DropoutRow dr = dropout_row(drop, n, C, rows_per_sample);
  const uint64_t sample = dr.sample, index0 = dr.index0;
  auto col = [&](int i) { return (static_cast<int64_t>(i) * 32 + lane) * kV; };
  Vec<T, kV> v[kVPT];
#pragma unroll
  for (int i = 0; i < kVPT; ++i)
    if (col(i) < C) v[i] = load_vec<T, kV>(x + base + col(i));
  if (branch != nullptr) {
#pragma unroll
    for (int i = 0; i < kVPT; ++i)
      if (col(i) < C) residual_step<T, kV, kDrop>(v[i], branch, resid, base + col(i), index0 + col(i), drop, sample);
  }
  float mu, r;
  row_stats<kVPT, kV>(C, col, [&](int i, int j) { return to_f32(v[i].v[j]); }, mu, r);
#pragma unroll
  for (int i = 0; i < kVPT; ++i)
    if (col(i) < C) {
      float g[kV], b[kV], y[kV];
      load_k<kV>(gamma + col(i), g);
      load_k<kV>(beta + col(i), b);
#pragma unroll
      for (int j = 0; j < kV; ++j) y[j] = (to_f32(v[i].v[j]) - mu) * r * g[j] + b[j];
      store_k<kV>(out + base + col(i), y);
    }
  if (lane == 0) {
    mean[n] = mu;
    rstd[n] = r;
  }
}

// Gamma's and beta's 16-byte vectors in row order, in shared memory (params[0], params[1]),
// loaded once per block by every thread of it (then a barrier).
template <typename T, int kVPT>
__device__ __forceinline__ void load_params_shared(Raw (&params)[2][kVPT * 32], const T* gamma, const T* beta,
                                                   int64_t C) {
  constexpr int kV = kVec16<T>;
  const int64_t vectors = C / kV;
  for (int i = threadIdx.x; i < kVPT * 32; i += blockDim.x) {
    params[0][i] = load_raw(gamma + static_cast<int64_t>(i) * kV, i < vectors);
    params[1][i] = load_raw(beta + static_cast<int64_t>(i) * kV, i < vectors);
  }
  __syncthreads();
}

// Row n's LayerNorm from the vectors a lane holds (v[i]: columns (32 i + lane) kV ..., the
// rows kernel's layout) with gamma and beta from load_params_shared: row_stats, the
// normalised output, and mean and rstd from lane 0. The rows kernel's arithmetic in its
// order: the same bits.
template <typename T, int kVPT>
__device__ __forceinline__ void normalise_row(const Raw (&v)[kVPT], const Raw (&params)[2][kVPT * 32], T* out,
                                              float* mean, float* rstd, int64_t n, int64_t C, int lane) {
  constexpr int kV = kVec16<T>;
  auto col = [&](int i) { return (static_cast<int64_t>(i) * 32 + lane) * kV; };
  float mu, r;
  row_stats<kVPT, kV>(C, col, [&](int i, int j) { return raw_f32<T>(v[i], j); }, mu, r);
#pragma unroll
  for (int i = 0; i < kVPT; ++i)
    if (col(i) < C) {
      const Raw g = params[0][i * 32 + lane], bt = params[1][i * 32 + lane];
      float y[kV];
#pragma unroll
      for (int j = 0; j < kV; ++j) y[j] = (raw_f32<T>(v[i], j) - mu) * r * raw_f32<T>(g, j) + raw_f32<T>(bt, j);
      store_k<kV>(out + n * C + col(i), y);
    }
  if (lane == 0) {
    mean[n] = mu;
    rstd[n] = r;
  }
}

// The row-in-registers forward with several rows per warp (the default; the kernel above is
// TRIDENT_LN_FWD_ROWS_PER_WARP=1). With one row per warp, a warp's memory traffic stops while
// it reduces, draws its dropout, fetches gamma and beta and stores, and a block's slot stays
// taken until its slowest warp is done. Here warp w of the grid (W warps) walks
// the rows w, w + W, w + 2W, ... and issues the next row's loads (x, and the branch when
// kRes) before it works on the current one, so they stay in flight through its reductions,
// Philox draws and stores; gamma and beta are read once per block into shared memory. The
// launcher sizes the grid to the warps that fit the GPU at once (or to a fixed number of
// rows per warp). Each row's arithmetic is layernorm_forward_rows_kernel's, in the same
// order: the same bits. kRes: resid = x + branch (kDrop: with the branch's dropout).
template <typename T, int kVPT, bool kRes, bool kDrop>
__global__ void __launch_bounds__(32 * kRowsPerBlock, kVPT <= 4 ? 3 : kVPT <= 8 ? 2 : 1)
    layernorm_forward_walk_kernel(const T* x, const T* branch, T* resid, const T* gamma, const T* beta, T* out,
                                  float* mean, float* rstd, int64_t N, int64_t C, DropoutParams drop,
                                  int64_t rows_per_sample) {
  static_assert(kRes || !kDrop, "the dropout is the branch's");
  constexpr int kV = kVec16<T>;
  __shared__ Raw params_s[2][kVPT * 32];  // gamma's and beta's vectors, in row order
  load_params_shared<T, kVPT>(params_s, gamma, beta, C);
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  auto col = [&](int i) { return (static_cast<int64_t>(i) * 32 + lane) * kV; };
  // Row m's vectors of p (zeros past the row, or when m >= N).
  auto load = [&](const T* p, int64_t m, Raw(&vec)[kVPT]) {
#pragma unroll
    for (int i = 0; i < kVPT; ++i) vec[i] = load_raw(p + m * C + col(i), m < N && col(i) < C);
  };
  // The branch is loaded a row ahead too, except with the dropout: there its loads are
  // issued at the start of the row and the Philox rounds cover them (and the registers of
  // a third row go to the Philox state).
  constexpr bool kBranchAhead = kRes && !kDrop;
  int64_t n = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + (threadIdx.x >> 5);
  Raw v[kVPT], b[kVPT];
  load(x, n, v);
  if constexpr (kBranchAhead) load(branch, n, b);
#pragma unroll 1
  for (; n < N; n += warps) {
    const int64_t base = n * C;
    if constexpr (kRes) {
      if constexpr (!kBranchAhead) load(branch, n, b);
      const DropoutRow dr = dropout_row(drop, n, C, rows_per_sample);
      // The dropout's keep bits (dropout_vec's draws) first: they need no data, so the
      // Philox rounds run while this row's loads are still in flight. Bit i * kV + j: element
      // j of vector i.
      uint32_t keep[(kVPT * kV + 31) / 32] = {};
      if constexpr (kDrop) {
#pragma unroll
        for (int i = 0; i < kVPT; ++i)
#pragma unroll
          for (int q = 0; q < kV / 4; ++q) {
            if (col(i) >= C) break;
            const Philox4 rnd = dropout_block(drop, dr.sample, ((dr.index0 + col(i)) >> 2) + q);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const int bit = i * kV + 4 * q + j;
              if ((rnd.v[j] >> 8) >= drop.threshold) keep[bit / 32] |= 1u << (bit % 32);
            }
          }
      }
      // add_branch's arithmetic (with dropout_vec's).
#pragma unroll
      for (int i = 0; i < kVPT; ++i)
        if (col(i) < C) {
          Vec<T, kV> sum;
#pragma unroll
          for (int j = 0; j < kV; ++j) {
            const int bit = i * kV + j;
            float bj = raw_f32<T>(b[i], j);
            if constexpr (kDrop) bj = to_f32(from_f32<T>((keep[bit / 32] >> (bit % 32)) & 1u ? bj * drop.scale : 0.0f));
            sum.v[j] = from_f32<T>(raw_f32<T>(v[i], j) + bj);
          }
          store_vec<T, kV>(resid + base + col(i), sum);
          v[i] = raw_of(sum);
        }
    }
    // The next row's loads, in flight through this row's reductions and stores (issued after
    // the residual's stores: a thread holds at most three rows' vectors).
    Raw nv[kVPT], nb[kVPT];
    load(x, n + warps, nv);
    if constexpr (kBranchAhead) load(branch, n + warps, nb);
    normalise_row<T, kVPT>(v, params_s, out, mean, rstd, n, C, lane);
#pragma unroll
    for (int i = 0; i < kVPT; ++i) {
      v[i] = nv[i];
      if constexpr (kBranchAhead) b[i] = nb[i];
    }
  }
}

// The plain forward with each warp's next rows in flight to shared memory (the default;
// TRIDENT_LN_FWD_RING=0 gives the walking kernel, which an H200 ran at 78% of the copy rate
// against this kernel's 81%, 2026-12-04). The walking kernel holds its next row in registers: two rows of registers a lane (110 at C
// 2048 bf16) allow two blocks of 8 warps an SM, with one row each (64 KB an SM) in flight,
// and it ran at 76-79% of the copy rate against 88% with a residual (two rows' loads in
// flight). Here lane l copies its own vectors of the warp's next kStages - 1 rows into the
// warp's ring of kStages row buffers in dynamic shared memory (cp.async: no registers while
// in flight), waits for the oldest, reads it into registers and normalises it as the
// walking kernel does (normalise_row: the same bits). A lane reads back only what it copied
// itself, so the ring needs no barrier. Warp w of the grid (W warps) takes rows w, w + W, ...
template <typename T, int kVPT, int kStages>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layernorm_forward_ring_kernel(const T* x, const T* gamma, const T* beta, T* out, float* mean, float* rstd,
                                  int64_t N, int64_t C) {
  static_assert(kStages >= 2, "a row in flight while one is normalised");
  constexpr int kV = kVec16<T>;
  constexpr int kRowRaws = kVPT * 32;  // 16-byte vectors of one row buffer
  __shared__ Raw params_s[2][kVPT * 32];
  extern __shared__ __align__(16) unsigned char ring_smem[];
  load_params_shared<T, kVPT>(params_s, gamma, beta, C);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  Raw* ring = reinterpret_cast<Raw*>(ring_smem) + warp * kStages * kRowRaws;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  auto col = [&](int i) { return (static_cast<int64_t>(i) * 32 + lane) * kV; };
  // Row m's vectors of this lane into buffer b, as one commit group (an empty one past N).
  auto fetch = [&](int64_t m, int b) {
    if (m < N) {
#pragma unroll
      for (int i = 0; i < kVPT; ++i)
        if (col(i) < C) cp_async16_to_shared(ring + b * kRowRaws + i * 32 + lane, x + m * C + col(i));
    }
    cp_async_commit_group();
  };
  // Row n + k W goes to buffer k % kStages.
  int64_t n = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + warp;
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) fetch(n + k * warps, k);
  int b = 0;
#pragma unroll 1
  for (; n < N; n += warps) {
    // The buffer before this row's held the previous row, read into registers last time.
    fetch(n + (kStages - 1) * warps, b == 0 ? kStages - 1 : b - 1);
    cp_async_wait_groups<kStages - 1>();  // every group but the newest kStages - 1: this row's
    Raw v[kVPT];
#pragma unroll
    for (int i = 0; i < kVPT; ++i) v[i] = col(i) < C ? ring[b * kRowRaws + i * 32 + lane] : Raw{};
    normalise_row<T, kVPT>(v, params_s, out, mean, rstd, n, C, lane);
    b = b + 1 == kStages ? 0 : b + 1;
  }
  cp_async_wait_groups<0>();  // no copy outlives the block (the last groups are empty)
}
// The ring's dynamic shared memory: kStages row buffers for each warp of a block.
template <int kVPT, int kStages>
constexpr int ring_smem_bytes() {
  return kRowsPerBlock * kStages * kVPT * 32 * static_cast<int>(sizeof(Raw));
}
constexpr int kRingStages = 3;

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

// ---- fused backward ------------------------------------------------------------------
constexpr int kFusedMaxThreads = 512;         // threads per block at most (a row's vectors / kVPT)
constexpr int kFusedMaxElems = 16;            // kVPT * kV at most: C <= 8192 (registers, no spills)
constexpr int64_t kFusedMinRows = 16;         // rows per chunk at least (partials: 1/16 of the traffic)
constexpr int64_t kFusedPartialBytes = 16 << 20;  // partials of both outputs at most (rows per chunk grow)
// Chunks at most, whatever C: more than the GPU runs at once only adds partials. At C 2048
// (256 threads, 4 blocks an SM) 512 chunks are one wave on 132 SMs; the 16 MiB rule alone
// gave 1024 chunks past 16K rows, two waves and 32 MB of partial traffic on 536 MB.
constexpr int64_t kFusedMaxChunks = 512;

// One block per chunk of rows [blockIdx.x * rows_per_chunk, + rows_per_chunk), clipped to N.
// Thread t holds the vectors t, t + blockDim.x, ... (kVPT of them; those past the row are
// zeros and are never stored) of every row. C is a multiple of kV; blockDim.x is a multiple
// of 32 with blockDim.x * kVPT * kV >= C. pg/pb: [gridDim.x, C] f32 partials of dgamma
// (sum of d*xhat) and dbeta (sum of d) over the chunk's rows, each in row order.
template <typename T, int kVPT>
__global__ void __launch_bounds__(kFusedMaxThreads, kVPT == 1 ? 2 : 1)
    layernorm_backward_fused_kernel(const T* dout, const T* x, const T* gamma, const float* mean,
                                    const float* rstd, T* dx, int64_t N, int64_t C, int64_t rows_per_chunk,
                                    float* pg, float* pb) {
  constexpr int kV = kVec16<T>;
  constexpr bool kPrefetch = kVPT <= 2;  // registers allow the next row's dout and x
  __shared__ float2 row_sums[2][kFusedMaxThreads / 32];  // by row parity: one barrier per row
  // gamma lives in shared memory (each thread reads back only its own vectors): the
  // registers go to the accumulators and to the loads in flight.
  __shared__ Raw gamma_s[kVPT * kFusedMaxThreads];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t r0 = blockIdx.x * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  int col[kVPT];
  bool ok[kVPT];
  float acc_g[kVPT][kV], acc_b[kVPT][kV];
#pragma unroll
  for (int k = 0; k < kVPT; ++k) {
    col[k] = (threadIdx.x + k * blockDim.x) * kV;
    ok[k] = col[k] < C;
    gamma_s[threadIdx.x + k * blockDim.x] = load_raw(gamma + col[k], ok[k]);
#pragma unroll
    for (int j = 0; j < kV; ++j) acc_g[k][j] = acc_b[k][j] = 0.f;
  }
  // Row n's dout and x (zeros when !valid: past the chunk) and its statistics.
  auto load_row = [&](int64_t n, bool valid, Raw(&d)[kVPT], Raw(&xv)[kVPT], float& mu, float& r) {
#pragma unroll
    for (int k = 0; k < kVPT; ++k) {
      d[k] = load_raw(dout + n * C + col[k], valid && ok[k]);
      xv[k] = load_raw(x + n * C + col[k], valid && ok[k]);
    }
    mu = valid ? mean[n] : 0.f;
    r = valid ? rstd[n] : 0.f;
  };
  Raw d[kVPT], xv[kVPT];
  float mu = 0.f, r = 0.f;
  if (kPrefetch) load_row(r0, true, d, xv, mu, r);
#pragma unroll 1
  for (int64_t n = r0; n < r1; ++n) {
    if (!kPrefetch) load_row(n, true, d, xv, mu, r);
    Raw a[kVPT];  // dx's old values: loaded now, used after the reduction
#pragma unroll
    for (int k = 0; k < kVPT; ++k) a[k] = load_raw(dx + n * C + col[k], ok[k]);
    Raw nd[kVPT], nx[kVPT];
    float nmu = 0.f, nr = 0.f;
    if (kPrefetch) load_row(n + 1, n + 1 < r1, nd, nx, nmu, nr);

    float sg = 0.f, sgx = 0.f;
#pragma unroll
    for (int k = 0; k < kVPT; ++k) {
      const Raw g = gamma_s[threadIdx.x + k * blockDim.x];
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float dj = raw_f32<T>(d[k], j), xhat = (raw_f32<T>(xv[k], j) - mu) * r, dg = dj * raw_f32<T>(g, j);
        sg += dg;
        sgx += dg * xhat;
        acc_g[k][j] += dj * xhat;
        acc_b[k][j] += dj;
      }
    }
    sg = warp_sum(sg);
    sgx = warp_sum(sgx);
    float2* sums = row_sums[(n - r0) & 1];
    if (lane == 0) sums[warp] = make_float2(sg, sgx);
    __syncthreads();
    float tg = 0.f, tgx = 0.f;
    for (int w = 0; w < nwarps; ++w) {
      const float2 s = sums[w];
      tg += s.x;
      tgx += s.y;
    }
    const float mg = tg / static_cast<float>(C), mgx = tgx / static_cast<float>(C);
#pragma unroll
    for (int k = 0; k < kVPT; ++k) {
      if (!ok[k]) continue;
      const Raw g = gamma_s[threadIdx.x + k * blockDim.x];
      Vec<T, kV> o;
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float xhat = (raw_f32<T>(xv[k], j) - mu) * r, dg = raw_f32<T>(d[k], j) * raw_f32<T>(g, j);
        o.v[j] = from_f32<T>(raw_f32<T>(a[k], j) + r * (dg - mg - xhat * mgx));
      }
      store_vec<T, kV>(dx + n * C + col[k], o);
    }
    if (kPrefetch) {
#pragma unroll
      for (int k = 0; k < kVPT; ++k) {
        d[k] = nd[k];
        xv[k] = nx[k];
      }
      mu = nmu;
      r = nr;
    }
  }
  float* og = pg + blockIdx.x * C;
  float* ob = pb + blockIdx.x * C;
#pragma unroll
  for (int k = 0; k < kVPT; ++k) {
    if (!ok[k]) continue;
#pragma unroll
    for (int j = 0; j < kV; j += 4) {
      Vec<float, 4> vg, vb;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        vg.v[i] = acc_g[k][j + i];
        vb.v[i] = acc_b[k][j + i];
      }
      store_vec<float, 4>(og + col[k] + j, vg);
      store_vec<float, 4>(ob + col[k] + j, vb);
    }
  }
}

// The fused backward's launch geometry, a function of the shape only (so every GPU adds in
// the same order). vpt == 0: the row does not fit one block (use the fallback).
struct FusedGeometry {
  int vpt = 0;              // vectors per thread: 1, 2 or 4 (with vpt * kv <= kFusedMaxElems)
  int threads = 0;          // a multiple of 32, at most kFusedMaxThreads
  int64_t rows_per_chunk = 0;
  int64_t chunks = 0;       // blocks
};
FusedGeometry fused_geometry(int64_t N, int64_t C, int kv) {
  FusedGeometry f;
  const int64_t vectors = C / kv;
  for (int vpt = 1; vpt <= 4 && vpt * kv <= kFusedMaxElems; vpt *= 2) {
    const int64_t threads = ((vectors + vpt - 1) / vpt + 31) / 32 * 32;
    if (threads <= kFusedMaxThreads) {
      f.vpt = vpt;
      f.threads = static_cast<int>(threads);
      break;
    }
  }
  if (f.vpt == 0) return f;
  int64_t max_chunks = kFusedPartialBytes / (2 * static_cast<int64_t>(sizeof(float)) * C);
  max_chunks = std::clamp<int64_t>(max_chunks, 1, kFusedMaxChunks);
  f.rows_per_chunk = (N + max_chunks - 1) / max_chunks;
  if (f.rows_per_chunk < kFusedMinRows) f.rows_per_chunk = kFusedMinRows;
  f.chunks = (N + f.rows_per_chunk - 1) / f.rows_per_chunk;
  return f;
}

void check_f32(const char* op, const Tensor& t, int64_t n, const char* what) {
  TRIDENT_CHECK(t.dtype == DType::F32 && t.numel() == n, op, ": ", what, " must be f32 [", n, "], got ",
                dtype_name(t.dtype), " ", t.shape.str());
}

// TRIDENT_LN_FWD_ROWS_PER_WARP, read on every forward call (so one process can time each
// setting): unset, empty or 0 is the walking kernel on as many warps as fit the GPU at once
// (the default: on an H200 at 32768 x 2048 bf16, 79.4% of the copy rate plain, 87.7% with the
// residual, 81.5% with its dropout, against 71.4%, 70.2% and 55.0% one row per warp); 1 is
// one row per warp (layernorm_forward_rows_kernel); k > 1 the walking kernel on a grid of
// ceil(rows / k) warps. It changes the speed, never the bits.
constexpr const char* kRowsPerWarpEnv = "TRIDENT_LN_FWD_ROWS_PER_WARP";
int env_rows_per_warp() {
  const char* v = std::getenv(kRowsPerWarpEnv);
  if (v == nullptr || v[0] == '\0') return 0;
  char* end = nullptr;
  const long k = std::strtol(v, &end, 10);
  TRIDENT_CHECK(*end == '\0' && k >= 0 && k <= 65536, "layernorm_forward: ", kRowsPerWarpEnv, "=", v,
                " is not a number of rows per warp (0: as many warps as fit, the default; 1: one row per warp; "
                "k: k rows per warp, up to 65536)");
  return static_cast<int>(k);
}

// TRIDENT_LN_FWD_RING (read on every call): unset or 1, the plain forward's walking warps
// keep their next rows in shared memory (layernorm_forward_ring_kernel); 0, in registers
// (layernorm_forward_walk_kernel: "layernorm fwd, walking warps" beside "layernorm fwd" in
// trident-bench --kernels). The same bits either way.
bool env_ring() { return env_switch("TRIDENT_LN_FWD_RING", "layernorm_forward") != 0; }

// Which forward kernel a call took (the emulator's tests check it).
struct ForwardPath {
  bool in_registers = false;  // the row in registers (else the three-pass kernel)
  bool walk = false;          // warps walk rows: layernorm_forward_walk_kernel or _ring_kernel
  bool ring = false;          // layernorm_forward_ring_kernel
  unsigned grid = 0;          // blocks of kRowsPerBlock warps
};

// The forward's kernel choice (16-byte vectors when every row operand has x's dtype, C
// allows it and the pointers are aligned; else element-wise with runtime-typed parameters
// and outputs), shared by the host launcher and the CPU emulator's test. resident(kernel,
// smem) lets `kernel` have smem bytes of dynamic shared memory and gives the blocks of
// kRowsPerBlock warps of it that the GPU holds at once, or 0 when that much shared memory
// does not fit a block or no block fits an SM (the ring kernel then gives way to the
// walking one, whose grid is at least one block).
template <typename Resident>
ForwardPath forward_typed(const Tensor& x, const Tensor& branch, const Tensor& resid, const Tensor& gamma,
                          const Tensor& beta, const Tensor& out, const Tensor& mean, const Tensor& rstd, int T,
                          const DropoutKey& branch_drop, cudaStream_t s, Resident&& resident) {
  const int64_t N = x.rows(), C = x.cols();
  const bool fused = !branch.empty();
  const DropoutParams drop = dropout_params(branch_drop);
  const int64_t rows_per_sample = T > 0 ? T : 1;
  const int rows_per_warp = env_rows_per_warp();
  const bool ring = !fused && rows_per_warp != 1 && env_ring();
  ForwardPath path;
  dispatch_float(x.dtype, "layernorm_forward", [&](auto tag) {
    using T_ = decltype(tag);
    const bool same = gamma.dtype == x.dtype && beta.dtype == x.dtype && out.dtype == x.dtype;
    const int kv = same ? vector_width<T_>(C, {x.data, branch.data, resid.data, gamma.data, beta.data, out.data}) : 1;
    const T_* bp = fused ? branch.ptr<T_>() : nullptr;
    T_* rp = fused ? resid.ptr<T_>() : nullptr;
    const unsigned grid = grid_for(N, kRowsPerBlock, INT32_MAX);
    const bool dropped = fused && drop.enabled;
    const int64_t vectors_per_lane = (C / kVec16<T_> + 31) / 32;
    if (kv > 1 && vectors_per_lane <= kMaxRowVectors) {  // the row in registers
      auto launch = [&](auto kernel, unsigned blocks) {
        kernel<<<blocks, 32 * kRowsPerBlock, 0, s>>>(x.ptr<T_>(), bp, rp, gamma.ptr<T_>(), beta.ptr<T_>(),
                                                     out.ptr<T_>(), mean.ptr<float>(), rstd.ptr<float>(), N, C, drop,
                                                     rows_per_sample);
        path = ForwardPath{true, rows_per_warp != 1, false, blocks};
      };
      // The walking kernels' grid: the blocks that fit the GPU at once (rows_per_warp 0), or
      // enough for rows_per_warp rows a warp.
      auto walk_grid = [&](const void* kernel, int smem) {
        const int64_t fit = resident(kernel, smem);  // also lets the kernel have its shared memory
        if (rows_per_warp != 0) return grid_for(N, kRowsPerBlock * rows_per_warp, INT32_MAX);
        return fit < static_cast<int64_t>(grid) ? static_cast<unsigned>(fit > 1 ? fit : 1) : grid;
      };
      auto walk = [&](auto kernel) { launch(kernel, walk_grid(reinterpret_cast<const void*>(kernel), 0)); };
      auto pick = [&](auto vpt) {
        constexpr int kVPT = decltype(vpt)::value;
        constexpr int ring_smem = ring_smem_bytes<kVPT, kRingStages>();
        const auto ring_kernel = layernorm_forward_ring_kernel<T_, kVPT, kRingStages>;
        const void* ring_ptr = reinterpret_cast<const void*>(ring_kernel);
        if (ring && resident(ring_ptr, ring_smem) > 0) {  // else its ring does not fit: the walking kernel
          const unsigned blocks = walk_grid(ring_ptr, ring_smem);
          ring_kernel<<<blocks, 32 * kRowsPerBlock, ring_smem, s>>>(x.ptr<T_>(), gamma.ptr<T_>(), beta.ptr<T_>(),
                                                                    out.ptr<T_>(), mean.ptr<float>(),
                                                                    rstd.ptr<float>(), N, C);
          path = ForwardPath{true, true, true, blocks};
        } else if (rows_per_warp == 1)
          dropped ? launch(layernorm_forward_rows_kernel<T_, kVPT, true>, grid)
                  : launch(layernorm_forward_rows_kernel<T_, kVPT, false>, grid);
        else if (!fused)
          walk(layernorm_forward_walk_kernel<T_, kVPT, false, false>);
        else
          dropped ? walk(layernorm_forward_walk_kernel<T_, kVPT, true, true>)
                  : walk(layernorm_forward_walk_kernel<T_, kVPT, true, false>);
      };
      if (vectors_per_lane <= 4)
        pick(std::integral_constant<int, 4>{});
      else if (vectors_per_lane <= 8)
        pick(std::integral_constant<int, 8>{});
      else
        pick(std::integral_constant<int, kMaxRowVectors>{});
      return;
    }
    auto launch = [&](auto kernel) {
      kernel<<<grid, 32 * kRowsPerBlock, 0, s>>>(x.ptr<T_>(), bp, rp, any_ptr(gamma), any_ptr(beta), any_ptr(out),
                                                 mean.ptr<float>(), rstd.ptr<float>(), N, C, drop, rows_per_sample);
      path = ForwardPath{false, false, false, grid};
    };
    if (kv > 1)
      dropped ? launch(layernorm_forward_kernel<T_, kVec16<T_>, true>)
              : launch(layernorm_forward_kernel<T_, kVec16<T_>, false>);
    else
      dropped ? launch(layernorm_forward_kernel<T_, 1, true>) : launch(layernorm_forward_kernel<T_, 1, false>);
  });
  return path;
}

// Which backward path a call took (the emulator's tests check that each shape exercises the
// path it is meant to).
struct BackwardPath {
  bool fused = false;
  int vpt = 0, threads = 0;
  int64_t chunks = 0;  // row chunks (fused: blocks of the fused kernel)
};

// The backward's kernels (fused when every row operand has x's dtype, the vectors fit and
// fused_geometry covers the row; else the fallback), shared by the host launcher and the
// CPU emulator's test: partials_of(bytes) gives f32 scratch for the dgamma and dbeta
// partials, accumulate(pg, pb, chunks, dgamma, dbeta) adds the chunks of each onto its
// destination in a fixed order (one launch for both).
template <typename PartialsOf, typename Accumulate>
BackwardPath backward_typed(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                            const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                            cudaStream_t s, PartialsOf&& partials_of, Accumulate&& accumulate) {
  const int64_t N = x.rows(), C = x.cols();
  BackwardPath path;
  dispatch_float(x.dtype, "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const bool same = dout.dtype == x.dtype && gamma.dtype == x.dtype && dx.dtype == x.dtype;
    const int kv = same ? vector_width<T>(C, {dout.data, x.data, gamma.data, dx.data}) : 1;
    const FusedGeometry f = kv > 1 ? fused_geometry(N, C, kv) : FusedGeometry{};
    if (f.vpt > 0) {
      float* pg = partials_of(sizeof(float) * f.chunks * C);
      float* pb = partials_of(sizeof(float) * f.chunks * C);
      auto launch = [&](auto vpt) {
        constexpr int kVPT = decltype(vpt)::value;
        layernorm_backward_fused_kernel<T, kVPT><<<static_cast<unsigned>(f.chunks), f.threads, 0, s>>>(
            dout.ptr<T>(), x.ptr<T>(), gamma.ptr<T>(), mean.ptr<float>(), rstd.ptr<float>(), dx.ptr<T>(), N, C,
            f.rows_per_chunk, pg, pb);
      };
      if (f.vpt == 1) {
        launch(std::integral_constant<int, 1>{});
      } else if (f.vpt == 2) {
        launch(std::integral_constant<int, 2>{});
      } else {
        if constexpr (4 * kVec16<T> <= kFusedMaxElems) launch(std::integral_constant<int, 4>{});
      }
      accumulate(pg, pb, f.chunks, dgamma, dbeta);
      path = BackwardPath{true, f.vpt, f.threads, f.chunks};
      return;
    }
    // Fallback: dx, then per-chunk dgamma/dbeta partials, then the chunks added in order.
    const int chunks = column_chunks(N, C);
    const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
    float* pg = partials_of(sizeof(float) * chunks * C);
    float* pb = partials_of(sizeof(float) * chunks * C);
    const unsigned rows_grid = grid_for(N, kRowsPerBlock, INT32_MAX);
    if (kv > 1)
      layernorm_dx_kernel<T, kVec16<T>><<<rows_grid, 32 * kRowsPerBlock, 0, s>>>(
          any_ptr(dout), x.ptr<T>(), any_ptr(gamma), mean.ptr<float>(), rstd.ptr<float>(), any_ptr(dx), N, C);
    else
      layernorm_dx_kernel<T, 1><<<rows_grid, 32 * kRowsPerBlock, 0, s>>>(
          any_ptr(dout), x.ptr<T>(), any_ptr(gamma), mean.ptr<float>(), rstd.ptr<float>(), any_ptr(dx), N, C);
    const dim3 grid(static_cast<unsigned>((C + 255) / 256), static_cast<unsigned>(chunks));
    layernorm_param_partials_kernel<T><<<grid, 256, 0, s>>>(any_ptr(dout), x.ptr<T>(), mean.ptr<float>(),
                                                            rstd.ptr<float>(), N, C, rows_per_chunk, pg, pb);
    accumulate(pg, pb, chunks, dgamma, dbeta);
    path.chunks = chunks;
  });
  return path;
}

}  // namespace

// Host launchers.

// The blocks of kRowsPerBlock warps of `kernel` with smem bytes of dynamic shared memory
// (allowed past the default 48 KB here) that the current GPU holds at once (its SMs times
// the blocks that fit one; 0 when the kernel's shared memory exceeds what a block may have
// on this GPU: an A100 allows 163 KB, an H100 227 KB; or when no block fits an SM), cached
// per device and kernel (a kernel always asks for the same smem).
static int64_t resident_blocks(const void* kernel, int smem) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int64_t> cache;
  const std::lock_guard<std::mutex> lock(mu);
  if (const auto it = cache.find({dev, kernel}); it != cache.end()) return it->second;
  // Cached only once every call below succeeded: a throw leaves nothing behind.
  int sms = 0, per_sm = 0, optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  int64_t blocks = 0;
  if (static_cast<int64_t>(attr.sharedSizeBytes) + smem <= optin) {
    if (smem > 0) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * kRowsPerBlock, smem));
    blocks = static_cast<int64_t>(sms) * per_sm;  // 0 (no block fits): the caller takes another kernel
  }
  cache.emplace(std::make_pair(dev, kernel), blocks);
  return blocks;
}

// Shared by layernorm_forward and residual_layernorm_forward (branch empty: plain LN;
// T and branch_drop: the branch's dropout).
static void launch_forward(const char* op, const Tensor& x, const Tensor& branch, const Tensor& resid,
                           const Tensor& gamma, const Tensor& beta, const Tensor& out, const Tensor& mean,
                           const Tensor& rstd, int T, const DropoutKey& branch_drop, cudaStream_t s) {
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
  TRIDENT_CHECK(!branch_drop.enabled() || (fused && T > 0 && N % T == 0), op, ": rows ", N,
                " not a multiple of T=", T, " for the branch's dropout");
  check_f32(op, mean, N, "mean");
  check_f32(op, rstd, N, "rstd");
  if (N == 0 || C == 0) return;
  forward_typed(x, branch, resid, gamma, beta, out, mean, rstd, T, branch_drop, s, resident_blocks);
  CUDA_CHECK_LAUNCH();
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, cudaStream_t s) {
  launch_forward("layernorm_forward", x, Tensor(), Tensor(), gamma, beta, out, mean, rstd, 1, DropoutKey{}, s);
}

void residual_layernorm_forward(const Tensor& x, const Tensor& branch, const Tensor& resid, const Tensor& gamma,
                                const Tensor& beta, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                cudaStream_t s, int T, const DropoutKey& branch_drop) {
  launch_forward("residual_layernorm_forward", x, branch, resid, gamma, beta, out, mean, rstd, T, branch_drop, s);
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

  std::deque<Scratch> partials;  // deque: no element moves (Scratch cannot be moved)
  backward_typed(
      dout, x, gamma, mean, rstd, dx, dgamma, dbeta, s,
      [&](size_t bytes) { return partials.emplace_back(scratch, bytes).as<float>(); },
      [&](const float* pg, const float* pb, int64_t chunks, const Tensor& dg, const Tensor& db) {
        column_partials_accumulate(pg, dg.data, dg.dtype, pb, db.data, db.dtype, chunks, C, s);
      });
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
