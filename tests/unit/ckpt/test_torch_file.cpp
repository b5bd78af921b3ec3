// torch.save files assembled here from the format's description (a zip archive written with
// libzip, entries stored; the legacy format's pickles and raw records byte by byte): tensors
// with storage offsets and strides in fp16, bf16 and fp32, shared storages, and one-line
// errors for what cannot be read.
#include "ckpt/torch_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "ckpt_test_util.h"
#include "core/dtype.h"
#include "core/error.h"
#include "pickle_bytes.h"
#include "zip_test_util.h"

namespace trident {
namespace {

using testing::PickleBytes;
using testing::io_error_of;
using testing::ScratchDir;
using testing::spit;
using testing::write_zip;

std::string halves(const std::vector<float>& v, bool bf16) {
  std::string out;
  for (float x : v) {
    const uint16_t h = bf16 ? float_to_bf16(x) : float_to_half(x);
    out.append(reinterpret_cast<const char*>(&h), 2);
  }
  return out;
}

// {'w': a [2, 3] fp16 tensor at offset 1 of a 7-element storage, stride (1, 2) (a transposed
//  view: w[i][j] = storage[1 + i + 2 j]), 'b': a [2, 2] bf16 tensor, 'v': a second view of the
//  fp16 storage, [1, 2] at offset 5}
PickleBytes sample_pickle() {
  PickleBytes p;
  p.op('}').mark();
  p.str("w").tensor2d("HalfStorage", "0", 7, 1, 2, 3, 1, 2);
  p.str("b").tensor2d("BFloat16Storage", "1", 4, 0, 2, 2, 2, 1);
  p.str("v").tensor2d("HalfStorage", "0", 7, 5, 1, 2, 2, 1);
  return p.op('u');
}
const std::vector<float> kHalfStorage = {9, 0, 1, 2, 3, 4, 5}, kBf16Storage = {1.5f, -2, 0.25f, 8};

void expect_sample(const TorchFile& f) {
  const auto* w = TorchFile::tensor(*f.root().get("w"));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->dtype, TorchDType::F16);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  // Naive strided indexing of the storage.
  std::vector<float> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(kHalfStorage[1 + i * 1 + j * 2]);
  EXPECT_EQ(f.read_f32(*w, "w"), want);
  EXPECT_EQ(f.read_f32(*TorchFile::tensor(*f.root().get("b")), "b"), kBf16Storage);
  EXPECT_EQ(f.read_f32(*TorchFile::tensor(*f.root().get("v")), "v"), (std::vector<float>{4, 5}));
}

TEST(TorchFile, ZipFormat) {
  ScratchDir dir;
  const std::string path = dir.path() + "/model_optim_rng.pt";
  ASSERT_NO_FATAL_FAILURE(write_zip(path, {{"model_optim_rng/data.pkl", sample_pickle().stop().bytes()},
                   {"model_optim_rng/data/0", halves(kHalfStorage, false)},
                   {"model_optim_rng/data/1", halves(kBf16Storage, true)},
                   {"model_optim_rng/version", "3\n"},
                   {"model_optim_rng/byteorder", "little"}}));
  const TorchFile f(path);
  EXPECT_TRUE(f.is_zip());
  expect_sample(f);
}

// PyTorch's distributed checkpoint stores each tensor as a torch.save archive at a byte range
// of a larger file: the archive is read from there, its own offsets counted from its start.
TEST(TorchFile, ZipArchiveAtAByteRange) {
  ScratchDir dir;
  const std::string zip_path = dir.path() + "/piece.pt", path = dir.path() + "/__0_0.distcp";
  ASSERT_NO_FATAL_FAILURE(write_zip(zip_path, {{"archive/data.pkl", sample_pickle().stop().bytes()},
                                               {"archive/data/0", halves(kHalfStorage, false)},
                                               {"archive/data/1", halves(kBf16Storage, true)}}));
  const std::string archive = testing::slurp(zip_path);
  spit(path, std::string(100, 'x') + archive + std::string(50, 'y'));
  const TorchFile f(path, 100, archive.size());
  EXPECT_TRUE(f.is_zip());
  EXPECT_EQ(f.path(), path + " at byte 100");
  expect_sample(f);
  EXPECT_EQ(io_error_of([&] { TorchFile g(path, 100, archive.size() + 51); }),
            path + " at byte 100: " + std::to_string(archive.size() + 51) + " bytes lie past the file's end (" +
                std::to_string(archive.size() + 150) + " bytes)");
  EXPECT_NE(io_error_of([&] { TorchFile g(path, 99, archive.size()); }).find(path + " at byte 99: not a readable zip archive"),
            std::string::npos);
}

TEST(TorchFile, LegacyFormat) {
  ScratchDir dir;
  const std::string path = dir.path() + "/old.pt";
  std::string bytes = PickleBytes().long1("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19").stop().bytes();
  bytes += PickleBytes().int2(1001).stop().bytes();
  bytes += PickleBytes().op('}').str("little_endian").op('\x88').op('s').stop().bytes();
  bytes += sample_pickle().stop().bytes();
  bytes += PickleBytes().op(']').mark().str("0").str("1").op('e').stop().bytes();
  const auto record = [&](int64_t n, const std::string& data) {
    bytes.append(reinterpret_cast<const char*>(&n), 8);
    bytes += data;
  };
  record(7, halves(kHalfStorage, false));
  record(4, halves(kBf16Storage, true));
  spit(path, bytes);
  const TorchFile f(path);
  EXPECT_FALSE(f.is_zip());
  expect_sample(f);

  spit(path, bytes.substr(0, bytes.size() - 3));
  EXPECT_EQ(io_error_of([&] { TorchFile g(path); }), path + ": truncated in the data of storage '1'");
  spit(path, "not a checkpoint");
  EXPECT_NE(io_error_of([&] { TorchFile g(path); }).find(path + ": pickle: "), std::string::npos);
}

TEST(TorchFile, OneLineErrors) {
  ScratchDir dir;
  const std::string path = dir.path() + "/x.pt";
  // A tensor reaching past its storage.
  PickleBytes past;
  past.op('}').str("w").tensor2d("FloatStorage", "0", 4, 2, 1, 3, 3, 1).op('s').stop();
  ASSERT_NO_FATAL_FAILURE(write_zip(path, {{"x/data.pkl", past.bytes()}, {"x/data/0", std::string(16, '\0')}}));
  {
    const TorchFile f(path);
    EXPECT_EQ(io_error_of([&] { f.read_f32(*TorchFile::tensor(*f.root().get("w")), "'w'"); }),
              path + ": 'w': a span of 3 elements from offset 2 lies outside its storage of 4");
  }
  // Strides whose span overflows int64 (it must not wrap around into a small extent).
  PickleBytes huge;
  huge.op('}').str("w").global("torch._utils", "_rebuild_tensor_v2").mark();
  huge.mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu").int1(4).op('t').op('Q');
  huge.int1(0).int1(32).int1(32).op('\x86').long1(std::string("\xf8\xff\xff\xff\xff\xff\xde\x7b", 8)).int1(1).op('\x86');
  huge.op('\x89').global("collections", "OrderedDict").op(')').op('R').op('t').op('R').op('s').stop();
  ASSERT_NO_FATAL_FAILURE(write_zip(path, {{"x/data.pkl", huge.bytes()}, {"x/data/0", std::string(16, '\0')}}));
  {
    const TorchFile f(path);
    EXPECT_EQ(io_error_of([&] { f.read_f32(*TorchFile::tensor(*f.root().get("w")), "'w'"); }), path + ": 'w': implausibly large");
  }
  // A storage whose entry is missing or short.
  PickleBytes ok;
  ok.op('}').str("w").tensor2d("FloatStorage", "0", 4, 0, 2, 2, 2, 1).op('s').stop();
  ASSERT_NO_FATAL_FAILURE(write_zip(path, {{"x/data.pkl", ok.bytes()}}));
  {
    const TorchFile f(path);
    EXPECT_EQ(io_error_of([&] { f.read_f32(*TorchFile::tensor(*f.root().get("w")), "'w'"); }),
              path + ": zip entry x/data/0 missing (storage '0')");
  }
  ASSERT_NO_FATAL_FAILURE(write_zip(path, {{"x/data.pkl", ok.bytes()}, {"x/data/0", std::string(12, '\0')}}));
  {
    const TorchFile f(path);
    EXPECT_EQ(io_error_of([&] { f.read_f32(*TorchFile::tensor(*f.root().get("w")), "'w'"); }),
              path + ": zip entry x/data/0 holds 12 bytes, fewer than its storage's 16");
  }
  // Integer tensors are not weights.
  PickleBytes ints;
  ints.op('}').str("w").tensor2d("LongStorage", "0", 1, 0, 1, 1, 1, 1).op('s').stop();
  ASSERT_NO_FATAL_FAILURE(write_zip(path, {{"x/data.pkl", ints.bytes()}, {"x/data/0", std::string(8, '\0')}}));
  {
    const TorchFile f(path);
    EXPECT_EQ(io_error_of([&] { f.read_f32(*TorchFile::tensor(*f.root().get("w")), "'w'"); }),
              path + ": 'w': dtype torch.int64 is not a floating-point type");
  }
  ASSERT_NO_FATAL_FAILURE(write_zip(path, {{"x/data.pkl", ok.bytes()}, {"x/byteorder", "big"}}));
  EXPECT_EQ(io_error_of([&] { TorchFile f(path); }), path + ": byte order 'big': only little-endian files are read");
  ASSERT_NO_FATAL_FAILURE(write_zip(path, {{"other.txt", "hello"}}));
  EXPECT_EQ(io_error_of([&] { TorchFile f(path); }),
            path + ": zip archive without <name>/data.pkl: not a file torch.save wrote");
  PickleBytes unknown;
  unknown.op('}').str("w").tensor2d("ComplexFloatStorage", "0", 1, 0, 1, 1, 1, 1).op('s').stop();
  ASSERT_NO_FATAL_FAILURE(write_zip(path, {{"x/data.pkl", unknown.bytes()}}));
  EXPECT_EQ(io_error_of([&] { TorchFile f(path); }), path + ": storage type torch.ComplexFloatStorage is not supported");
}

// A zip entry whose size field claims more than its archive can hold (a corrupt central
// directory) fails before that size is allocated: a 4 GB claim costs nothing.
TEST(TorchFile, AnEntrysClaimedSizeIsBoundedByTheArchive) {
  ScratchDir dir;
  const std::string path = dir.path() + "/x.pt";
  PickleBytes ok;
  ok.op('}').str("w").tensor2d("FloatStorage", "0", 4, 0, 2, 2, 2, 1).op('s').stop();
  ASSERT_NO_FATAL_FAILURE(write_zip(path, {{"x/data.pkl", ok.bytes()}, {"x/data/0", std::string(16, '\0')}}));
  std::string bytes = testing::slurp(path);
  // The end of central directory record gives the directory's offset; its first entry's
  // uncompressed size is at byte 24 of that entry (zip's APPNOTE 4.3.12).
  const size_t eocd = bytes.rfind(std::string("PK\x05\x06", 4));
  ASSERT_NE(eocd, std::string::npos);
  uint32_t dir_offset = 0;
  std::memcpy(&dir_offset, bytes.data() + eocd + 16, 4);
  const uint32_t forged = 0xfffffff0u;
  std::memcpy(bytes.data() + dir_offset + 24, &forged, 4);
  spit(path, bytes);
  const std::string err = io_error_of([&] { TorchFile f(path); });
  EXPECT_NE(err.find("zip entry x/data.pkl claims 4294967280 bytes from"), std::string::npos) << err;
  EXPECT_NE(err.find(": a corrupt archive"), std::string::npos) << err;
}

}  // namespace
}  // namespace trident
