// Reductions: bias gradient (column sums), sum / sum of squares to the host (also over a
// list of tensors in one multi-tensor pass, for the global gradient norm, which is also
// the loss scaler's overflow check), a count of zeros over such a list (for
// --log-num-zeros-in-grad), magnitude statistics over such a list (for
// --log-optimizer-states-to-tensorboard), and an inf/NaN check.
// Every float reduction is deterministic: a fixed partition that depends only on the
// shape (never on the GPU model or on scheduling), partials combined in a fixed order,
// no float atomics. sum and sum_squares accumulate in double, as their CPU twins do.
#include <optional>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dropout.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kColBlock = 256;      // column_chunks' columns per block (LayerNorm's partial kernels)
constexpr int kBiasRowWarps = 8;    // warps of a bias partials block, each on its own rows
constexpr int kSumBlock = 256;      // threads per block of the first sum pass
constexpr int kSumMaxBlocks = 1024; // partials of the first sum pass (second pass: one block)

// Block = 32 lanes x kBiasRowWarps warps over 32 kV columns (lane: kV consecutive ones, one
// 16-byte vector per row when kV > 1) and the rows of chunk blockIdx.y: warp w takes rows w,
// w + kBiasRowWarps, ... of it, in order; then the warps' sums are added in warp order in
// shared memory, and partials[chunk, c .. c + kV) holds the chunk's sum. (One row a block, as
// before 2026-12-05, left a partial row per 16-32 rows: 8 MB of partials for the finishing
// pass to read at a 32768 x 2048 shape, ~a quarter of bias_backward's time.) kDrop: each
// row's values first go through dropout_backward (as cuda_dropout.cu draws it with T =
// rows_per_sample: row n is index (n % T) C + c of sample sample_base + n / T) and are
// written to dx, rounded, and the rounded values are summed.
template <typename T, int kV, bool kDrop>
__global__ void __launch_bounds__(32 * kBiasRowWarps)
    column_partials_kernel(const T* x, int64_t N, int64_t C, int64_t rows_per_chunk, float* partials, T* dx,
                           DropoutParams drop, int64_t rows_per_sample) {
  __shared__ float warp_sums[kBiasRowWarps - 1][32 * kV];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int64_t c = (blockIdx.x * 32 + static_cast<int64_t>(lane)) * kV;
  const bool in_cols = c < C;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  const int64_t first = r0 + w;
  int64_t in_sample = first % rows_per_sample;  // row n's place in its sample, then stepped
  uint64_t sample = drop.sample_base + static_cast<uint64_t>(first / rows_per_sample);
  float acc[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) acc[j] = 0.f;
  for (int64_t n = first; in_cols && n < r1; n += kBiasRowWarps) {
    Vec<T, kV> v = load_vec<T, kV>(x + n * C + c);
    if constexpr (kDrop) {
      const uint64_t index = static_cast<uint64_t>(in_sample) * static_cast<uint64_t>(C) + static_cast<uint64_t>(c);
      if (!drop.enabled) {
        // p = 0: dx is a copy of dout
      } else if constexpr (kV % 4 == 0) {  // C % kV == 0: index starts a Philox block
        dropout_vec<T, kV>(v, drop, sample, index);
      } else {
#pragma unroll
        for (int j = 0; j < kV; ++j) v.v[j] = from_f32<T>(dropout_one(to_f32(v.v[j]), drop, sample, index + j));
      }
      store_vec<T, kV>(dx + n * C + c, v);
      for (in_sample += kBiasRowWarps; in_sample >= rows_per_sample; in_sample -= rows_per_sample) ++sample;
    }
#pragma unroll
    for (int j = 0; j < kV; ++j) acc[j] += to_f32(v.v[j]);
  }
  if (w > 0) {
#pragma unroll
    for (int j = 0; j < kV; ++j) warp_sums[w - 1][lane * kV + j] = acc[j];
  }
  __syncthreads();
  if (w != 0 || !in_cols) return;
  for (int i = 0; i < kBiasRowWarps - 1; ++i) {
#pragma unroll
    for (int j = 0; j < kV; ++j) acc[j] += warp_sums[i][lane * kV + j];
  }
#pragma unroll
  for (int j = 0; j < kV; ++j) partials[blockIdx.y * C + c + j] = acc[j];
}

