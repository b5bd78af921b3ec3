// Token + position embedding, forward and backward (vocab-parallel: this shard's table
// holds ids [vocab_start, vocab_start + Vl); other ids read as zero and get no gradient).
//
// The backward must be deterministic without float atomics. Rows are grouped by token id
// with a stable radix sort of (local id, row) pairs (CUB), so each id's rows form one run
// in increasing row order; one block per run then sums its rows channel by channel in
// that order and adds the total to dwte once (loading rows a batch ahead of the adds, so a
// frequent token's long run is not one dependent load after another). dwpe sums over the
// batch with one thread per (position, channel). Both orders match the CPU twin's. Where the width and the
// pointers allow, every kernel moves 16-byte vectors of the activations (a thread takes
// that many channels; the forward a warp per row), with the same sums.
#include <algorithm>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

template <typename T>
__global__ void embedding_forward_kernel(const int32_t* tokens, AnyPtr wte, int64_t vocab_start, int64_t V,
                                         AnyPtr wpe, bool has_wpe, int T_, T* out, int64_t N, int64_t C) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t n = i / C, c = i - n * C;
    const int64_t id = static_cast<int64_t>(tokens[n]) - vocab_start;
    float v = (id >= 0 && id < V) ? load_any(wte, id * C + c) : 0.f;
    if (has_wpe) v += load_any(wpe, (n % T_) * C + c);
    out[i] = from_f32<T>(v);
  }
}

// The same with a warp per row (warps walk rows w, w + W, ...) in 16-byte vectors: every
// operand of dtype T, C a multiple of kVec16<T>, aligned pointers. The token id is read
// once per row, not per element; the same arithmetic (one add, one rounding): the same bits.
// A lane loads kInFlight vectors of its row (word and position) before it stores any: without
// __restrict__ and the batch, each store had to land before the next load could issue (out
// might have aliased the tables), one load in flight a lane (2026-12-04: 20.9% of the copy
// rate; the suspect, not measured yet).
template <typename T>
__global__ void embedding_forward_rows_kernel(const int32_t* __restrict__ tokens, const T* __restrict__ wte,
                                              int64_t vocab_start, int64_t V, const T* __restrict__ wpe, int T_,
                                              T* __restrict__ out, int64_t N, int64_t C) {
  constexpr int kV = kVec16<T>;
  constexpr int kInFlight = 4;
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5); n < N; n += warps) {
    const int64_t id = static_cast<int64_t>(tokens[n]) - vocab_start;
    const bool owned = id >= 0 && id < V;
    const T* word = wte + (owned ? id : 0) * C;
    const T* pos = wpe != nullptr ? wpe + (n % T_) * C : nullptr;
    for (int64_t c0 = lane * kV; c0 < C; c0 += kInFlight * 32 * kV) {
      float v[kInFlight][kV];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t c = c0 + u * 32 * kV;
        if (owned && c < C) {
          load_k<kV>(word + c, v[u]);
        } else {
#pragma unroll
          for (int j = 0; j < kV; ++j) v[u][j] = 0.f;
        }
        if (pos != nullptr && c < C) {
          float p[kV];
          load_k<kV>(pos + c, p);
#pragma unroll
          for (int j = 0; j < kV; ++j) v[u][j] += p[j];
        }
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        if (const int64_t c = c0 + u * 32 * kV; c < C) store_k<kV>(out + n * C + c, v[u]);
    }
  }
}

// The forward's kernel choice, shared by the host launcher and the CPU emulator's test: the
// row kernel when the dtypes, C and the pointers allow 16-byte vectors, else element-wise
// with runtime-typed tables. true: the row kernel ran.
inline bool forward_typed(const Tensor& tokens, const Tensor& wte, int64_t vocab_start, const Tensor& wpe, int T,
                          const Tensor& out, cudaStream_t s) {
  const int64_t N = tokens.numel(), C = wte.cols();
  bool rows = false;
  dispatch_float(out.dtype, "embedding_forward", [&](auto tag) {
    using Ty = decltype(tag);
    const bool same = wte.dtype == out.dtype && (wpe.empty() || wpe.dtype == out.dtype);
    rows = same && vector_width<Ty>(C, {wte.data, wpe.data, out.data}) > 1;
    if (rows) {
      constexpr int kRowsPerBlock = 8;
      embedding_forward_rows_kernel<Ty><<<grid_for(N, kRowsPerBlock, INT32_MAX), 32 * kRowsPerBlock, 0, s>>>(
          tokens.ptr<int32_t>(), wte.ptr<Ty>(), vocab_start, wte.rows(), wpe.empty() ? nullptr : wpe.ptr<Ty>(), T,
          out.ptr<Ty>(), N, C);
    } else {
      embedding_forward_kernel<Ty><<<grid_for(N * C, 256), 256, 0, s>>>(tokens.ptr<int32_t>(), any_ptr(wte),
                                                                      vocab_start, wte.rows(), any_ptr(wpe),
                                                                      !wpe.empty(), T, out.ptr<Ty>(), N, C);
    }
  });
  return rows;
}

