// Dropout on [B*T, row] activations, forward and backward (both "=").
// Element (n, c) has index (n % T) * row + c within sample drop.sample_base + n / T, and
// is kept when philox.h's dropout_keep says so, so the masks agree bit for bit with the
// CPU twin and nothing is stored between the passes (the backward recomputes the mask
// from the key). With p = 0 it is a copy/cast (nothing at all when in and out are one
// tensor of one dtype).
//
// Why it is not one dropout_keep call per element: dropout_keep runs a whole
// Philox4x32-10 block for counter (index >> 2, index >> 34, sample, sample >> 32) and uses
// one of its four words, index & 3. The four elements 4k .. 4k+3 of a sample share that
// block, so this kernel computes each block once and uses all four words (a quarter of
// the Philox work: at one block per element the kernel ran at ~1/8 of the copy bandwidth
// on an H200). The elements of one sample are contiguous in memory (flat element s*S + i,
// S = T * row, is index i of sample s), so a thread takes "units" of kG consecutive
// elements of one sample, starting at an index that is a multiple of kG (of 4):
//   wide   : kG = 16 bytes of input (4 fp32 / 8 fp16 or bf16), one 16-byte load;
//            S % kG == 0, input 16-byte aligned, output aligned to its vector.
//   narrow : kG = 4 fp16/bf16, one 8-byte load; S % 4 == 0, vectors aligned.
//   scalar : kG = 4, element-wise accesses with a bound check (a sample's last unit may
//            be short): any S, any alignment, any output dtype (AnyPtr); still one
//            Philox block per 4 elements.
// The vector paths are templated on the output type too (9 input/output pairs), so each
// unit is one load, its Philox blocks and one or two stores. Each thread takes two units
// kBlock apart (coalesced), loads both before computing (Philox overlaps the loads) and,
// with 32-bit indices, is done: one tile per block, no division before the loads.
// Measured on an H200 ([8192, 2048], p = 0.1, a 32 MB bf16 copy = 18.6 us): bf16 22.6 us
// (148 us before), fp16 20.3 us, fp32 35.7 us (copy 34.2 us); the scalar path ~37 us.
// With dropout off the whole tensor is one "sample" (S = numel), so the copy vectorises
// whenever numel and the pointers allow.
// The keep test (x >> 8) >= ceil(p * 2^24) is philox_uniform(x) >= p in integers: the
// uniform is exactly (x >> 8) * 2^-24, so both agree for every x (no int->float
// conversion on the device; tested against philox_uniform for all 2^24 values).
#include <algorithm>
#include <cmath>

#include "core/philox.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dropout.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kUnroll = 2;  // units per thread per tile

// kG floats stored as T at p (kG * sizeof(T) bytes, aligned to the chunks) in 16-byte chunks
// (or one smaller vector when the whole unit is smaller).
template <typename T, int kG>
__device__ __forceinline__ void store_unit(T* p, const float (&v)[kG]) {
  constexpr int kC = kG < kVec16<T> ? kG : kVec16<T>;
#pragma unroll
  for (int c = 0; c < kG / kC; ++c) {
    Vec<T, kC> w;
#pragma unroll
    for (int j = 0; j < kC; ++j) w.v[j] = from_f32<T>(v[c * kC + j]);
    store_vec<T, kC>(p + c * kC, w);
  }
}

