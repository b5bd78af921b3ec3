// XXH3 file checksums: known values, a flipped byte and truncation are detected and named.
#include "ckpt/checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ckpt_test_util.h"

namespace trident {
namespace {

using testing::expect_io_error;
using testing::ScratchDir;
using testing::spit;

TEST(Checksum, KnownValues) {
  // XXH3_64bits with seed 0: the empty input hashes to 0x2d06800538d394c2 (xxHash's own test
  // vector), printed as 16 lowercase hex digits.
  EXPECT_EQ(checksum_bytes("", 0), "2d06800538d394c2");
  EXPECT_EQ(xxh3_hex(0xabcULL), "0000000000000abc");
  ScratchDir dir;
  spit(dir / "empty", "");
  EXPECT_EQ(checksum_file(dir / "empty"), "2d06800538d394c2");
}

TEST(Checksum, StreamingMatchesOneShotAndFile) {
  std::mt19937 g(7);
  std::string data(10'000'123, '\0');  // spans several 4 MiB read chunks
  for (auto& c : data) c = static_cast<char>(g());
  Xxh3Hasher h;
  for (size_t at = 0; at < data.size(); at += 777'777) h.update(data.data() + at, std::min<size_t>(777'777, data.size() - at));
  EXPECT_EQ(h.hex(), checksum_bytes(data.data(), data.size()));
  ScratchDir dir;
  spit(dir / "f", data);
  EXPECT_EQ(checksum_file(dir / "f"), h.hex());
  EXPECT_NO_THROW(verify_file(dir / "f", h.hex(), static_cast<int64_t>(data.size())));
  EXPECT_NO_THROW(verify_file(dir / "f", h.hex()));
}

TEST(Checksum, MappedFilesOverManyWindows) {
  // checksum_file maps the file and faults it in ahead of the hash in 32 MiB windows; the
  // result must be the plain one-shot hash, for sizes around the window.
  ScratchDir dir;
  std::mt19937_64 g(3);
  std::string data((size_t{70} << 20) + 5, '\0');
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    const uint64_t v = g();
    std::memcpy(data.data() + i, &v, 8);
  }
  for (const size_t n : {size_t{32} << 20, (size_t{32} << 20) + 1, data.size()}) {
    spit(dir / "m", data.substr(0, n));
    EXPECT_EQ(checksum_file(dir / "m"), checksum_bytes(data.data(), n)) << n << " bytes";
    EXPECT_EQ(checksum_mapped("m", data.data(), n), checksum_bytes(data.data(), n)) << n << " bytes";
  }
  const std::string good = checksum_bytes(data.data(), data.size());
  data[data.size() / 2] ^= 0x40;
  spit(dir / "m", data);
  expect_io_error([&] { verify_file(dir / "m", good, static_cast<int64_t>(data.size())); },
                  {dir / "m", "checksum mismatch"});
}

TEST(Checksum, DetectsFlippedByteAndTruncation) {
  std::mt19937 g(11);
  std::string data(100'000, '\0');
  for (auto& c : data) c = static_cast<char>(g());
  ScratchDir dir;
  const std::string path = dir / "model.safetensors";
  spit(path, data);
  const std::string good = checksum_file(path);
  const int64_t size = static_cast<int64_t>(data.size());
  for (size_t pos : {size_t{0}, size_t{4321}, data.size() - 1}) {
    std::string bad = data;
    bad[pos] ^= 0x01;
    spit(path, bad);
    expect_io_error([&] { verify_file(path, good, size); }, {path, "checksum mismatch", good});
    expect_io_error([&] { verify_file(path, good); }, {path, "checksum mismatch"});
  }
  spit(path, data.substr(0, data.size() - 10));
  expect_io_error([&] { verify_file(path, good, size); }, {path, "truncated", "99990 bytes", "expected 100000"});
  expect_io_error([&] { verify_file(path, good); }, {path, "checksum mismatch"});
  spit(path, data + "x");
  expect_io_error([&] { verify_file(path, good, size); }, {path, "size mismatch"});
  expect_io_error([&] { verify_file(dir / "gone", good, size); }, {"gone", "missing"});
  spit(path, data);
  EXPECT_NO_THROW(verify_file(path, good, size));
}

}  // namespace
}  // namespace trident