// key = local id, or V (sorts last, skipped) for ids this shard does not own; value = row.
__global__ void embedding_keys_kernel(const int32_t* tokens, int64_t vocab_start, int64_t V, int64_t N,
                                      int32_t* keys, int32_t* rows) {
  for (int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; n < N; n += (int64_t)gridDim.x * blockDim.x) {
    const int64_t id = static_cast<int64_t>(tokens[n]) - vocab_start;
    keys[n] = (id >= 0 && id < V) ? static_cast<int32_t>(id) : static_cast<int32_t>(V);
    rows[n] = static_cast<int32_t>(n);
  }
}

// The dwte kernels' blocks: at most this many threads, one run's row indices staged per thread.
constexpr int kMaxDwteThreads = 256;
// Rows whose loads are issued before their adds (each thread's adds stay in row order).
constexpr int kDwteBatch = 8;

// Block i handles the run of sorted positions that starts at i (the other blocks return at
// once): visit(rows, count) is called by every thread of the block for each blockDim.x
// positions of the run in turn, with their row indices staged in shared memory; count <
// blockDim.x ends the run. A token's run can hold thousands of rows (a frequent token in a
// large batch): staging the indices and batching the loads keeps that one block from
// serialising on one dependent load per row.
template <typename Visit>
__device__ void for_each_run_chunk(const int32_t* keys, const int32_t* rows, int64_t N, int32_t id,
                                   int32_t* s_rows, Visit visit) {
  for (int64_t j0 = blockIdx.x;; j0 += blockDim.x) {
    __syncthreads();  // the last chunk's readers are done with s_rows
    const int64_t j = j0 + threadIdx.x;
    const bool in_run = j < N && keys[j] == id;
    if (in_run) s_rows[threadIdx.x] = rows[j];
    // The keys are sorted and j0 lies in the run: its positions are a prefix of the chunk.
    const int count = __syncthreads_count(in_run);
    visit(s_rows, count);
    if (count < static_cast<int>(blockDim.x)) return;
  }
}

// True for the block whose position starts a run of an id this shard owns.
__device__ inline bool starts_owned_run(const int32_t* keys, int64_t V, int32_t* id) {
  const int64_t i = blockIdx.x;
  *id = keys[i];
  return *id < V && (i == 0 || keys[i - 1] != *id);
}

template <typename T>
__global__ void embedding_dwte_kernel(const T* dout, const int32_t* keys, const int32_t* rows, int64_t N,
                                      int64_t V, int64_t C, AnyPtr dwte) {
  __shared__ int32_t s_rows[kMaxDwteThreads];
  int32_t id;
  if (!starts_owned_run(keys, V, &id)) return;
  for (int64_t c0 = 0; c0 < C; c0 += blockDim.x) {  // the same trip count in every thread
    const int64_t c = c0 + threadIdx.x;
    const bool active = c < C;
    float acc = active ? load_any(dwte, id * C + c) : 0.f;
    for_each_run_chunk(keys, rows, N, id, s_rows, [&](const int32_t* r, int count) {
      if (!active) return;
      int j = 0;
      for (; j + kDwteBatch <= count; j += kDwteBatch) {
        float d[kDwteBatch];
#pragma unroll
        for (int u = 0; u < kDwteBatch; ++u) d[u] = to_f32(dout[static_cast<int64_t>(r[j + u]) * C + c]);
#pragma unroll
        for (int u = 0; u < kDwteBatch; ++u) acc += d[u];
      }
      for (; j < count; ++j) acc += to_f32(dout[static_cast<int64_t>(r[j]) * C + c]);
    });
    if (active) store_any(dwte, id * C + c, acc);
  }
}

template <typename T>
__global__ void embedding_dwpe_kernel(const T* dout, int64_t B, int T_, int64_t C, AnyPtr dwpe) {
  const int64_t total = static_cast<int64_t>(T_) * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    float acc = load_any(dwpe, i);
    for (int64_t b = 0; b < B; ++b) acc += to_f32(dout[b * total + i]);
    store_any(dwpe, i, acc);
  }
}