// Units of kG elements (kG a multiple of 4) of one sample: unit c is unit q = c % Q of
// sample s = c / Q (Q units per sample): elements S*s + kG*q ... of the tensor, indices
// kG*q ... of the sample (with S % kG == 0 simply elements kG*c ...). A tile is kUnroll *
// kBlock units; thread t takes its units t, t + kBlock, ... so that every vector access of
// a warp is contiguous, and loads all of them before it computes any, so the Philox
// blocks are computed while the loads are in flight. kVec: every unit is full and the
// pointers are aligned for one vector (O: the output storage type); else element-wise
// accesses (O = void: the output through AnyPtr), the last unit of a sample holding
// S - kG*q < kG elements. I: the index type, uint32_t when the tensor has fewer than
// 2^32 elements (fewer registers, a 32-bit division), else uint64_t.
template <typename I, typename T, typename O, int kG, bool kVec, int kUnroll>
__device__ __forceinline__ void dropout_tile(I tile, const T* in, AnyPtr out, I S, I Q, I units, const DropoutParams& d) {
  Vec<T, kG> raw[kUnroll];
#pragma unroll
  for (int r = 0; r < kUnroll; ++r) {
    const I c = tile + r * kBlock + threadIdx.x;
    if (c >= units) break;
    if constexpr (kVec) {  // S % kG == 0: unit c starts at element kG * c, no division before the load
      raw[r] = load_vec<T, kG>(in + c * kG);
    } else {
      const I s = c / Q, i = (c - s * Q) * kG, e = s * S + i;
#pragma unroll
      for (int j = 0; j < kG; ++j)
        if (static_cast<I>(j) < S - i) raw[r].v[j] = in[e + j];
    }
  }
#pragma unroll
  for (int r = 0; r < kUnroll; ++r) {
    const I c = tile + r * kBlock + threadIdx.x;
    if (c >= units) break;
    const I s = c / Q, i = (c - s * Q) * kG, e = kVec ? c * kG : s * S + i;
    const int n = kVec ? kG : static_cast<int>(S - i < static_cast<I>(kG) ? S - i : kG);
    float v[kG];
#pragma unroll
    for (int j = 0; j < kG; ++j) v[j] = j < n ? to_f32(raw[r].v[j]) : 0.0f;
    if (d.enabled) {
      const uint64_t sample = d.sample_base + s;
#pragma unroll
      for (int b = 0; b < kG / 4; ++b) {
        const Philox4 p = dropout_block(d, sample, static_cast<I>((i >> 2) + b));
#pragma unroll
        for (int j = 0; j < 4; ++j) v[4 * b + j] = (p.v[j] >> 8) >= d.threshold ? v[4 * b + j] * d.scale : 0.0f;
      }
    }
    if constexpr (kVec) {
      store_unit<O, kG>(static_cast<O*>(out.p) + e, v);
    } else {
#pragma unroll
      for (int j = 0; j < kG; ++j)
        if (j < n) store_any(out, static_cast<int64_t>(e + j), v[j]);
    }
  }
}

template <typename I, typename T, typename O, int kG, bool kVec, int kUnroll>
__global__ void __launch_bounds__(kBlock) dropout_kernel(const T* in, AnyPtr out, I S, I Q, I units, DropoutParams d) {
  static_assert(kG % 4 == 0, "a unit is whole Philox blocks");
  constexpr I kTile = kUnroll * kBlock;
  if constexpr (sizeof(I) == 4) {
    // 32-bit indices: one tile per block (the launcher sizes the grid so). In a loop the
    // compiler would keep Philox's loop-invariant round keys in ~20 more registers.
    dropout_tile<I, T, O, kG, kVec, kUnroll>(blockIdx.x * kTile, in, out, S, Q, units, d);
  } else {
    for (I tile = blockIdx.x * kTile; tile < units; tile += static_cast<I>(gridDim.x) * kTile)
      dropout_tile<I, T, O, kG, kVec, kUnroll>(tile, in, out, S, Q, units, d);
  }
}

enum class DropoutPath { kWide, kNarrow, kScalar };

inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Which kernel runs for a sample of S elements: the widest whose unit divides S and whose
// vectors the pointers' alignment allows. For fp32 the wide unit is the narrow one.
inline DropoutPath dropout_path(const Tensor& in, const Tensor& out, uint64_t S) {
  const size_t si = dtype_size(in.dtype), so = dtype_size(out.dtype);
  const uint64_t wide = 16 / si;  // kVec16 of the input type
  if (S % wide == 0 && aligned(in.data, 16) && aligned(out.data, std::min<size_t>(16, wide * so)))
    return DropoutPath::kWide;
  if (wide > 4 && S % 4 == 0 && aligned(in.data, 4 * si) && aligned(out.data, std::min<size_t>(16, 4 * so)))
    return DropoutPath::kNarrow;
  return DropoutPath::kScalar;
}