// dst[c] += the sum over chunks of partials[k * C + c], for the set blockIdx.y picks (0: a,
// 1: b; two sets of one shape in one launch: LayerNorm's dgamma and dbeta). Grid
// (ceil(C / kFinishCols), sets) blocks of kFinishCols x kFinishGroups threads: lane =
// column, warp w = chunk group, adding chunks w, w + kFinishGroups, ... in that order
// (kFinishUnroll loads in flight); then warp 0 adds the groups in order: a fixed order for
// any schedule. (One thread per column walking the chunks, as before, had C / 256 blocks
// and one load in flight: tens of microseconds for LayerNorm's 512 chunks.)
struct ColumnPartials {
  const float* partials;
  AnyPtr dst;
};
constexpr int kFinishCols = 32;
constexpr int kFinishGroups = 16;
constexpr int kFinishUnroll = 8;
__global__ void __launch_bounds__(kFinishCols * kFinishGroups)
    column_finish_kernel(ColumnPartials a, ColumnPartials b, int64_t chunks, int64_t C) {
  __shared__ float group_sums[kFinishGroups][kFinishCols];
  const float* partials = blockIdx.y == 0 ? a.partials : b.partials;
  const AnyPtr dst = blockIdx.y == 0 ? a.dst : b.dst;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int64_t c = blockIdx.x * static_cast<int64_t>(kFinishCols) + lane;
  float acc = 0.f;
  if (c < C) {
    for (int64_t k0 = w; k0 < chunks; k0 += kFinishGroups * kFinishUnroll) {
      float v[kFinishUnroll];
#pragma unroll
      for (int u = 0; u < kFinishUnroll; ++u) {
        const int64_t k = k0 + static_cast<int64_t>(u) * kFinishGroups;
        v[u] = k < chunks ? partials[k * C + c] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kFinishUnroll; ++u) acc += v[u];
    }
  }
  group_sums[w][lane] = acc;
  __syncthreads();
  if (w == 0 && c < C) {
    float sum = 0.f;
    for (int i = 0; i < kFinishGroups; ++i) sum += group_sums[i][lane];
    store_any(dst, c, load_any(dst, c) + sum);
  }
}

// Calls f(float) for the elements of x[begin, end) that fall to thread `tid` of `threads`:
// the elements before the first 16-byte boundary (fewer than one vector) one per thread,
// then whole 16-byte vectors, one per thread in turn, two loads in flight, then the
// elements after the last whole vector one per thread. Which thread sees which element,
// and in which order, depends only on the arguments (the address's offset in 16 bytes
// included). (Scalar 2-byte loads ran the 1.3b gradient norm at ~0.6 TB/s on an H200; a
// start off the 16-byte grid took them for the whole range until 2026-12-01.)
template <typename T, typename F>
__device__ __forceinline__ void for_each_strided(const T* x, int64_t begin, int64_t end, int64_t tid, int64_t threads,
                                                 F&& f) {
  constexpr int kV = kVec16<T>;
  const int64_t skew = static_cast<int64_t>(reinterpret_cast<uintptr_t>(x + begin) % 16 / sizeof(T));
  const int64_t head = skew == 0 ? begin : (begin + kV - skew < end ? begin + kV - skew : end);
  for (int64_t i = begin + tid; i < head; i += threads) f(to_f32(x[i]));
  const int64_t tail = head + (end - head) / kV * kV;
  const int64_t step = threads * kV;
  for (int64_t i = head + tid * kV; i < tail; i += 2 * step) {
    const bool second = i + step < tail;
    const Vec<T, kV> a = load_vec<T, kV>(x + i);
    Vec<T, kV> b = a;
    if (second) b = load_vec<T, kV>(x + i + step);
#pragma unroll
    for (int j = 0; j < kV; ++j) f(to_f32(a.v[j]));
    if (second) {
#pragma unroll
      for (int j = 0; j < kV; ++j) f(to_f32(b.v[j]));
    }
  }
  for (int64_t i = tail + tid; i < end; i += threads) f(to_f32(x[i]));
}

