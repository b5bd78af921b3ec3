// Tensor's matrix view and row slices on shapes with a zero dimension: an empty weight
// shard or a k = 0 GEMM operand is [M, 0], an empty batch [0, N]. Before, rows() and
// rows_slice() divided by the zero dimension (SIGFPE).
#include <gtest/gtest.h>

#include <vector>

#include "core/tensor.h"

namespace trident {
namespace {

TEST(Tensor, RowsAndColsOfZeroSizedShapes) {
  float dummy = 0;
  const Tensor m0(&dummy, Shape{3, 0}, DType::F32, Device::Cpu);
  EXPECT_EQ(m0.rows(), 3);
  EXPECT_EQ(m0.cols(), 0);
  const Tensor b0(&dummy, Shape{2, 0, 5}, DType::F32, Device::Cpu);
  EXPECT_EQ(b0.rows(), 0);
  EXPECT_EQ(b0.cols(), 5);
  const Tensor t(&dummy, Shape{4, 3, 5}, DType::F32, Device::Cpu);
  EXPECT_EQ(t.rows(), 12);
  EXPECT_EQ(t.cols(), 5);
  EXPECT_EQ(Tensor(&dummy, Shape{7}, DType::F32, Device::Cpu).rows(), 1);
}

TEST(Tensor, RowsSliceOfZeroSizedShapes) {
  std::vector<float> v(24);
  const Tensor empty_rows(v.data(), Shape{0, 6}, DType::F32, Device::Cpu);
  EXPECT_EQ(empty_rows.rows_slice(0, 0).numel(), 0);
  const Tensor no_cols(v.data(), Shape{4, 0}, DType::F32, Device::Cpu);
  EXPECT_EQ(no_cols.rows_slice(1, 2).shape, (Shape{2, 0}));
  const Tensor t(v.data(), Shape{4, 2, 3}, DType::F32, Device::Cpu);
  const Tensor s = t.rows_slice(1, 2);
  EXPECT_EQ(s.ptr<float>(), v.data() + 6);
  EXPECT_EQ(s.shape, (Shape{2, 2, 3}));
  EXPECT_THROW(t.rows_slice(3, 2), Error);
  EXPECT_THROW(t.rows_slice(1, -1), Error);
}

}  // namespace
}  // namespace trident
