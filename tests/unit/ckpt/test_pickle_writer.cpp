// The pickle writer: its bytes opcode by opcode for small values (the pickletools table), and
// what the reader makes of a Namespace, nested dicts and a tensor it wrote, through a torch
// zip file, whose records start on 64-byte boundaries as torch.save's. (tests/e2e/
// megatron_import.sh has torch.load read the writer's files.)
#include "ckpt/pickle_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

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

TEST(PickleWriter, BytesOfLists) {
  pickle::Writer w;
  w.begin_list();
  w.integer(7);
  w.begin_list();
  w.end();
  w.end();
  // EMPTY_LIST MARK BININT 7 EMPTY_LIST MARK APPENDS APPENDS STOP
  EXPECT_EQ(w.finish(), std::string("\x80\x02](J\x07\x00\x00\x00](ee.", 14));
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

// Every record's data starts at a multiple of 64 bytes, as torch.save's (torch.load(mmap=True)
// maps tensors in place): read from the zip's local headers (PKWARE APPNOTE 4.3.7: signature,
// flags at 6, compressed size at 18, name and extra field lengths at 26 and 28, then the
// name, the extra fields and the data), for storages of sizes that leave every remainder.
TEST(TorchFileWriter, RecordsStartOn64ByteBoundaries) {
  ScratchDir dir;
  const std::string path = dir.path() + "/aligned.pt";
  std::vector<TorchStorageBytes> storages;
  for (int n : {0, 1, 3, 60, 61, 62, 63, 64, 65, 127, 1000}) {
    std::vector<char> bytes(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>(n + i);
    storages.push_back({std::to_string(storages.size() * 7), bytes});
  }
  write_torch_file(path, std::string(37, 'p'), storages);
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto u16 = [&](size_t at) { return static_cast<uint32_t>(static_cast<unsigned char>(file[at]) |
                                                           static_cast<unsigned char>(file[at + 1]) << 8); };
  auto u32 = [&](size_t at) { return u16(at) | u16(at + 2) << 16; };
  std::map<std::string, std::string> records;
  size_t at = 0;
  while (at + 30 <= file.size() && u32(at) == 0x04034b50u) {
    const uint32_t flags = u16(at + 6), size = u32(at + 18), name_len = u16(at + 26), extra_len = u16(at + 28);
    ASSERT_EQ(flags & 8u, 0u) << "a data descriptor: the sizes are not in the local header";
    const std::string name = file.substr(at + 30, name_len);
    const size_t data = at + 30 + name_len + extra_len;
    EXPECT_EQ(data % kTorchRecordAlignment, 0u) << name << "'s data at byte " << data;
    records[name] = file.substr(data, size);
    at = data + size;
  }
  ASSERT_EQ(records.size(), storages.size() + 3);  // and data.pkl, version, byteorder
  EXPECT_EQ(records["aligned/data.pkl"], std::string(37, 'p'));
  for (const TorchStorageBytes& s : storages)
    EXPECT_EQ(records["aligned/data/" + s.key], std::string(s.bytes.begin(), s.bytes.end())) << s.key;
  EXPECT_EQ(records["aligned/version"], "3\n");
}

}  // namespace
}  // namespace trident
