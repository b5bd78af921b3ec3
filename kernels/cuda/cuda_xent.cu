// Softmax cross-entropy over a (vocab-parallel) logit shard, in the three phases of
// core/backend.h so tensor parallelism can all-reduce between them (MAX, SUM, SUM):
//   1. xent_stats:     row max over the valid columns, and the target's logit (0 when
//                      the target is not among this shard's valid columns, or ignored);
//   2. xent_sumexp:    sum of exp(logit - row max) over the valid columns;
//   3. xent_loss_grad: loss, top-1 hit, and the logits overwritten by the gradient
//                      grad_scale * (softmax - onehot), 0 in the padding columns.
// And a decoding step's greedy draw (logits_argmax): each row's first column of its largest
// logit, so that B ids leave the device rather than B rows of logits.
// Without tensor parallelism phases 1 and 2 run as one pass (xent_stats_sumexp, a running
// max), so the logits are read twice and written once.
// One block per row; block reductions in a fixed order, so the results are deterministic.
// Rows move as 16-byte vectors (kV elements) when the row length and the pointer allow it
// (the padded vocabulary is a multiple of 8), with the ragged end of the valid columns
// done one element at a time; kV = 1 otherwise.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kBlock = 256;

// Calls f(j, value) for the columns [0, end) of `row`: kV at a time up to the last whole
// vector, then one at a time. Thread order is fixed, so reductions over f stay deterministic.
template <typename T, int kV, typename F>
__device__ __forceinline__ void for_row(const T* row, int64_t end, F f) {
  const int64_t vend = kV > 1 ? (end / kV) * kV : 0;
  for (int64_t j = threadIdx.x * static_cast<int64_t>(kV); j < vend; j += static_cast<int64_t>(blockDim.x) * kV) {
    const Vec<T, kV> v = load_vec<T, kV>(row + j);
#pragma unroll
    for (int e = 0; e < kV; ++e) f(j + e, to_f32(v.v[e]));
  }
  for (int64_t j = vend + threadIdx.x; j < end; j += blockDim.x) f(j, to_f32(row[j]));
}