// The same two kernels with kV = kVec16<T> channels a thread: 16-byte loads of dout, kV-element
// accesses of the gradient tables (G: their dtype, f32 or T). Every channel's sum runs in the
// scalar kernels' order: the same bits.
template <typename T, typename G>
__global__ void embedding_dwte_vec_kernel(const T* dout, const int32_t* keys, const int32_t* rows, int64_t N,
                                          int64_t V, int64_t C, G* dwte) {
  constexpr int kV = kVec16<T>;
  __shared__ int32_t s_rows[kMaxDwteThreads];
  int32_t id;
  if (!starts_owned_run(keys, V, &id)) return;
  G* row = dwte + id * C;
  for (int64_t c0 = 0; c0 < C; c0 += blockDim.x * static_cast<int64_t>(kV)) {  // uniform trip count
    const int64_t c = c0 + threadIdx.x * static_cast<int64_t>(kV);
    const bool active = c < C;
    float acc[kV] = {};
    if (active) load_k<kV>(row + c, acc);
    for_each_run_chunk(keys, rows, N, id, s_rows, [&](const int32_t* r, int count) {
      if (!active) return;
      int j = 0;
      for (; j + kDwteBatch <= count; j += kDwteBatch) {
        float d[kDwteBatch][kV];
#pragma unroll
        for (int u = 0; u < kDwteBatch; ++u) load_k<kV>(dout + static_cast<int64_t>(r[j + u]) * C + c, d[u]);
#pragma unroll
        for (int u = 0; u < kDwteBatch; ++u)
#pragma unroll
          for (int k = 0; k < kV; ++k) acc[k] += d[u][k];
      }
      for (; j < count; ++j) {
        float d[kV];
        load_k<kV>(dout + static_cast<int64_t>(r[j]) * C + c, d);
#pragma unroll
        for (int k = 0; k < kV; ++k) acc[k] += d[k];
      }
    });
    if (active) store_k<kV>(row + c, acc);
  }
}

template <typename T, typename G>
__global__ void embedding_dwpe_vec_kernel(const T* dout, int64_t B, int T_, int64_t C, G* dwpe) {
  constexpr int kV = kVec16<T>;
  const int64_t total = static_cast<int64_t>(T_) * C;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * kV;
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * kV; i < total; i += step) {
    float acc[kV];
    load_k<kV>(dwpe + i, acc);
    for (int64_t b = 0; b < B; ++b) {
      float d[kV];
      load_k<kV>(dout + b * total + i, d);
#pragma unroll
      for (int k = 0; k < kV; ++k) acc[k] += d[k];
    }
    store_k<kV>(dwpe + i, acc);
  }
}

// The backward's sums once the (key, row) pairs are sorted, shared by the host launcher and
// the CPU emulator's test: the vector kernels when C is a multiple of the vector, the
// gradient tables are f32 or dout's dtype (one dtype for both) and every pointer allows
// the accesses; else the scalar ones. true: the vector kernels ran.
inline bool backward_sums_typed(const Tensor& dout, const int32_t* keys, const int32_t* rows, int64_t V, int T,
                                const Tensor& dwte, const Tensor& dwpe, cudaStream_t s) {
  const int64_t N = dout.rows(), C = dout.cols();
  bool vec = false;
  dispatch_float(dout.dtype, "embedding_backward", [&](auto tag) {
    using Ty = decltype(tag);
    constexpr int kV = kVec16<Ty>;
    auto run_vec = [&](auto gtag) {
      using G = decltype(gtag);
      // dout in 16-byte vectors, the tables in kV elements of G (32 bytes for f32 tables of
      // 16-bit activations).
      if (C % kV != 0 || !aligned_to({dout.data}, 16) || !aligned_to({dwte.data, dwpe.data}, kV * sizeof(G)))
        return false;
      const int64_t threads = std::min<int64_t>((C / kV + 31) / 32 * 32, kMaxDwteThreads);
      embedding_dwte_vec_kernel<Ty, G><<<static_cast<unsigned>(N), static_cast<int>(threads), 0, s>>>(dout.ptr<Ty>(), keys, rows, N, V, C, dwte.ptr<G>());
      if (!dwpe.empty())
        embedding_dwpe_vec_kernel<Ty, G><<<grid_for(static_cast<int64_t>(T) * C / kV, 256), 256, 0, s>>>(
            dout.ptr<Ty>(), N / T, T, C, dwpe.ptr<G>());
      return true;
    };
    const bool one_dtype = dwpe.empty() || dwpe.dtype == dwte.dtype;
    if (one_dtype && dwte.dtype == DType::F32)
      vec = run_vec(float{});
    else if (one_dtype && dwte.dtype == dout.dtype)
      vec = run_vec(Ty{});
    if (vec) return;
    const int block = static_cast<int>(std::min<int64_t>((C + 31) / 32 * 32, kMaxDwteThreads));
    embedding_dwte_kernel<Ty><<<static_cast<unsigned>(N), block, 0, s>>>(dout.ptr<Ty>(), keys, rows, N, V, C,
                                                                       any_ptr(dwte));
    if (!dwpe.empty())
      embedding_dwpe_kernel<Ty><<<grid_for(static_cast<int64_t>(T) * C, 256), 256, 0, s>>>(dout.ptr<Ty>(), N / T, T,
                                                                                         C, any_ptr(dwpe));
  });
  return vec;
}