// One tile of kUnroll * kBlock units per block: with 32-bit indices when the tensor has
// fewer than 2^32 elements and the grid covers every tile; else 64-bit indices and a
// grid-stride loop over tiles beyond `max_blocks` blocks (or when `index64`, for tests).
template <typename T, typename O, int kG, bool kVec>
void launch_units(const Tensor& in, const Tensor& out, uint64_t S, uint64_t samples, const DropoutParams& d,
                  cudaStream_t s, int64_t max_blocks, bool index64) {
  constexpr int64_t kTile = kUnroll * kBlock, kMaxGrid = 0x7fffffff;
  const uint64_t Q = (S + kG - 1) / kG, units = samples * Q;
  const int64_t tiles = static_cast<int64_t>((units + kTile - 1) / kTile);
  if (!index64 && samples * S < (uint64_t{1} << 32) && tiles <= max_blocks) {
    dropout_kernel<uint32_t, T, O, kG, kVec, kUnroll><<<grid_for(tiles, 1, kMaxGrid), kBlock, 0, s>>>(
        in.ptr<T>(), any_ptr(out), static_cast<uint32_t>(S), static_cast<uint32_t>(Q), static_cast<uint32_t>(units), d);
  } else {
    dropout_kernel<uint64_t, T, O, kG, kVec, kUnroll><<<grid_for(tiles, 1, max_blocks), kBlock, 0, s>>>(
        in.ptr<T>(), any_ptr(out), S, Q, units, d);
  }
}

// `max_blocks` caps the grid (the tests make it small to exercise the grid-stride loop);
// `index64` forces the 64-bit index kernels (tested on small tensors too).
void apply(const char* op, const Tensor& in, const Tensor& out, int T, const DropoutKey& drop, cudaStream_t s,
           int64_t max_blocks = 0x7fffffff, bool index64 = false) {
  TRIDENT_CHECK(is_float(in.dtype) && is_float(out.dtype), op, ": float tensors expected");
  TRIDENT_CHECK(in.numel() == out.numel(), op, ": ", in.shape.str(), " vs ", out.shape.str());
  const int64_t N = in.rows(), row = in.cols();
  TRIDENT_CHECK(T > 0 && N % T == 0, op, ": rows ", N, " not a multiple of T=", T);
  if (N * row == 0) return;
  const DropoutParams d = dropout_params(drop);
  if (!d.enabled && in.data == out.data && in.dtype == out.dtype) return;  // a copy onto itself
  // Samples of S contiguous elements; without dropout, one sample of everything.
  const uint64_t S = static_cast<uint64_t>(d.enabled ? T * row : N * row);
  const uint64_t samples = static_cast<uint64_t>(N * row) / S;
  const DropoutPath path = dropout_path(in, out, S);
  dispatch_float(in.dtype, op, [&](auto in_tag) {
    using Ti = decltype(in_tag);
    if (path == DropoutPath::kScalar) {  // any output dtype through AnyPtr
      launch_units<Ti, void, 4, false>(in, out, S, samples, d, s, max_blocks, index64);
      return;
    }
    dispatch_float(out.dtype, op, [&](auto out_tag) {
      using To = decltype(out_tag);
      if (path == DropoutPath::kWide) {
        launch_units<Ti, To, kVec16<Ti>, true>(in, out, S, samples, d, s, max_blocks, index64);
      } else if constexpr (kVec16<Ti> > 4) {  // kNarrow: 16-bit inputs only
        launch_units<Ti, To, 4, true>(in, out, S, samples, d, s, max_blocks, index64);
      }
    });
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void dropout_forward(const Tensor& x, const Tensor& out, int T, const DropoutKey& drop, cudaStream_t s) {
  apply("dropout_forward", x, out, T, drop, s);
}

void dropout_backward(const Tensor& dout, const Tensor& dx, int T, const DropoutKey& drop, cudaStream_t s) {
  apply("dropout_backward", dout, dx, T, drop, s);
}

}  // namespace trident::cuda