template <typename T, int kV>
__global__ void xent_stats_kernel(const T* logits, const int32_t* targets, int64_t vocab_start, int64_t Vl,
                                  int64_t valid, float* row_max, float* target_logit) {
  __shared__ float shared[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * Vl;
  float m = -INFINITY;
  for_row<T, kV>(row, valid, [&](int64_t, float x) { m = fmaxf(m, x); });
  m = block_max(m, shared);
  if (threadIdx.x == 0) {
    row_max[n] = m;
    const int64_t t = targets[n];
    const int64_t local = t - vocab_start;
    target_logit[n] = (t >= 0 && local >= 0 && local < valid) ? to_f32(row[local]) : 0.f;
  }
}

template <typename T, int kV>
__global__ void xent_sumexp_kernel(const T* logits, int64_t Vl, int64_t valid, const float* row_max, float* sumexp) {
  __shared__ float shared[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * Vl;
  const float m = row_max[n];
  float s = 0.f;
  for_row<T, kV>(row, valid, [&](int64_t, float x) { s += expf(x - m); });
  s = block_sum(s, shared);
  if (threadIdx.x == 0) sumexp[n] = s;
}

// Phases 1 and 2 in one pass over the logits, for a TP group of one (no all-reduce between
// them): each thread keeps a running max m and the sum s of exp(x - m), rescaling s once
// per vector when m grows; the block then takes the max M and adds s exp(m - M) over the
// threads in a fixed order. About one exp per element, as in the sum-exp pass.
template <typename T, int kV>
__global__ void xent_stats_sumexp_kernel(const T* logits, const int32_t* targets, int64_t vocab_start, int64_t Vl,
                                         int64_t valid, float* row_max, float* target_logit, float* sumexp) {
  __shared__ float shared[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * Vl;
  float m = -INFINITY, s = 0.f;
  auto add = [&](const float (&x)[kV], int count) {
    float vm = x[0];
    for (int e = 1; e < count; ++e) vm = fmaxf(vm, x[e]);
    if (vm > m) {  // exp(-inf) = 0 rescales the empty sum on the first values
      s *= expf(m - vm);
      m = vm;
    }
    for (int e = 0; e < count; ++e) s += expf(x[e] - m);
  };
  const int64_t vend = kV > 1 ? (valid / kV) * kV : 0;
  for (int64_t j = threadIdx.x * static_cast<int64_t>(kV); j < vend; j += static_cast<int64_t>(blockDim.x) * kV) {
    const Vec<T, kV> v = load_vec<T, kV>(row + j);
    float x[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) x[e] = to_f32(v.v[e]);
    add(x, kV);
  }
  for (int64_t j = vend + threadIdx.x; j < valid; j += blockDim.x) {
    float x[kV];
    x[0] = to_f32(row[j]);
    add(x, 1);
  }
  const float M = block_max(m, shared);
  s = block_sum(m == -INFINITY ? 0.f : s * expf(m - M), shared);
  if (threadIdx.x == 0) {
    row_max[n] = M;
    sumexp[n] = s;
    const int64_t t = targets[n];
    const int64_t local = t - vocab_start;
    target_logit[n] = (t >= 0 && local >= 0 && local < valid) ? to_f32(row[local]) : 0.f;
  }
}

template <typename T, int kV>
__global__ void xent_loss_grad_kernel(T* logits, const int32_t* targets, int64_t vocab_start, int64_t Vl,
                                      int64_t valid, const float* row_max, const float* sumexp,
                                      const float* target_logit, float* losses, float* correct, float grad_scale) {
  const int64_t n = blockIdx.x;
  T* row = logits + n * Vl;
  const int64_t t = targets[n];
  const bool ignored = t < 0;
  const float m = row_max[n], se = sumexp[n], tl = target_logit[n];
  if (threadIdx.x == 0) {
    losses[n] = ignored ? 0.f : logf(se) + m - tl;
    correct[n] = (!ignored && tl >= m) ? 1.f : 0.f;
  }
  const int64_t local = ignored ? -1 : t - vocab_start;
  const float inv = 1.0f / se;
  auto grad = [&](int64_t j, float x) {
    float g = 0.f;
    if (!ignored && j < valid) {
      g = expf(x - m) * inv;
      if (j == local) g -= 1.0f;
      g *= grad_scale;
    }
    return g;
  };
  const int64_t vend = kV > 1 ? (Vl / kV) * kV : 0;
  for (int64_t j = threadIdx.x * static_cast<int64_t>(kV); j < vend; j += static_cast<int64_t>(blockDim.x) * kV) {
    Vec<T, kV> v = load_vec<T, kV>(row + j);
#pragma unroll
    for (int e = 0; e < kV; ++e) v.v[e] = from_f32<T>(grad(j + e, to_f32(v.v[e])));
    store_vec<T, kV>(row + j, v);
  }
  for (int64_t j = vend + threadIdx.x; j < Vl; j += blockDim.x) row[j] = from_f32<T>(grad(j, to_f32(row[j])));
}

// Launches kernel<T, kV> with 16-byte vectors when the rows allow them.
template <typename T, typename Launch>
void with_vector_width(const Tensor& logits, Launch launch) {
  if (vector_width<T>(logits.cols(), {logits.data}) > 1) {
    launch(std::integral_constant<int, kVec16<T>>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

void check_rows(const char* op, const Tensor& t, int64_t N, const char* what) {
  TRIDENT_CHECK(t.dtype == DType::F32 && t.numel() == N, op, ": ", what, " must be f32 [", N, "], got ",
                dtype_name(t.dtype), " ", t.shape.str());
}

void check_logits(const char* op, const Tensor& logits, int64_t valid) {
  TRIDENT_CHECK(is_float(logits.dtype), op, ": logits must be a float tensor");
  TRIDENT_CHECK(valid >= 0 && valid <= logits.cols(), op, ": vocab_valid ", valid, " for logits ",
                logits.shape.str());
}

void check_targets(const char* op, const Tensor& targets, int64_t N) {
  TRIDENT_CHECK(targets.dtype == DType::I32 && targets.numel() == N, op, ": targets must be int32 [", N, "]");
}

unsigned rows_grid(int64_t N) { return static_cast<unsigned>(N); }

// A candidate of logits_argmax: a logit and its column; `column` = the row's valid count
// stands for none yet.
struct Candidate {
  float value;
  int64_t column;
};

// The larger, or of equal logits the lower column: the order-free form of "the first column
// of the largest", so that the threads' and warps' candidates combine in any order. NaN is
// never larger, nor equal.
__device__ __forceinline__ Candidate better(Candidate a, Candidate b) {
  return (b.value > a.value || (b.value == a.value && b.column < a.column)) ? b : a;
}

// The best of a warp's candidates, in lane 0.
__device__ __forceinline__ Candidate warp_best(Candidate c) {
  for (int offset = 16; offset > 0; offset >>= 1)
    c = better(c, Candidate{__shfl_down_sync(0xffffffffu, c.value, offset),
                            __shfl_down_sync(0xffffffffu, c.column, offset)});
  return c;
}

// A row a block (kArgmaxBlock threads): each thread's candidate over its columns, then the
// warps' by shuffles, then the block's through shared memory. A row whose logits are all
// NaN gives column 0.
constexpr int kArgmaxBlock = 1024;

template <typename T, int kV>
__global__ void __launch_bounds__(kArgmaxBlock)
    logits_argmax_kernel(const T* logits, int64_t Vl, int64_t valid, float* values, int32_t* ids) {
  __shared__ Candidate warps[kArgmaxBlock / 32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * Vl;
  Candidate best{-INFINITY, valid};
  for_row<T, kV>(row, valid, [&](int64_t j, float x) { best = better(best, Candidate{x, j}); });
  best = warp_best(best);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warps[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = warp_best(lane < static_cast<int>(blockDim.x >> 5) ? warps[lane] : Candidate{-INFINITY, valid});
    if (lane == 0) {
      const int64_t column = best.column < valid ? best.column : 0;
      ids[n] = static_cast<int32_t>(column);
      values[n] = to_f32(row[column]);
    }
  }
}

}  // namespace

void xent_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                const Tensor& row_max, const Tensor& target_logit, cudaStream_t s) {
  const char* op = "xent_stats";
  check_logits(op, logits, vocab_valid);
  const int64_t N = logits.rows(), Vl = logits.cols();
  check_targets(op, targets, N);
  check_rows(op, row_max, N, "row_max");
  check_rows(op, target_logit, N, "target_logit");
  if (N == 0) return;
  dispatch_float(logits.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    with_vector_width<T>(logits, [&](auto kv) {
      xent_stats_kernel<T, kv.value><<<rows_grid(N), kBlock, 0, s>>>(logits.ptr<T>(), targets.ptr<int32_t>(),
                                                                     vocab_start, Vl, vocab_valid,
                                                                     row_max.ptr<float>(), target_logit.ptr<float>());
    });
  });
  CUDA_CHECK_LAUNCH();
}

void xent_sumexp(const Tensor& logits, int64_t vocab_valid, const Tensor& row_max, const Tensor& sumexp,
                 cudaStream_t s) {
  const char* op = "xent_sumexp";
  check_logits(op, logits, vocab_valid);
  const int64_t N = logits.rows(), Vl = logits.cols();
  check_rows(op, row_max, N, "row_max");
  check_rows(op, sumexp, N, "sumexp");
  if (N == 0) return;
  dispatch_float(logits.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    with_vector_width<T>(logits, [&](auto kv) {
      xent_sumexp_kernel<T, kv.value><<<rows_grid(N), kBlock, 0, s>>>(logits.ptr<T>(), Vl, vocab_valid,
                                                                      row_max.ptr<float>(), sumexp.ptr<float>());
    });
  });
  CUDA_CHECK_LAUNCH();
}

void xent_stats_sumexp(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                       const Tensor& row_max, const Tensor& target_logit, const Tensor& sumexp, cudaStream_t s) {
  const char* op = "xent_stats_sumexp";
  check_logits(op, logits, vocab_valid);
  const int64_t N = logits.rows(), Vl = logits.cols();
  check_targets(op, targets, N);
  check_rows(op, row_max, N, "row_max");
  check_rows(op, target_logit, N, "target_logit");
  check_rows(op, sumexp, N, "sumexp");
  if (N == 0) return;
  dispatch_float(logits.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    with_vector_width<T>(logits, [&](auto kv) {
      xent_stats_sumexp_kernel<T, kv.value><<<rows_grid(N), kBlock, 0, s>>>(
          logits.ptr<T>(), targets.ptr<int32_t>(), vocab_start, Vl, vocab_valid, row_max.ptr<float>(),
          target_logit.ptr<float>(), sumexp.ptr<float>());
    });
  });
  CUDA_CHECK_LAUNCH();
}

void logits_argmax(const Tensor& logits, int64_t vocab_valid, const Tensor& values, const Tensor& ids,
                   cudaStream_t s) {
  const char* op = "logits_argmax";
  check_logits(op, logits, vocab_valid);
  TRIDENT_CHECK(vocab_valid >= 1, op, ": vocab_valid ", vocab_valid, ": no column to draw");
  const int64_t N = logits.rows(), Vl = logits.cols();
  check_rows(op, values, N, "values");
  TRIDENT_CHECK(ids.dtype == DType::I32 && ids.numel() == N, op, ": ids must be int32 [", N, "]");
  if (N == 0) return;
  dispatch_float(logits.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    with_vector_width<T>(logits, [&](auto kv) {
      logits_argmax_kernel<T, kv.value><<<rows_grid(N), kArgmaxBlock, 0, s>>>(logits.ptr<T>(), Vl, vocab_valid,
                                                                              values.ptr<float>(), ids.ptr<int32_t>());
    });
  });
  CUDA_CHECK_LAUNCH();
}

void xent_loss_grad(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                    const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, const Tensor& losses,
                    const Tensor& correct, float grad_scale, cudaStream_t s) {
  const char* op = "xent_loss_grad";
  check_logits(op, logits, vocab_valid);
  const int64_t N = logits.rows(), Vl = logits.cols();
  check_targets(op, targets, N);
  check_rows(op, row_max, N, "row_max");
  check_rows(op, sumexp, N, "sumexp");
  check_rows(op, target_logit, N, "target_logit");
  check_rows(op, losses, N, "losses");
  check_rows(op, correct, N, "correct");
  if (N == 0) return;
  dispatch_float(logits.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    with_vector_width<T>(logits, [&](auto kv) {
      xent_loss_grad_kernel<T, kv.value><<<rows_grid(N), kBlock, 0, s>>>(
          logits.ptr<T>(), targets.ptr<int32_t>(), vocab_start, Vl, vocab_valid, row_max.ptr<float>(),
          sumexp.ptr<float>(), target_logit.ptr<float>(), losses.ptr<float>(), correct.ptr<float>(), grad_scale);
    });
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
