// DcpWriter's folders read back by DcpCheckpoint (whose own tests build folders byte by byte from
// torch's definitions): a 3-D tensor in pieces from two ranks read as boxes across them, a bf16
// tensor, pickled objects at their byte ranges, and the refusals of pieces that cannot be.
// tests/e2e/megatron_resume.sh loads the writer's folders with torch too.
#include "ckpt/torch_dcp_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "ckpt/pickle_writer.h"
#include "ckpt/torch_dcp.h"
#include "ckpt_test_util.h"
#include "core/error.h"

namespace trident {
namespace {

using testing::ScratchDir;

// Element (i, j, k) of the [2, 6, 4] tensor: exact in bf16 too.
float value(int64_t i, int64_t j, int64_t k) { return static_cast<float>(i * 100 + j * 10 + k) - 120.0f; }

// The box at (i0, j0, k0) of shape (ni, nj, nk), row-major.
std::vector<float> box(int64_t i0, int64_t j0, int64_t k0, int64_t ni, int64_t nj, int64_t nk) {
  std::vector<float> out;
  for (int64_t i = i0; i < i0 + ni; ++i)
    for (int64_t j = j0; j < j0 + nj; ++j)
      for (int64_t k = k0; k < k0 + nk; ++k) out.push_back(value(i, j, k));
  return out;
}

std::string pickled_list_of_none() {
  pickle::Writer w;
  w.begin_list();
  w.none();
  w.end();
  return w.finish();
}

TEST(TorchDcpWriter, ReadsBackThroughTheReader) {
  ScratchDir dir;
  {
    DcpWriter w(dir.path());
    // Layers stacked on the first axis, rows split over two ranks (as Megatron-core saves).
    for (int64_t i = 0; i < 2; ++i)
      for (int rank = 0; rank < 2; ++rank)
        w.add_tensor(rank, "decoder.layers.w", {2, 6, 4}, {i, 3 * rank, 0}, {1, 3, 4}, box(i, 3 * rank, 0, 1, 3, 4),
                     DType::F32);
    w.add_tensor(1, "b16", {2, 6, 4}, {0, 0, 0}, {2, 6, 4}, box(0, 0, 0, 2, 6, 4), DType::BF16);
    w.add_object(0, "decoder.layers.w._extra_state/shard_0_2", pickled_list_of_none());
    w.finish();
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "__0_0.distcp"));
  EXPECT_TRUE(std::filesystem::exists(dir / "__1_0.distcp"));
  const DcpCheckpoint c(dir.path());
  ASSERT_EQ(c.tensors().size(), 2u);
  const DcpTensor& t = c.tensors().at("decoder.layers.w");
  EXPECT_TRUE(t.problem.empty()) << t.problem;
  EXPECT_EQ(t.dtype, TorchDType::F32);
  EXPECT_EQ(t.size, (std::vector<int64_t>{2, 6, 4}));
  EXPECT_EQ(t.chunks.size(), 4u);
  // Boxes across the pieces of both ranks and both layers.
  EXPECT_EQ(c.read_f32("decoder.layers.w", {0, 0, 0}, {2, 6, 4}), box(0, 0, 0, 2, 6, 4));
  EXPECT_EQ(c.read_f32("decoder.layers.w", {1, 2, 1}, {1, 3, 2}), box(1, 2, 1, 1, 3, 2));
  EXPECT_EQ(c.tensors().at("b16").dtype, TorchDType::BF16);
  EXPECT_EQ(c.read_f32("b16", {0, 0, 0}, {2, 6, 4}), box(0, 0, 0, 2, 6, 4));
  ASSERT_EQ(c.objects(), (std::vector<std::string>{"decoder.layers.w._extra_state/shard_0_2"}));
  const auto obj = c.open_object("decoder.layers.w._extra_state/shard_0_2");
  ASSERT_EQ(obj->root().kind, pickle::Kind::List);
  ASSERT_EQ(obj->root().items.size(), 1u);
  EXPECT_EQ(obj->root().items[0]->kind, pickle::Kind::None);
}

TEST(TorchDcpWriter, RefusesPiecesThatCannotBe) {
  ScratchDir dir;
  DcpWriter w(dir.path());
  // Outside the tensor, of another rank than it, with data of another length.
  EXPECT_THROW(w.add_tensor(0, "x", {4}, {2}, {3}, {1, 2, 3}, DType::F32), InternalError);
  EXPECT_THROW(w.add_tensor(0, "x", {4}, {0, 0}, {2, 2}, {1, 2, 3, 4}, DType::F32), InternalError);
  EXPECT_THROW(w.add_tensor(0, "x", {4}, {0}, {2}, {1, 2, 3}, DType::F32), InternalError);
  w.add_tensor(0, "x", {4}, {0}, {2}, {1, 2}, DType::F32);
  // Another piece of x in another dtype or size; an object under a used key.
  EXPECT_THROW(w.add_tensor(0, "x", {4}, {2}, {2}, {3, 4}, DType::F16), InternalError);
  EXPECT_THROW(w.add_tensor(0, "x", {5}, {2}, {2}, {3, 4}, DType::F32), InternalError);
  EXPECT_THROW(w.add_object(0, "x", pickled_list_of_none()), InternalError);
}

}  // namespace
}  // namespace trident
