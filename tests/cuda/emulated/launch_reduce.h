// The kernels of kernels/cuda/cuda_reduce.cu on the CPU emulator, with mirrors of its host
// launchers (column_partials_accumulate, sum, has_inf_or_nan; bias_backward, its dropout
// form, sum_squares_multi, count_zeros_multi and magnitude_stats_multi run the launchers' own code): the same kernels, template arguments and launch
// geometry, host vectors for the scratch memory (filled with NaN, as device scratch holds
// garbage). Shared by test_reduce.cpp and test_layernorm.cpp (LayerNorm's dgamma/dbeta
// go through column_partials_accumulate).
// KEEP IN SYNC with the launchers in cuda_reduce.cu: a changed geometry there is not
// seen here until the mirror is updated.
//
// What it cannot check: the launchers themselves (argument checks, the scratch
// allocator, the stream and the copies back to the host).
#pragma once

#include <limits>
#include <vector>

#include "emu_cuda_common.h"
#include "emu_cuda_reduce.inc"

namespace trident::cuda::emu_reduce {
namespace {

template <typename V>
std::vector<V> nan_scratch(size_t n) {
  return std::vector<V>(n, std::numeric_limits<V>::quiet_NaN());
}

int column_chunks(int64_t rows, int64_t cols, int vector = 1) { return column_chunk_count(rows, cols, vector); }

// Two sets in one launch (LayerNorm's dgamma and dbeta).
void column_partials_accumulate(const float* pa, void* dst_a, DType dtype_a, const float* pb, void* dst_b,
                                DType dtype_b, int64_t chunks, int64_t cols) {
  emu::launch(dim3(grid_for(cols, kFinishCols, INT32_MAX), 2), dim3(kFinishCols * kFinishGroups), 0,
              column_finish_kernel, ColumnPartials{pa, AnyPtr{dst_a, dtype_a}},
              ColumnPartials{pb, AnyPtr{dst_b, dtype_b}}, static_cast<int64_t>(chunks), cols);
}

// The launchers' own passes (bias_backward_typed, extracted with the kernels), the
// partials in a host vector.
void bias_backward(const Tensor& dout, const Tensor& dbias) {
  if (dout.rows() == 0 || dout.cols() == 0) return;
  std::vector<float> partials;
  bias_backward_typed(dout, dbias, Tensor(), 1, DropoutKey{}, nullptr, [&](size_t bytes) {
    partials = nan_scratch<float>(bytes / sizeof(float));
    return partials.data();
  });
}

void dropout_bias_backward(const Tensor& dout, int T, const DropoutKey& drop, const Tensor& dx, const Tensor& dbias) {
  if (dout.rows() == 0 || dout.cols() == 0) return;
  std::vector<float> partials;
  bias_backward_typed(dout, dbias, dx, T, drop, nullptr, [&](size_t bytes) {
    partials = nan_scratch<float>(bytes / sizeof(float));
    return partials.data();
  });
}

double sum(const Tensor& t, bool squares) {
  const int64_t n = t.numel();
  if (n == 0) return 0.0;
  const int blocks = static_cast<int>(grid_for(n, kSumBlock, kSumMaxBlocks));
  std::vector<double> partials = nan_scratch<double>(static_cast<size_t>(blocks) + 1);
  dispatch_float(t.dtype, "sum", [&](auto tag) {
    using T = decltype(tag);
    if (squares)
      emu::launch(dim3(blocks), dim3(kSumBlock), 0, sum_partials_kernel<T, true>, t.ptr<T>(), n, partials.data());
    else
      emu::launch(dim3(blocks), dim3(kSumBlock), 0, sum_partials_kernel<T, false>, t.ptr<T>(), n, partials.data());
  });
  emu::launch(dim3(1), dim3(kSumMaxBlocks), 0, sum_many_partials_kernel, partials.data(), int64_t{blocks},
              partials.data() + blocks);
  return partials[blocks];
}

// The launcher's plan (plan_squares_launches, extracted with the kernels); max_blocks
// below the launcher's kSquaresBlocks makes each block add several chunks.
template <Summand kWhat>
double multi_sum(const std::vector<Tensor>& list, int max_blocks) {
  std::vector<double> partials;
  plan_squares_launches(list, max_blocks, [&](const SquaresTable& tab, int blocks, DType dtype) {
    const size_t base = partials.size();
    partials.resize(base + static_cast<size_t>(blocks), std::numeric_limits<double>::quiet_NaN());
    dispatch_float(dtype, "multi_sum", [&](auto tag) {
      using T = decltype(tag);
      emu::launch(dim3(blocks), dim3(kSumBlock), 0, multi_sum_kernel<T, kWhat>, tab, partials.data() + base);
    });
  });
  if (partials.empty()) return 0.0;
  const int64_t written = static_cast<int64_t>(partials.size());
  partials.push_back(std::numeric_limits<double>::quiet_NaN());
  emu::launch(dim3(1), dim3(kSumMaxBlocks), 0, sum_many_partials_kernel, partials.data(), written,
              partials.data() + written);
  return partials[written];
}

double sum_squares_multi(const std::vector<Tensor>& list, int max_blocks = kSquaresBlocks) {
  return multi_sum<Summand::kSquare>(list, max_blocks);
}

int64_t count_zeros_multi(const std::vector<Tensor>& list, int max_blocks = kSquaresBlocks) {
  return static_cast<int64_t>(multi_sum<Summand::kIsZero>(list, max_blocks));
}

// The launcher's own passes (magnitude_stats_passes), the partials in a host vector.
MagnitudeStats magnitude_stats_multi(const std::vector<Tensor>& list, int max_blocks = kSquaresBlocks) {
  std::vector<MagnitudeStats> partials;
  const MagnitudeStats* result = magnitude_stats_passes(list, max_blocks, nullptr, [&](size_t bytes) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    partials.assign(bytes / sizeof(MagnitudeStats), MagnitudeStats{nan, nan, nan, nan});
    return partials.data();
  });
  return result ? *result : MagnitudeStats{};
}

bool has_inf_or_nan(const Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return false;
  int flag = 0;
  dispatch_float(t.dtype, "has_inf_or_nan", [&](auto tag) {
    using T = decltype(tag);
    emu::launch(dim3(grid_for(n, 256, 4096)), dim3(256), 0, inf_nan_kernel<T>, t.ptr<T>(), n, &flag);
  });
  return flag != 0;
}

}  // namespace
}  // namespace trident::cuda::emu_reduce