// What a sum adds for each element v: v, v^2, or 1 when v is zero (-0 too; NaN is not).
enum class Summand { kValue, kSquare, kIsZero };

// This thread's double sum over its elements of x[begin, end) (a count of zeros is exact
// below 2^53).
template <typename T, Summand kWhat>
__device__ __forceinline__ double strided_sum(const T* x, int64_t begin, int64_t end, int64_t tid, int64_t threads) {
  double acc = 0.0;
  for_each_strided(x, begin, end, tid, threads, [&](float v) {
    const double d = v;
    if constexpr (kWhat == Summand::kSquare)
      acc += d * d;
    else if constexpr (kWhat == Summand::kIsZero)
      acc += v == 0.f ? 1.0 : 0.0;
    else
      acc += d;
  });
  return acc;
}

template <typename T, bool kSquares>
__global__ void sum_partials_kernel(const T* x, int64_t n, double* partials) {
  __shared__ double shared[32];
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double acc = strided_sum<T, kSquares ? Summand::kSquare : Summand::kValue>(
      x, 0, n, blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, threads);
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Multi-tensor sum of squares (or count of zeros). The tensors of one launch are numbered in chunks of
// kSquaresChunk elements, tensor after tensor; block b of a grid of at most
// kSquaresBlocks adds chunks b, b + gridDim.x, ... in that order and writes its double
// sum to partials[b]. The numbering and the grid depend only on the sizes, so the total is
// deterministic; a fixed grid that stays resident (rather than one block per chunk, 512
// chunks a launch) keeps a 1.3B-parameter gradient to one or two launches.
constexpr int kSquaresMaxTensors = 96;
constexpr int kSquaresBlocks = 1024;
constexpr int64_t kSquaresChunk = 16384;  // a multiple of every vector width
struct SquaresTable {                     // ~2.3 KB: within the kernel parameter limit
  const void* p[kSquaresMaxTensors];
  int64_t n[kSquaresMaxTensors];
  int64_t first_chunk[kSquaresMaxTensors + 1];  // tensor t has chunks [first_chunk[t], first_chunk[t + 1])
  int count;
};

template <typename T, Summand kWhat>
__global__ void multi_sum_kernel(SquaresTable tab, double* partials) {
  __shared__ double shared[32];
  const int64_t chunks = tab.first_chunk[tab.count];
  double acc = 0.0;
  int t = 0;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    while (tab.first_chunk[t + 1] <= c) ++t;  // chunks come in increasing order
    const int64_t begin = (c - tab.first_chunk[t]) * kSquaresChunk;
    const int64_t end = begin + kSquaresChunk < tab.n[t] ? begin + kSquaresChunk : tab.n[t];
    acc += strided_sum<T, kWhat>(static_cast<const T*>(tab.p[t]), begin, end, threadIdx.x, blockDim.x);
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// The launches of one multi-tensor sum (sum_squares_multi, count_zeros_multi): non-empty tensors in list order, one dtype
// and at most kSquaresMaxTensors a launch, each launch(tab, blocks, dtype) with at most
// max_blocks blocks. Shared by the host launcher and the CPU emulator's test (which passes
// a small max_blocks to make blocks take several chunks).
template <typename Launch>
void plan_squares_launches(const std::vector<Tensor>& list, int max_blocks, Launch launch) {
  SquaresTable tab{};
  DType dtype = DType::F32;
  auto flush = [&] {
    if (tab.count == 0) return;
    const int64_t chunks = tab.first_chunk[tab.count];
    launch(tab, static_cast<int>(chunks < max_blocks ? chunks : max_blocks), dtype);
    tab = SquaresTable{};
  };
  for (const Tensor& x : list) {
    if (x.numel() == 0) continue;
    if (tab.count == kSquaresMaxTensors || (tab.count > 0 && x.dtype != dtype)) flush();
    dtype = x.dtype;
    tab.p[tab.count] = x.data;
    tab.n[tab.count] = x.numel();
    tab.first_chunk[tab.count + 1] = tab.first_chunk[tab.count] + (x.numel() + kSquaresChunk - 1) / kSquaresChunk;
    ++tab.count;
  }
  flush();
}

// One block of kSumMaxBlocks threads adds any number of partials: thread i takes i,
// i + kSumMaxBlocks, ... in order, then the block sum.
__global__ void sum_many_partials_kernel(const double* partials, int64_t count, double* result) {
  __shared__ double shared[32];
  double v = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) v += partials[i];
  v = block_sum(v, shared);
  if (threadIdx.x == 0) *result = v;
}

template <typename T>
__global__ void inf_nan_kernel(const T* x, int64_t n, int* flag) {
  bool bad = false;
  for_each_strided(x, 0, n, blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x,
                   static_cast<int64_t>(gridDim.x) * blockDim.x, [&](float v) { bad |= !isfinite(v); });
  if (bad) *flag = 1;  // every writer stores the same value: no race on the result
}

// The larger of two magnitudes; a NaN on either side wins (the CPU's rule).
__device__ __forceinline__ double nan_max(double m, double a) { return isnan(m) || a <= m ? m : a; }

__device__ __forceinline__ double block_nan_max(double v, double* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double r = lane < nwarps ? shared[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) r = nan_max(r, __shfl_xor_sync(0xffffffffu, r, o));
  __syncthreads();
  return r;
}

// multi_sum_kernel's chunks, with the four magnitude statistics a block. The square root
// is float's (correctly rounded), summed in double.
template <typename T>
__global__ void multi_magnitude_kernel(SquaresTable tab, MagnitudeStats* partials) {
  __shared__ double shared[32];
  const int64_t chunks = tab.first_chunk[tab.count];
  MagnitudeStats acc;
  int t = 0;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    while (tab.first_chunk[t + 1] <= c) ++t;  // chunks come in increasing order
    const int64_t begin = (c - tab.first_chunk[t]) * kSquaresChunk;
    const int64_t end = begin + kSquaresChunk < tab.n[t] ? begin + kSquaresChunk : tab.n[t];
    for_each_strided(static_cast<const T*>(tab.p[t]), begin, end, threadIdx.x, blockDim.x, [&](float v) {
      const float a = fabsf(v);
      const double d = a;
      acc.sum_squares += d * d;
      acc.sum_abs += d;
      acc.sum_sqrt_abs += sqrtf(a);
      acc.max_abs = nan_max(acc.max_abs, d);
    });
  }
  acc.sum_squares = block_sum(acc.sum_squares, shared);
  acc.sum_abs = block_sum(acc.sum_abs, shared);
  acc.sum_sqrt_abs = block_sum(acc.sum_sqrt_abs, shared);
  acc.max_abs = block_nan_max(acc.max_abs, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One block combines any number of those partials: thread i takes i, i + blockDim.x, ... in
// order, then the block's sums and maximum.
__global__ void __launch_bounds__(kSumMaxBlocks)
    magnitude_many_partials_kernel(const MagnitudeStats* partials, int64_t count, MagnitudeStats* result) {
  __shared__ double shared[32];
  MagnitudeStats acc;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    acc.sum_squares += partials[i].sum_squares;
    acc.sum_abs += partials[i].sum_abs;
    acc.sum_sqrt_abs += partials[i].sum_sqrt_abs;
    acc.max_abs = nan_max(acc.max_abs, partials[i].max_abs);
  }
  acc.sum_squares = block_sum(acc.sum_squares, shared);
  acc.sum_abs = block_sum(acc.sum_abs, shared);
  acc.sum_sqrt_abs = block_sum(acc.sum_sqrt_abs, shared);
  acc.max_abs = block_nan_max(acc.max_abs, shared);
  if (threadIdx.x == 0) *result = acc;
}

// magnitude_stats_multi's passes, shared by the host launcher and the CPU emulator's test:
// sum_squares_multi's launches (at most max_blocks blocks each) with a MagnitudeStats
// partial a block, then one block combining them in block order. partials_of(bytes) gives
// the partials' memory, the result's included. Returns the result's address (null for no
// elements).
template <typename PartialsOf>
MagnitudeStats* magnitude_stats_passes(const std::vector<Tensor>& list, int max_blocks, cudaStream_t s,
                                       PartialsOf&& partials_of) {
  int64_t total_blocks = 0;
  plan_squares_launches(list, max_blocks, [&](const SquaresTable&, int blocks, DType) { total_blocks += blocks; });
  if (total_blocks == 0) return nullptr;
  MagnitudeStats* partials = partials_of(sizeof(MagnitudeStats) * (total_blocks + 1));
  int64_t written = 0;
  plan_squares_launches(list, max_blocks, [&](const SquaresTable& tab, int blocks, DType dtype) {
    dispatch_float(dtype, "magnitude_stats", [&](auto tag) {
      using T = decltype(tag);
      multi_magnitude_kernel<T><<<blocks, kSumBlock, 0, s>>>(tab, partials + written);
    });
    written += blocks;
  });
  magnitude_many_partials_kernel<<<1, kSumMaxBlocks, 0, s>>>(partials, written, partials + written);
  return partials + written;
}

// column_chunks (cuda_ops.h), here so that the CPU emulator's tests share it.
int column_chunk_count(int64_t rows, int64_t cols, int vector) {
  // Aim for ~1024 blocks in all with at least 16 rows per chunk; a function of the shape only.
  const int64_t cols_per_block = static_cast<int64_t>(kColBlock) * vector;
  const int64_t col_blocks = (cols + cols_per_block - 1) / cols_per_block;
  int64_t chunks = 1024 / (col_blocks > 0 ? col_blocks : 1);
  const int64_t max_by_rows = (rows + 15) / 16;
  if (chunks > max_by_rows) chunks = max_by_rows;
  if (chunks < 1) chunks = 1;
  return static_cast<int>(chunks);
}

// Chunks of rows for bias_backward's partials: ~1024 blocks in all (as many threads as a
// GPU holds at once) with at least 16 rows for each of a block's warps; a function of the shape.
int bias_chunk_count(int64_t rows, int64_t cols, int vector) {
  const int64_t cols_per_block = int64_t{32} * vector;
  const int64_t col_blocks = (cols + cols_per_block - 1) / cols_per_block;
  int64_t chunks = 1024 / (col_blocks > 0 ? col_blocks : 1);
  const int64_t min_rows = int64_t{16} * kBiasRowWarps;
  const int64_t max_by_rows = (rows + min_rows - 1) / min_rows;
  if (chunks > max_by_rows) chunks = max_by_rows;
  if (chunks < 1) chunks = 1;
  return static_cast<int>(chunks);
}

// bias_backward's two passes, shared by the host launchers and the CPU emulator's test:
// the column partials (16-byte vectors when C and the pointers allow) into
// partials_of(bytes), then the chunks added onto dbias in a fixed order. With dx given, the
// first pass is dropout_backward(dout, dx, T, drop) as well (dx may alias dout).
template <typename PartialsOf>
void bias_backward_typed(const Tensor& dout, const Tensor& dbias, const Tensor& dx, int T, const DropoutKey& drop,
                         cudaStream_t s, PartialsOf&& partials_of) {
  const int64_t N = dout.rows(), C = dout.cols();
  const bool with_dx = !dx.empty();
  const DropoutParams d = dropout_params(drop);
  const int64_t rows_per_sample = T > 0 ? T : 1;
  dispatch_float(dout.dtype, "bias_backward", [&](auto tag) {
    using T_ = decltype(tag);
    const int kv = vector_width<T_>(C, {dout.data, dx.data});
    const int chunks = bias_chunk_count(N, C, kv);
    const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
    float* partials = partials_of(sizeof(float) * chunks * C);
    const int64_t cols_per_block = int64_t{32} * kv;
    const dim3 grid(static_cast<unsigned>((C + cols_per_block - 1) / cols_per_block), static_cast<unsigned>(chunks));
    T_* dxp = with_dx ? dx.ptr<T_>() : nullptr;
    auto launch = [&](auto kernel) {
      kernel<<<grid, 32 * kBiasRowWarps, 0, s>>>(dout.ptr<T_>(), N, C, rows_per_chunk, partials, dxp, d,
                                                 rows_per_sample);
    };
    if (kv > 1)
      with_dx ? launch(column_partials_kernel<T_, kVec16<T_>, true>) : launch(column_partials_kernel<T_, kVec16<T_>, false>);
    else
      with_dx ? launch(column_partials_kernel<T_, 1, true>) : launch(column_partials_kernel<T_, 1, false>);
    const ColumnPartials sums{partials, AnyPtr{dbias.data, dbias.dtype}};
    column_finish_kernel<<<grid_for(C, kFinishCols, INT32_MAX), kFinishCols * kFinishGroups, 0, s>>>(
        sums, sums, static_cast<int64_t>(chunks), C);
  });
}

}  // namespace

