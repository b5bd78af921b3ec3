// The pickle writer: its bytes opcode by opcode for small values (the pickletools table), and
// what the reader makes of a Namespace, nested dicts and a tensor it wrote, through a torch
// zip file. (tests/e2e/megatron_import.sh has torch.load read the writer's files.)
#include "ckpt/pickle_writer.h"

#include <gtest/gtest.h>

#include <cstring>

#include "ckpt/pickle_reader.h"
#include "ckpt/torch_file.h"
#include "ckpt_test_util.h"
#include "core/error.h"

namespace trident {
namespace {

using pickle::Kind;
using testing::ScratchDir;

TEST(PickleWriter, BytesOfSmallValues) {
  pickle::Writer w;
  w.begin_tuple();
  w.integer(1);
  w.integer(-2);
  w.integer(int64_t{1} << 40);
  w.str("ab");
  w.none();
  w.boolean(true);
  w.real(0.5);
  w.end();
  const std::string want = std::string("\x80\x02(J\x01\x00\x00\x00J\xfe\xff\xff\xff\x8a\x08", 15) +
                           std::string("\x00\x00\x00\x00\x00\x01\x00\x00", 8) + std::string("X\x02\x00\x00\x00" "ab", 7) +
                           "N\x88" + std::string("G\x3f\xe0\x00\x00\x00\x00\x00\x00", 9) + "t.";
  EXPECT_EQ(w.finish(), want);
}

TEST(PickleWriter, ReadBackThroughATorchFile) {
  ScratchDir dir;
  const std::string path = dir.path() + "/model_optim_rng.pt";
  pickle::Writer w;
  w.begin_dict();
  w.str("args");
  w.begin_namespace();
  w.str("num_layers");
  w.integer(-(int64_t{1} << 35));
  w.str("params_dtype");
  w.global("torch", "bfloat16");
  w.end();
  w.str("model");
  w.begin_ordered_dict();
  w.str("w");
  w.tensor("BFloat16Storage", "0", {2, 3});
  w.str("empty");
  w.begin_dict();
  w.end();
  w.end();
  w.end();
  const std::vector<float> values = {1, -2, 0.5f, 3, 1024, -0.25f};
  std::string bytes;
  for (float v : values) {
    const uint16_t h = float_to_bf16(v);
    bytes.append(reinterpret_cast<const char*>(&h), 2);
  }
  write_torch_file(path, w.finish(), {{"0", std::vector<char>(bytes.begin(), bytes.end())}});
  const TorchFile f(path);
  ASSERT_TRUE(f.is_zip());
  const pickle::Value* args = f.root().get("args");
  ASSERT_TRUE(args && args->kind == Kind::Object);
  EXPECT_EQ(args->get("num_layers")->integer, -(int64_t{1} << 35));
  EXPECT_TRUE(args->get("params_dtype")->is_global("torch", "bfloat16"));
  const pickle::Value* model = f.root().get("model");
  ASSERT_TRUE(model && model->kind == Kind::Dict);
  const TorchTensor* t = TorchFile::tensor(*model->get("w"));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->stride, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(f.read_f32(*t, "w"), values);
  EXPECT_EQ(model->get("empty")->entries.size(), 0u);
  // An existing file is not overwritten.
  EXPECT_THROW(write_torch_file(path, "x", {}), IoError);
}

}  // namespace
}  // namespace trident