void check_shapes(const char* op, const Tensor& tokens, const Tensor& table, const Tensor& rows, int T) {
  TRIDENT_CHECK(tokens.dtype == DType::I32, op, ": tokens must be int32");
  TRIDENT_CHECK(is_float(table.dtype) && is_float(rows.dtype), op, ": float tensors expected");
  TRIDENT_CHECK(T > 0 && tokens.numel() % T == 0, op, ": tokens ", tokens.numel(), " not a multiple of T=", T);
  TRIDENT_CHECK(rows.rows() == tokens.numel() && rows.cols() == table.cols(), op, ": rows ", rows.shape.str(),
                " vs tokens ", tokens.numel(), " and table ", table.shape.str());
  TRIDENT_CHECK(tokens.numel() < (int64_t{1} << 31) && table.rows() < (int64_t{1} << 31) - 1, op,
                ": too many rows for 32-bit indices");
}

int bits_for(int64_t v) {  // bits needed to hold 0..v
  int b = 1;
  while ((int64_t{1} << b) <= v) ++b;
  return b;
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, int64_t vocab_start, const Tensor& wpe, int T,
                       const Tensor& out, cudaStream_t s) {
  const char* op = "embedding_forward";
  check_shapes(op, tokens, wte, out, T);
  const int64_t N = tokens.numel(), C = wte.cols();
  if (!wpe.empty())
    TRIDENT_CHECK(is_float(wpe.dtype) && wpe.cols() == C && wpe.rows() >= T, op, ": wpe ", wpe.shape.str(),
                  " for T=", T);
  if (N * C == 0) return;
  forward_typed(tokens, wte, vocab_start, wpe, T, out, s);
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(const Tensor& dout, const Tensor& tokens, int64_t vocab_start, int T, const Tensor& dwte,
                        const Tensor& dwpe, CachingAllocator& scratch, cudaStream_t s) {
  const char* op = "embedding_backward";
  check_shapes(op, tokens, dwte, dout, T);
  const int64_t N = tokens.numel(), C = dwte.cols(), V = dwte.rows();
  if (!dwpe.empty())
    TRIDENT_CHECK(is_float(dwpe.dtype) && dwpe.cols() == C && dwpe.rows() >= T, op, ": dwpe ",
                  dwpe.shape.str(), " for T=", T);
  if (N == 0 || C == 0) return;

  // Sort (key, row) pairs by key; stable, so rows stay increasing within a key.
  Scratch keys_in(scratch, N * sizeof(int32_t)), rows_in(scratch, N * sizeof(int32_t));
  Scratch keys_out(scratch, N * sizeof(int32_t)), rows_out(scratch, N * sizeof(int32_t));
  embedding_keys_kernel<<<grid_for(N, 256), 256, 0, s>>>(tokens.ptr<int32_t>(), vocab_start, V, N,
                                                         keys_in.as<int32_t>(), rows_in.as<int32_t>());
  CUDA_CHECK_LAUNCH();
  const int end_bit = bits_for(V);
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in.as<int32_t>(), keys_out.as<int32_t>(),
                                             rows_in.as<int32_t>(), rows_out.as<int32_t>(), static_cast<int>(N), 0,
                                             end_bit, s));
  Scratch temp(scratch, temp_bytes);
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, keys_in.as<int32_t>(),
                                             keys_out.as<int32_t>(), rows_in.as<int32_t>(), rows_out.as<int32_t>(),
                                             static_cast<int>(N), 0, end_bit, s));

  backward_sums_typed(dout, keys_out.as<int32_t>(), rows_out.as<int32_t>(), V, T, dwte, dwpe, s);
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