// One value computed on the stream, to the host (synchronises).
template <typename V>
static V to_host(const V* device_value, cudaStream_t s) {
  V host{};
  CUDA_CHECK(cudaMemcpyAsync(&host, device_value, sizeof(V), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return host;
}

int column_chunks(int64_t rows, int64_t cols, int vector) { return column_chunk_count(rows, cols, vector); }

void column_partials_accumulate(const float* partials_a, void* dst_a, DType dtype_a, const float* partials_b,
                                void* dst_b, DType dtype_b, int64_t chunks, int64_t cols, cudaStream_t s) {
  const dim3 grid(grid_for(cols, kFinishCols, INT32_MAX), 2);
  column_finish_kernel<<<grid, kFinishCols * kFinishGroups, 0, s>>>(
      ColumnPartials{partials_a, AnyPtr{dst_a, dtype_a}}, ColumnPartials{partials_b, AnyPtr{dst_b, dtype_b}}, chunks,
      cols);
  CUDA_CHECK_LAUNCH();
}

void bias_backward(const Tensor& dout, const Tensor& dbias, CachingAllocator& scratch, cudaStream_t s) {
  const char* op = "bias_backward";
  const int64_t N = dout.rows(), C = dout.cols();
  TRIDENT_CHECK(is_float(dbias.dtype) && dbias.numel() == C, op, ": dbias ", dbias.shape.str(), " for dout ",
                dout.shape.str());
  if (N == 0 || C == 0) return;
  std::optional<Scratch> partials;
  bias_backward_typed(dout, dbias, Tensor(), 1, DropoutKey{}, s, [&](size_t bytes) {
    partials.emplace(scratch, bytes);
    return partials->as<float>();
  });
  CUDA_CHECK_LAUNCH();
}

void dropout_bias_backward(const Tensor& dout, int T, const DropoutKey& drop, const Tensor& dx, const Tensor& dbias,
                           CachingAllocator& scratch, cudaStream_t s) {
  const char* op = "dropout_bias_backward";
  const int64_t N = dout.rows(), C = dout.cols();
  TRIDENT_CHECK(is_float(dbias.dtype) && dbias.numel() == C, op, ": dbias ", dbias.shape.str(), " for dout ",
                dout.shape.str());
  TRIDENT_CHECK(dx.dtype == dout.dtype && dx.numel() == dout.numel(), op, ": dx ", dtype_name(dx.dtype), " ",
                dx.shape.str(), " must match dout ", dtype_name(dout.dtype), " ", dout.shape.str());
  TRIDENT_CHECK(T > 0 && N % T == 0, op, ": rows ", N, " not a multiple of T=", T);
  if (N == 0 || C == 0) return;
  std::optional<Scratch> partials;
  bias_backward_typed(dout, dbias, dx, T, drop, s, [&](size_t bytes) {
    partials.emplace(scratch, bytes);
    return partials->as<float>();
  });
  CUDA_CHECK_LAUNCH();
}

double sum(const Tensor& t, bool squares, CachingAllocator& scratch, cudaStream_t s) {
  const char* op = squares ? "sum_squares" : "sum";
  const int64_t n = t.numel();
  if (n == 0) return 0.0;
  const int blocks = static_cast<int>(grid_for(n, kSumBlock, kSumMaxBlocks));
  Scratch partials(scratch, sizeof(double) * (blocks + 1));
  double* result = partials.as<double>() + blocks;
  dispatch_float(t.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if (squares)
      sum_partials_kernel<T, true><<<blocks, kSumBlock, 0, s>>>(t.ptr<T>(), n, partials.as<double>());
    else
      sum_partials_kernel<T, false><<<blocks, kSumBlock, 0, s>>>(t.ptr<T>(), n, partials.as<double>());
  });
  CUDA_CHECK_LAUNCH();
  sum_many_partials_kernel<<<1, kSumMaxBlocks, 0, s>>>(partials.as<double>(), blocks, result);
  CUDA_CHECK_LAUNCH();
  return to_host(result, s);
}

// The sum over the tensors of every element's summand, in double, to the host.
template <Summand kWhat>
static double multi_sum(const char* op, const std::vector<Tensor>& list, CachingAllocator& scratch, cudaStream_t s) {
  int64_t total_blocks = 0;
  for (const Tensor& t : list) TRIDENT_CHECK(is_float(t.dtype), op, ": float tensors expected, got ", dtype_name(t.dtype));
  plan_squares_launches(list, kSquaresBlocks, [&](const SquaresTable&, int blocks, DType) { total_blocks += blocks; });
  if (total_blocks == 0) return 0.0;
  Scratch partials(scratch, sizeof(double) * (total_blocks + 1));
  double* result = partials.as<double>() + total_blocks;
  int64_t written = 0;
  plan_squares_launches(list, kSquaresBlocks, [&](const SquaresTable& tab, int blocks, DType dtype) {
    dispatch_float(dtype, op, [&](auto tag) {
      using T = decltype(tag);
      multi_sum_kernel<T, kWhat><<<blocks, kSumBlock, 0, s>>>(tab, partials.as<double>() + written);
    });
    CUDA_CHECK_LAUNCH();
    written += blocks;
  });
  sum_many_partials_kernel<<<1, kSumMaxBlocks, 0, s>>>(partials.as<double>(), written, result);
  CUDA_CHECK_LAUNCH();
  return to_host(result, s);
}

double sum_squares_multi(const std::vector<Tensor>& list, CachingAllocator& scratch, cudaStream_t s) {
  return multi_sum<Summand::kSquare>("sum_squares", list, scratch, s);
}

int64_t count_zeros_multi(const std::vector<Tensor>& list, CachingAllocator& scratch, cudaStream_t s) {
  return static_cast<int64_t>(multi_sum<Summand::kIsZero>("count_zeros", list, scratch, s));
}

MagnitudeStats magnitude_stats_multi(const std::vector<Tensor>& list, CachingAllocator& scratch, cudaStream_t s) {
  for (const Tensor& t : list)
    TRIDENT_CHECK(is_float(t.dtype), "magnitude_stats: float tensors expected, got ", dtype_name(t.dtype));
  std::optional<Scratch> partials;
  const MagnitudeStats* result = magnitude_stats_passes(list, kSquaresBlocks, s, [&](size_t bytes) {
    partials.emplace(scratch, bytes);
    return partials->as<MagnitudeStats>();
  });
  CUDA_CHECK_LAUNCH();
  return result ? to_host(result, s) : MagnitudeStats{};
}

bool has_inf_or_nan(const Tensor& t, CachingAllocator& scratch, cudaStream_t s) {
  const int64_t n = t.numel();
  if (n == 0) return false;
  Scratch flag(scratch, sizeof(int));
  CUDA_CHECK(cudaMemsetAsync(flag.as<int>(), 0, sizeof(int), s));
  dispatch_float(t.dtype, "has_inf_or_nan", [&](auto tag) {
    using T = decltype(tag);
    inf_nan_kernel<T><<<grid_for(n, 256, 4096), 256, 0, s>>>(t.ptr<T>(), n, flag.as<int>());
  });
  CUDA_CHECK_LAUNCH();
  return to_host(flag.as<int>(), s) != 0;
}

}  // namespace trident::cuda
